"""``weirdnet bench recall --recipe zoology``: MQAR at Zoology's own recipe (Arora et al.
2023, Figure 2; ``zoology/experiments/iclr24_zoology_figure2/configs.py``), so that the
attention baseline solves the task before any mechanism is ranked on it.

The recipe, as Zoology's configs set it (every deviation the CPU forces is a named
option, written in the report):

- data: MQAR with a vocabulary of 8,192, keys and values drawn without replacement,
  queries placed by Zoology's power law (``power_a = 0.01``), (L, key-value pairs) =
  (64, 4), (128, 8), (256, 16); 100,000 training and 3,000 test sequences;
- model: one head, no feed-forward (Zoology's state mixer is the identity), dropout 0.1,
  weights N(0, 0.02); 2 layers for attention, 4 for every other mixer; a learned position
  embedding for the GPT-2-style attention only (Zoology gives the other mixers none; the
  Transformer++ keeps its rotary positions);
- training: batch 512 (256 at L = 256), the learning rates 1e-4, 4.6e-4, 2.2e-3 and 1e-2
  (``np.logspace(-4, -2, 4)``), the best chosen on validation accuracy, up to 64 epochs
  with early stopping once validation accuracy reaches 99%;
- models: every mechanism with a causal form and the Transformer++, each with and without
  a short causal convolution (``short_conv = 4``; Zoology's BaseConv uses width 3); asked
  for by name, ``transformers``' Mamba and RWKV (as in Figure 2) and Mamba-2, with their
  own blocks (:meth:`ZoologyCell.model_dict`).

The sanity gate: a (length, width) column is ranked only where the Transformer++ reaches
95% test accuracy (at its best learning rate).  Elsewhere the report prints "budget too
small: attention reaches X%" and ranks nothing in that column.  Pilot the Transformer++
first (``--mechanisms transformerpp --short-convs 0``) and size the grid from its wall
time per cell, which the report gives with what a larger machine would add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weirdnet_lab.variants import Variant

PAIRS = {64: 4, 128: 8, 256: 16}
"""Zoology Figure 2's (sequence length: key-value pairs); (512, 64) is commented out
there."""
BATCH = {64: 512, 128: 512, 256: 256, 512: 128}
VOCAB = 8192
LRS = (1e-4, 4.6e-4, 2.2e-3, 1e-2)
TRAIN_SEQUENCES, TEST_SEQUENCES = 100_000, 3000
EPOCHS = 64
WIDTHS = (64, 128, 256, 512)
SHORT_CONV = 4
ATTENTION = ("softmax", "transformerpp")
"""The variants Zoology's "attention" stands for: 2 layers (4 for the others)."""
REFERENCE = "transformerpp"
GATE = 0.95
"""Test accuracy the reference must reach before a column is ranked."""
EARLY_STOP = 0.99


