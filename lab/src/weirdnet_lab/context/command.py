"""``weirdnet bench context``: does each model use long context, and does it extrapolate?

Every model trains on Shakespeare's 41 works (whole plays and poems, the longest offline
documents, packed: nothing crosses a work) at a 16,384-byte context, then its test bits per
byte are split by context length, the bytes of the same work a target sees (0–128,
128–1K, 1K–4K, 4K–16K, and past 16K at longer windows; :mod:`weirdnet.train.positions`).
A model that uses long context keeps improving in the later buckets.  The same test split
is then read at 32K and 64K windows, longer than any the model trained at: length
extrapolation, Weird-attention's relative weights against rotary positions.  The buckets
hold different bytes, so a second test holds the bytes fixed: the last 1K bytes of each
16K test window inside one work are scored with 128, 1K, 4K, 12K and 15K bytes before
them visible (truncation; the report pairs each context with the longest, window by
window).

Models (bench lm's widths, D = 128, N = 4, each matched to the GPT-2-style Transformer's
non-embedding parameters within 5%): Weird-Net A without a position embedding
(``weird-a-long``), Weird-Net B with the Transformer++ options (``weird-b-pp``: rotary
positions in its softmax layers), the Transformer++ and Mamba-2 (``transformers``).  Each
is built with ``max_len`` = the longest evaluation window; Weird-attention's levels past
the trained length keep their initial weights, which is what extrapolation means for it.
Training: batch 1, AdamW at 2e-3 with a cosine schedule, ``--steps`` steps (default 300:
4.9M bytes, about one epoch of the training split).  At D = 128 every model holds a 16K
window's activations in memory (one step's peak RSS, one thread: the Transformer++
5.6 GiB, Mamba-2 4.5, Weird-Net B++ 3.5, Weird-Net A 1.0), and checkpointing's
recomputation would cost a third more time (a Transformer++ step: 64 s against 48), so it
is used only past 16K (blocks, with weirdnet's FFNs in checkpointed chunks).

Cells run in fresh processes and are stored as records through the sweep engine
(``context/cells``); the report is ``context/context.md`` with ``context.png``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weirdnet_lab.context.settings import BOUNDS, CORPORA, CORPUS
from weirdnet_lab.harness.arguments import at_least, positive
from weirdnet_lab.variants import Variant, get_variant

TRAIN_CONTEXT = 16384
EVAL_CONTEXTS = (16384, 32768, 65536)
TRUNCATIONS = (128, 1024, 4096, 12288)
SPAN = 1024
MECHANISMS = ("weird-a-long", "weird-b-pp", "transformerpp", "mamba2")
STEPS = 300
FFN_CHUNK = 8192
CHECKPOINT_ABOVE = 16384
"""Training windows up to this many bytes fit in memory without activation checkpointing."""

HELP = "long-context use: test bits per byte by context length, and extrapolation"

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`")
EXAMPLES = """\
examples:
  weirdnet bench context --out lab/results     # the committed results (hours on CPU)
  weirdnet bench context --mechanisms weird-a-long,transformerpp --steps 100
  weirdnet bench context --report-only                # rebuild the report from records
