"""``weirdnet bench recall``: the recall diagnostics (MQAR, selective copying, induction
heads) swept over model width and sequence length for every mechanism with a causal form.

Every (diagnostic, length, width, mechanism, seed) is one training run of a 2-layer
causal model (``d_ff = 2 D``, one head per 16 channels, no dropout; AdamW, lr 3e-3,
6,000 steps of 32 sequences by default) on the diagnostic's generated training split,
then its test split (1,000 sequences): accuracy over the asked positions.  ``--lrs``
sweeps the learning rate as Zoology does; the report then shows, per mechanism and
cell, the learning rate with the best validation accuracy (the test split never
chooses).  Cells run in fresh processes and are stored as records (metrics, config hash,
commit, machine) through the sweep engine, exactly as the suite's
(:mod:`weirdnet_lab.sweep`): a rerun skips finished cells and resumes interrupted ones.
The report (``recall.md``) has a table per diagnostic and ``recall.png``, accuracy
against width, one panel per diagnostic and length.

Local attention sees a window of a quarter of the sequence.  DBA and Linformer have no
causal form (their mixing reads the whole sequence), so they
are not run: a bidirectional model would see the queries' positions before them.

``--recipe zoology`` runs MQAR at Zoology's own recipe instead (Figure 2 of Arora et al.
2023: vocabulary 8,192, power-law queries, one head, no FFN, batch 512, four learning
rates, early stopping at 99%; :mod:`weirdnet_lab.recall.zoology`), with a sanity gate: a
column is ranked only where the Transformer++ reaches 95%.  Its records and report go to
``recall-zoology/``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weirdnet_lab.harness.arguments import above, at_least, positive
from weirdnet_lab.recall.settings import DEFAULT_LR, DIAGNOSTICS, TEST_SEQUENCES, diagnostic_options
from weirdnet_lab.sweep.store import CellStore
from weirdnet_lab.variants import MECHANISMS, Variant, get_variant

LENGTHS = (64, 128)
WIDTHS = (16, 32, 64)


def causal_mechanisms() -> tuple[str, ...]:
    """The suite's mechanisms with a causal form (the diagnostics are language models);
    read from the mixers, so it imports torch."""
    return tuple(v.name for v in MECHANISMS if not v.bidirectional_only)
DEFAULT_STEPS = 6000
"""Steps per cell.  MQAR is learnt in a sudden transition: a 2-layer softmax model at
D = 64, L = 64 sat at the plateau of knowing which values occur (about 30%) until step
3,000-3,500, then reached 99.9% by step 4,000 (lr 3e-3; at lr 1e-3 not by 4,000)."""
TRAIN_SEQUENCES = 100_000
"""Generated training sequences (Zoology's count); every step sees fresh ones until the
6,000 x 32 = 192,000 drawn pass it."""
BATCH_SIZE = 32
HELP = "recall diagnostics (MQAR, selective copying, induction) vs width"

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`")
EXAMPLES = """\
examples:
  weirdnet bench recall                                  # the default sweep (hours on CPU)
  weirdnet bench recall --out lab/results         # into the committed results
  weirdnet bench recall --diagnostics mqar --lengths 64 --widths 16 32
  weirdnet bench recall --diagnostics mqar --lengths 128 --mechanisms softmax \
      --lrs 1e-3 3e-3 1e-2                               # a learning-rate sweep
  weirdnet bench recall --report-only                    # rebuild the report from records
  weirdnet bench recall --list                           # the cells and their state
"""


def local_window(length: int) -> int:
    """Local attention's window in the sweep: a quarter of the sequence (its default,
    128, would cover these whole sequences and make it the Transformer)."""
    return max(4, length // 4)


@dataclass(frozen=True)
class RecallCell:
    """One training run of the sweep."""

    diagnostic: str
    length: int
    width: int
    variant: Variant
    seed: int
    steps: int
    lr: float = DEFAULT_LR

    @property
    def key(self) -> str:
        rate = "" if self.lr == DEFAULT_LR else f"--lr{self.lr:g}"
        return (f"{self.diagnostic}--L{self.length}--d{self.width}--{self.variant.name}"
                f"{rate}--s{self.seed}")

    @property
    def info(self) -> dict[str, Any]:
        return {"diagnostic": self.diagnostic, "length": self.length, "width": self.width,
                "variant": self.variant.name, "seed": self.seed, "lr": self.lr}

    def config_dict(self, work_dir: Path) -> dict[str, Any]:
        """The cell's training config (a dict ``TrainConfig.from_dict`` takes)."""
        widths = {"dim": self.width, "depth": 2, "d_ff": 2 * self.width,
                  "heads": max(1, self.width // 16)}
        backbone = {**widths, "dropout": 0.0, **self.variant.backbone_overrides("lm")}
        if self.variant.pattern == "local":  # a window shorter than the sequence
            backbone["mixer_options"] = {"local": {"window": local_window(self.length)}}
        model = self.variant.lm_model(widths) if self.variant.peer else \
            {"backbone": backbone}  # a transformers peer: its own blocks at these widths
        return {
            "data": {"dataset": self.diagnostic, "test_split": "test",
                     "options": {**diagnostic_options(self.diagnostic, self.length),
                                 "num_samples": TRAIN_SEQUENCES},
                     "eval_options": {"num_samples": TEST_SEQUENCES}},
            "model": model,
            "optim": {"lr": self.lr, "weight_decay": 0.1},
            "schedule": {"name": "cosine", "warmup_steps": 100},
            "train": {"steps": self.steps, "batch_size": BATCH_SIZE,
                      "eval_every": max(1, self.steps // 3), "eval_batches": 8,
                      "log_every": 50},
            "run": {"name": self.key, "out_dir": str(work_dir), "seed": self.seed},
        }


def plan(diagnostics, lengths, widths, mechanisms, seeds: int, steps: int,
         lrs=(DEFAULT_LR,)) -> list[RecallCell]:
    """Every cell of the sweep; ValueError for an unknown or non-causal name, or a
    learning rate that is not positive."""
    if not lrs or any(not lr > 0 for lr in lrs):
        raise ValueError(f"learning rates must be > 0, got {list(lrs)}")
    for name in diagnostics:
        diagnostic_options(name, 64)
    variants = [get_variant(name) for name in mechanisms]
    for variant in variants:
        if variant.bidirectional_only:
            raise ValueError(f"{variant.label} has no causal form; the recall diagnostics "
                             f"need one (causal mechanisms: {', '.join(causal_mechanisms())})")
    return [RecallCell(d, n, w, v, s, steps, lr) for d in diagnostics for n in lengths
            for w in widths for v in variants for lr in dict.fromkeys(lrs)
            for s in range(seeds)]


def stored_cells(store: CellStore, planned: list[RecallCell]) -> list[RecallCell]:
    """``planned``, then the cell of every other finished record in ``store`` (another
    diagnostic, width or learning rate than this command asked for), so that a report
    always shows everything measured."""
    keys = {cell.key for cell in planned}
    extra = []
    for record in store.all_records():
        if record.get("status") != "done" or "diagnostic" not in record:
            continue
        try:
            cell = RecallCell(record["diagnostic"], record["length"], record["width"],
                              get_variant(record["variant"]), record["seed"],
                              record["config"]["train"]["steps"],
                              record["config"]["optim"]["lr"])
        except (KeyError, TypeError, ValueError):
            continue  # a record this code cannot place: left out of the report
        if cell.key not in keys:
            keys.add(cell.key)
            extra.append(cell)
    return planned + extra


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from weirdnet_lab.recall import zoology

    parser.add_argument("--recipe", choices=("weirdnet", "zoology"), default="weirdnet",
                        help="weirdnet: the quick sweep (default); zoology: MQAR at "
                             "Zoology's Figure 2 recipe, with the attention sanity gate")
    parser.add_argument("--diagnostics", default=",".join(DIAGNOSTICS),
                        help="comma-separated (default: %(default)s; zoology: mqar)")
    parser.add_argument("--mechanisms", default=None,
                        help="comma-separated (default: every mechanism with a causal form; "
                             "zoology: and the Transformer++); transformers peers by name: "
                             "mamba, mamba2, rwkv (slow on a CPU without mamba_ssm)")
    parser.add_argument("--lengths", type=positive, nargs="+", default=None,
                        help=f"default: {' '.join(map(str, LENGTHS))}; zoology: "
                             f"{' '.join(map(str, zoology.PAIRS))}")
    parser.add_argument("--widths", type=positive, nargs="+", default=None,
                        help=f"default: {' '.join(map(str, WIDTHS))}; zoology: "
                             f"{' '.join(map(str, zoology.WIDTHS))}")
    parser.add_argument("--seeds", type=positive, default=1, help="seeds per cell (default 1)")
    parser.add_argument("--lrs", type=above(0), nargs="+", default=None,
                        help=f"learning rates to sweep (default {DEFAULT_LR:g}; zoology: "
                             f"{' '.join(f'{r:g}' for r in zoology.LRS)}); the report "
                             "shows the one with the best validation accuracy")
    parser.add_argument("--steps", type=positive, default=DEFAULT_STEPS,
                        help="training steps per cell, batch 32 (default %(default)s)")
    parser.add_argument("--epochs", type=positive, default=zoology.EPOCHS,
                        help="zoology: epochs of 100,000 sequences at most (default "
                             "%(default)s, early stopping at 99%%)")
    parser.add_argument("--train-sequences", type=positive, default=zoology.TRAIN_SEQUENCES,
                        help="zoology: generated training sequences, an epoch (default "
                             "%(default)s; fewer is a deviation the report states)")
    parser.add_argument("--vocab-size", type=positive, default=zoology.VOCAB,
                        help="zoology: MQAR's vocabulary (default %(default)s)")
    parser.add_argument("--all-rates", action="store_true",
                        help="zoology: run every learning rate named, also for a model that "
                             "already reached 99%% validation accuracy at another (by "
                             "default such cells are left out, and the report counts them)")
    parser.add_argument("--short-convs", type=at_least(0), nargs="+",
                        default=[0, zoology.SHORT_CONV],
                        help="zoology: short_conv widths each model runs with (default "
                             "%(default)s)")
    from weirdnet_lab.sweep.engine import add_sweep_arguments

    add_sweep_arguments(parser, "recall/recall.{md,png} (recall-zoology/recall-zoology.md) "
                        "and their cells/*.json", "recall.png")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Plan, run the cells that are not done, write the report; the exit status."""
    from weirdnet_lab.sweep.engine import list_or_run, sweep_store

    folder = "recall" if args.recipe == "weirdnet" else "recall-zoology"
    store = sweep_store(args, folder)
    try:
        cells, report = _plan(args, store)
        configs = {cell.key: cell.config_dict(store.work_dir) for cell in cells}
    except (ValueError, KeyError) as error:
        print(f"weirdnet bench recall: {error}", file=sys.stderr)
        return 2
    return list_or_run("recall", cells, configs, store, args, argv, report)


def _plan(args: argparse.Namespace, store: CellStore):
    """(the cells of the command's recipe, the function that writes its report)."""
    from weirdnet_lab.recall import zoology
    from weirdnet_lab.recall.report import write_report

    if args.recipe == "weirdnet":
        mechanisms = _names(args.mechanisms) if args.mechanisms else causal_mechanisms()
        cells = plan(_names(args.diagnostics), args.lengths or LENGTHS, args.widths or WIDTHS,
                     mechanisms, args.seeds, args.steps, args.lrs or (DEFAULT_LR,))
        return cells, lambda: write_report(store, stored_cells(store, cells),
                                           not args.no_plot)
    from weirdnet_lab.recall.zoology_report import write_zoology_report

    if _names(args.diagnostics) not in (["mqar"], list(DIAGNOSTICS)):
        raise ValueError("--recipe zoology runs MQAR only (Zoology's Figure 2)")
    names = _names(args.mechanisms) if args.mechanisms else \
        list(dict.fromkeys([*causal_mechanisms(), zoology.REFERENCE]))
    variants = [get_variant(name) for name in names]
    for variant in variants:
        if variant.bidirectional_only:
            raise ValueError(f"{variant.label} has no causal form; MQAR needs one")
    cells = zoology.plan(args.lengths or list(zoology.PAIRS), args.widths or zoology.WIDTHS,
                         variants, args.short_convs, args.lrs or zoology.LRS, args.seeds,
                         args.epochs, args.train_sequences, args.vocab_size)
    left_out = []
    if not args.all_rates:
        cells, left_out = zoology.settled_at_another_rate(cells, store)
    return cells, lambda: write_zoology_report(store, cells, not args.no_plot,
                                               len(left_out))


__all__ = ["causal_mechanisms", "DEFAULT_LR", "DIAGNOSTICS", "RecallCell",
           "diagnostic_options", "plan", "run"]