def pairs(length: int) -> int:
    """Key-value pairs at ``length``: Zoology's where it set them, else length / 16."""
    return PAIRS.get(length, max(1, length // 16))


def steps_per_epoch(length: int, sequences: int = TRAIN_SEQUENCES) -> int:
    return math.ceil(sequences / BATCH.get(length, 128))


@dataclass(frozen=True)
class ZoologyCell:
    """One training run of the Zoology recipe."""

    length: int
    width: int
    variant: Variant
    short_conv: int
    lr: float
    seed: int
    epochs: int = EPOCHS
    train_sequences: int = TRAIN_SEQUENCES
    vocab_size: int = VOCAB
    diagnostic: str = "mqar"

    @property
    def key(self) -> str:
        conv = f"--conv{self.short_conv}" if self.short_conv else ""
        smaller = "" if (self.train_sequences, self.vocab_size) == (TRAIN_SEQUENCES, VOCAB) \
            else f"--n{self.train_sequences}--v{self.vocab_size}"
        shorter = "" if self.epochs == EPOCHS else f"--e{self.epochs}"
        return (f"zoology--mqar--L{self.length}--d{self.width}--{self.variant.name}{conv}"
                f"--lr{self.lr:g}{smaller}{shorter}--s{self.seed}")

    @property
    def model_label(self) -> str:
        conv = f" + conv{self.short_conv}" if self.short_conv else ""
        return f"{self.variant.label}{conv}"

    @property
    def info(self) -> dict[str, Any]:
        return {"recipe": "zoology", "diagnostic": "mqar", "length": self.length,
                "width": self.width, "variant": self.variant.name,
                "short_conv": self.short_conv, "lr": self.lr, "seed": self.seed}

    @property
    def steps(self) -> int:
        return self.epochs * steps_per_epoch(self.length, self.train_sequences)

    def model_dict(self) -> dict[str, Any]:
        """The cell's ``model`` table: weirdnet's backbone at Zoology's settings, or a
        ``transformers`` peer (``--mechanisms mamba,mamba2,rwkv``: Zoology's Figure 2
        runs Mamba and RWKV) with its own blocks at its own defaults, 4 of them as for
        every mixer but attention in Zoology.  A peer has no ``+ conv`` cell: Mamba's and
        Mamba-2's blocks already convolve their input (width 4), RWKV's shift tokens."""
        depth = 2 if self.variant.name in ATTENTION else 4
        if self.variant.peer:
            return self.variant.peer_model({"dim": self.width, "depth": depth})
        backbone = {"dim": self.width, "depth": depth,
                    "heads": 1, "d_ff": 0, "dropout": 0.1, "attn_dropout": 0.1,
                    "init_std": 0.02, "short_conv": self.short_conv,
                    **self.variant.backbone_overrides("lm")}
        if self.variant.name not in ATTENTION:
            backbone["positions"] = "none"  # Zoology: positions for attention only
        if self.variant.pattern == "local":
            backbone["mixer_options"] = {"local": {"window": max(4, self.length // 4)}}
        return {"backbone": backbone}

    def config_dict(self, work_dir: Path) -> dict[str, Any]:
        """The cell's training config (a dict ``TrainConfig.from_dict`` takes)."""
        batch = BATCH.get(self.length, 128)
        options = {"seq_len": self.length, "num_pairs": pairs(self.length),
                   "vocab_size": self.vocab_size, "placement": "power-law", "power_a": 0.01,
                   "distinct_values": True}
        epoch = steps_per_epoch(self.length, self.train_sequences)
        return {
            "data": {"dataset": "mqar", "test_split": "test",
                     "options": {**options, "num_samples": self.train_sequences},
                     "eval_options": {"num_samples": TEST_SEQUENCES}},
            "model": self.model_dict(),
            "optim": {"lr": self.lr, "weight_decay": 0.1},
            "schedule": {"name": "cosine", "warmup_steps": min(epoch, 200)},
            "train": {"steps": self.steps, "batch_size": batch, "eval_every": epoch,
                      "eval_batches": math.ceil(TEST_SEQUENCES / batch),
                      "early_stop_at": EARLY_STOP, "log_every": 20},
            "run": {"name": self.key, "out_dir": str(work_dir), "seed": self.seed},
        }


def plan(lengths, widths, variants: list[Variant], short_convs, lrs, seeds: int,
         epochs: int, train_sequences: int = TRAIN_SEQUENCES,
         vocab_size: int = VOCAB) -> list[ZoologyCell]:
    """Every cell (a peer without a short convolution only); ValueError for a length that
    cannot hold its pairs under the power-law placement, a rate that is not positive, a
    bad count or an empty grid."""
    if min(epochs, seeds, train_sequences) < 1 or any(k < 0 for k in short_convs):
        raise ValueError("--epochs, --seeds and --train-sequences must be >= 1, "
                         "--short-convs >= 0")
    if not lrs or any(not lr > 0 for lr in lrs):
        raise ValueError(f"learning rates must be > 0, got {list(lrs)}")
    for length in lengths:
        if length < 4 * pairs(length):
            raise ValueError(f"L = {length} cannot hold {pairs(length)} pairs and their "
                             "queries (power-law placement needs L >= 4 x pairs)")
    cells = [ZoologyCell(n, w, v, k, lr, s, epochs, train_sequences, vocab_size)
             for n in lengths for w in widths for v in variants
             for k in dict.fromkeys(short_convs) if not (k and v.peer)
             for lr in dict.fromkeys(lrs) for s in range(seeds)]
    if not cells:
        raise ValueError("no cells: the transformers peers run without a short "
                         "convolution only (add --short-convs 0)")
    return cells


def settled_at_another_rate(cells: list[ZoologyCell], store) -> tuple[list, list]:
    """(the cells to run and report, the cells left out): a cell without a record is left
    out when the same model (length, width, mechanism, convolution, seed, data) has a
    record of its current config at another of Zoology's learning rates whose validation
    accuracy reached the early-stopping bar: the best rate is chosen on validation, so
    another rate could only move that cell between 99% and 100%, and ranks nothing
    differently.  ``store``: the sweep's :class:`~weirdnet_lab.sweep.store.CellStore`."""
    import dataclasses

    def reached(cell: ZoologyCell) -> bool:
        record = store.finished([cell]).get(cell.key)  # done, with the current config
        if record is None:
            return False
        val = (record.get("results") or {}).get("val") or {}
        return val.get("accuracy", 0) >= EARLY_STOP

    keep, left_out = [], []
    for cell in cells:
        others = (dataclasses.replace(cell, lr=lr) for lr in LRS if lr != cell.lr)
        if store.read(cell) is None and any(reached(other) for other in others):
            left_out.append(cell)
        else:
            keep.append(cell)
    return keep, left_out


def deviations(cells: list[ZoologyCell], left_out: int = 0) -> list[str]:
    """What this sweep changes from Zoology's Figure 2, one line each; ``left_out``: the
    cells :func:`settled_at_another_rate` left out."""
    lines = []
    sequences = sorted({c.train_sequences for c in cells})
    if sequences != [TRAIN_SEQUENCES]:
        lines.append(f"{', '.join(f'{n:,}' for n in sequences)} training sequences "
                     f"instead of {TRAIN_SEQUENCES:,}")
    vocab = sorted({c.vocab_size for c in cells})
    if vocab != [VOCAB]:
        lines.append(f"vocabulary {', '.join(map(str, vocab))} instead of {VOCAB:,}")
    epochs = sorted({c.epochs for c in cells})
    if epochs != [EPOCHS]:
        lines.append(f"at most {', '.join(map(str, epochs))} epochs instead of {EPOCHS} "
                     "(CPU time; early stopping at 99% still applies)")
    lengths = sorted({c.length for c in cells})
    if lengths != sorted(PAIRS):
        lines.append(f"lengths {', '.join(map(str, lengths))} of Zoology's "
                     f"{', '.join(map(str, sorted(PAIRS)))}")
    widths = sorted({c.width for c in cells})
    if widths != list(WIDTHS):
        lines.append(f"widths {', '.join(map(str, widths))} of Zoology's "
                     f"{', '.join(map(str, WIDTHS))}")
    lrs = sorted({c.lr for c in cells})
    if lrs != sorted(LRS):
        lines.append(f"learning rates {', '.join(f'{r:g}' for r in lrs)} of "
                     f"{', '.join(f'{r:g}' for r in LRS)}")
    if left_out:
        lines.append(f"{left_out} cells not run: the same model had already reached "
                     f"{100 * EARLY_STOP:.0f}% validation accuracy at another learning "
                     "rate, so the best rate is that one to within a point (Zoology runs "
                     "every rate)")
    lines.append("one seed per cell unless the report says more (Zoology: one run per "
                 "setting)")
    lines.append(f"short convolution width {SHORT_CONV} (Zoology's BaseConv: 3), on the "
                 "mixer's input in every block")
    peers = list(dict.fromkeys(c.variant.label for c in cells if c.variant.peer))
    if peers:
        lines.append(f"{', '.join(peers)}: transformers' models with their own blocks at "
                     "their own defaults (4 layers, no dropout, their own initialisation; "
                     "RWKV-4's blocks keep their channel mix, 4 D wide, where Zoology runs "
                     "RWKV's time mixer alone), and no + conv row (their blocks convolve or "
                     "shift their input already)")
    lines.append("the attention baseline is weirdnet's Transformer++ (rotary positions, "
                 "SwiGLU is absent with d_ff = 0, RMSNorm); Zoology's is a GPT-2-style block "
                 "with learned positions (weirdnet's 'Transformer' row)")
    return lines