"""


@dataclass(frozen=True)
class ContextCell:
    """One model trained at ``train_context`` and read at ``eval_contexts``."""

    variant: Variant
    seed: int
    steps: int
    train_context: int = TRAIN_CONTEXT
    eval_contexts: tuple[int, ...] = EVAL_CONTEXTS
    corpus: str = CORPUS

    @property
    def key(self) -> str:
        corpus = "" if self.corpus == CORPUS else f"--{self.corpus}"
        return (f"{self.variant.name}{corpus}--L{self.train_context}--n{self.steps}"
                f"--s{self.seed}")

    @property
    def info(self) -> dict[str, Any]:
        return {"variant": self.variant.name, "seed": self.seed, "corpus": self.corpus,
                "train_context": self.train_context,
                "positions": {"contexts": list(self.eval_contexts), "bounds": list(BOUNDS),
                              "truncation": {"contexts": list(self.truncations),
                                             "span": self.span}}}

    @property
    def checkpointed(self) -> bool:
        """Whether training checkpoints activations: only past ``CHECKPOINT_ABOVE``."""
        return self.train_context > CHECKPOINT_ABOVE

    @property
    def span(self) -> int:
        """Bytes the truncation test scores per window: 1K, or a quarter of a short
        training window."""
        return min(SPAN, max(1, self.train_context // 4))

    @property
    def truncations(self) -> tuple[int, ...]:
        """The truncation test's contexts: those of ``TRUNCATIONS`` that fit, and the
        whole training window before the scored bytes."""
        whole = self.train_context - self.span
        return (*(c for c in TRUNCATIONS if c < whole), whole)

    def config_dict(self, work_dir: Path) -> dict[str, Any]:
        """The cell's training config (a dict ``TrainConfig.from_dict`` takes)."""
        from weirdnet_lab.lm.models import model_table

        model = model_table(self.variant.name)[0]
        model = {**model, "backbone": {**model["backbone"],
                                       "max_len": max(self.eval_contexts)}}
        return {
            "data": {"dataset": self.corpus, "test_split": "test",
                     "options": {"seq_len": self.train_context, "pack": True}},
            "model": model,
            "optim": {"lr": 2e-3},
            "schedule": {"name": "cosine", "warmup_steps": min(100, self.steps // 10)},
            "train": {"steps": self.steps, "batch_size": 1,
                      "eval_every": max(1, self.steps // 4), "eval_batches": 4,
                      "log_every": 10,
                      "activation_checkpointing": "blocks" if self.checkpointed else "none",
                      "ffn_chunk": FFN_CHUNK if self.checkpointed and not self.variant.peer
                      else 0},
            "run": {"name": self.key, "out_dir": str(work_dir), "seed": self.seed},
        }


def plan(mechanisms, seeds: int, steps: int, train_context: int = TRAIN_CONTEXT,
         eval_contexts=EVAL_CONTEXTS, corpus: str = CORPUS) -> list[ContextCell]:
    """Every cell; ValueError for an unknown name or corpus, a model without a causal
    form, or bad counts."""
    if corpus not in CORPORA:
        raise ValueError(f"--corpus must be one of {', '.join(CORPORA)}, got {corpus!r}")
    if seeds < 1 or steps < 1 or train_context < 2:
        raise ValueError("--seeds and --steps must be >= 1, --train-context >= 2")
    if not eval_contexts or min(eval_contexts) < 2:
        raise ValueError("--eval-contexts must be >= 2")
    variants = [get_variant(name) for name in mechanisms]
    for variant in variants:
        if variant.bidirectional_only:
            raise ValueError(f"{variant.label} has no causal form: it cannot model language")
    return [ContextCell(v, s, steps, train_context, tuple(sorted(set(eval_contexts))), corpus)
            for v in variants for s in range(seeds)]


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from weirdnet_lab.sweep.engine import add_sweep_arguments

    parser.add_argument("--mechanisms", default=",".join(MECHANISMS),
                        help="comma-separated (default: %(default)s)")
    parser.add_argument("--steps", type=positive, default=STEPS,
                        help="training steps, batch 1 (default %(default)s)")
    parser.add_argument("--seeds", type=positive, default=1, help="seeds per model (default 1)")
    parser.add_argument("--train-context", type=at_least(2), default=TRAIN_CONTEXT,
                        help="training window in bytes (default %(default)s)")
    parser.add_argument("--eval-contexts", type=at_least(2), nargs="+", default=list(EVAL_CONTEXTS),
                        help="test windows in bytes (default: %(default)s)")
    parser.add_argument("--corpus", default=CORPUS,
                        help=f"long documents to train and test on: {', '.join(CORPORA)} "
                             "(default %(default)s; another corpus has its own folder, "
                             "context-NAME)")
    add_sweep_arguments(parser, "context/context.{md,png} and context/cells/*.json",
                        "context.png")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Plan, run the cells that are not done, write the report; the exit status."""
    from weirdnet.data import DataMissingError
    from weirdnet_lab.context.report import write_report
    from weirdnet_lab.sweep.engine import list_or_run, sweep_store

    store = sweep_store(args, "context" if args.corpus == CORPUS else f"context-{args.corpus}")
    try:
        cells = plan(_names(args.mechanisms), args.seeds, args.steps, args.train_context,
                     args.eval_contexts, args.corpus)
        configs = {cell.key: cell.config_dict(store.work_dir) for cell in cells}
        if not args.list and not args.report_only:
            from weirdnet_lab.lm.command import require_corpus

            require_corpus(args.corpus)
    except (ValueError, KeyError, DataMissingError) as error:
        print(f"weirdnet bench context: {error}", file=sys.stderr)
        return 2
    return list_or_run("context", cells, configs, store, args, argv,
                       lambda: write_report(store, cells, not args.no_plot))
