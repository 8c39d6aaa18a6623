"""``weirdnet bench lm``: byte-level language models trained for the same wall-clock
minutes on this machine, at contexts of 1K and 4K bytes: quality per CPU-minute.

Every mechanism gets the same model (D = 128, 4 layers, d_ff = 512, 4 heads: the widths
of the ``*-small-cpu`` presets) and the same bytes per step (16,384: batch 16 at 1K, 4 at
4K) on the offline Wikipedia XML corpus (``wiki-xml``).  First a short calibration run
(30 steps) measures each model's steps/s; then each trains for ``minutes x 60 x steps/s``
steps, so its cosine schedule ends when its time is up.  Every run evaluates validation
bits per byte every E steps (E the same for every model of a context: an eighth of the
slowest model's steps among every model calibrated in the folder), then the test split
at the end.  The measured rates are stored
and reused by later runs: ``--recalibrate`` measures them again.

The report (``lm.md``, ``lm.png``): test bits per byte after the same minutes, tokens/s,
steps, and validation bits per byte at the same step (the last evaluation every model
reached); the curves are validation bits per byte against training minutes.  It shows
every stored run of the same minutes, whichever models, contexts and seeds the command
named.  Records and resuming as in the suite (:mod:`.command`).  Structure A here is
causal (every layer Weird-attention); DBA and Linformer have no causal form.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weirdnet.bench import output
from weirdnet.data.registry import DataMissingError

from .cells import CellStore
from .variants import Variant, get_variant

MECHANISMS = ("weird-a", "weird-b", "ps", "softmax", "linear", "local")
CONTEXTS = (1024, 4096)
BYTES_PER_STEP = 16_384
CALIBRATION_STEPS = 30
DEFAULT_MINUTES = 10.0
CORPUS = "wiki-xml"
MODEL = {"dim": 128, "depth": 4, "d_ff": 512, "heads": 4, "dropout": 0.0}

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`")
EXAMPLES = """\
examples:
  weirdnet bench lm                                  # 10 minutes per model and context
  weirdnet bench lm --minutes 30 --out benchmarks/results
  weirdnet bench lm --contexts 1024 --mechanisms weird-a,softmax --minutes 2
  weirdnet bench lm --report-only
  weirdnet bench lm --recalibrate                    # on a new machine: rates measured again
"""


@dataclass(frozen=True)
class Scale:
    """Bytes per step and evaluation sizes: the real sweep's, or a seconds-long smoke
    run's (``--quick``)."""

    bytes_per_step: int = BYTES_PER_STEP
    calibration_steps: int = CALIBRATION_STEPS
    eval_batches: int = 8
    final_eval_batches: int = 32


QUICK = Scale(bytes_per_step=1024, calibration_steps=5, eval_batches=1, final_eval_batches=2)


@dataclass(frozen=True)
class LMCell:
    """One run: a calibration (``steps`` = CALIBRATION_STEPS, no evaluation) or a timed
    run of ``steps`` steps evaluated every ``eval_every``."""

    variant: Variant
    context: int
    seed: int
    steps: int
    eval_every: int = 0
    minutes: float | None = None  # None: the calibration run
    scale: Scale = Scale()

    @property
    def key(self) -> str:
        if self.minutes is None:
            return f"calibrate--{self.variant.name}--L{self.context}"
        return f"{self.variant.name}--L{self.context}--m{self.minutes:g}--s{self.seed}"

    @property
    def info(self) -> dict[str, Any]:
        return {"variant": self.variant.name, "context": self.context, "seed": self.seed,
                "minutes": self.minutes}

    def config_dict(self, work_dir: Path) -> dict[str, Any]:
        timed = self.minutes is not None
        return {
            "data": {"dataset": CORPUS, "options": {"seq_len": self.context},
                     "test_split": "test" if timed else ""},
            "model": {"backbone": {**MODEL, **self.variant.backbone_overrides("lm")}},
            "optim": {"lr": 2e-3},
            "schedule": {"name": "cosine", "warmup_steps": min(100, self.steps // 10)},
            "train": {"steps": self.steps,
                      "batch_size": max(1, self.scale.bytes_per_step // self.context),
                      "eval_every": self.eval_every if timed else 0,
                      "eval_batches": self.scale.eval_batches,
                      "final_eval_batches": self.scale.final_eval_batches if timed else 1,
                      "log_every": 10},
            "run": {"name": self.key, "out_dir": str(work_dir), "seed": self.seed},
        }


def calibration_cells(mechanisms, contexts, scale: Scale = Scale()) -> list[LMCell]:
    """The calibration runs; ValueError for a mechanism without a causal form."""
    variants = [get_variant(name) for name in mechanisms]
    for variant in variants:
        if variant.bidirectional_only:
            raise ValueError(f"{variant.label} has no causal form, so no language model")
    return [LMCell(v, n, 0, scale.calibration_steps, scale=scale) for n in contexts
            for v in variants]


def timed_cells(calibrations: list[LMCell], rates: dict[str, float], minutes: float,
                seeds: int, peers: list[LMCell] | None = None) -> list[LMCell]:
    """The timed runs of ``calibrations``: steps = minutes x 60 x the calibrated steps/s;
    every model of a context evaluated every E steps, E = an eighth of the fewest steps
    among ``peers`` of that context (default: ``calibrations``; the command passes every
    model calibrated in its folder, so that naming fewer models keeps E, and with it the
    runs already stored)."""
    steps = {c.key: max(20, round(minutes * 60 * rates[c.key]))
             for c in (*calibrations, *(peers or ()))}
    out = []
    for context in dict.fromkeys(c.context for c in calibrations):
        mine = [c for c in calibrations if c.context == context]
        group = [c for c in (peers or mine) if c.context == context] or mine
        every = max(1, min(steps[c.key] for c in group) // 8)
        out += [LMCell(c.variant, context, seed, steps[c.key], every, minutes, c.scale)
                for c in mine for seed in range(seeds)]
    return out


def stored_calibrations(store: CellStore, named: list[LMCell]) -> list[LMCell]:
    """``named``, then every other calibration finished in ``store`` with the config the
    code builds now (models or contexts this command did not name)."""
    keys, extra = {c.key for c in named}, []
    scale = named[0].scale if named else Scale()
    for record in store.all_records():
        if record.get("minutes") is not None or record.get("status") != "done":
            continue
        try:
            cell = LMCell(get_variant(record["variant"]), int(record["context"]), 0,
                          scale.calibration_steps, scale=scale)
        except (KeyError, TypeError, ValueError):
            continue  # a record this code cannot place
        if cell.key not in keys and store.finished([cell]):
            keys.add(cell.key)
            extra.append(cell)
    return named + extra


def stored_runs(store: CellStore, planned: list[LMCell], calibrated: list[LMCell],
                rates: dict[str, float]) -> list[LMCell]:
    """``planned`` and every other timed run of the same minutes stored in ``store``
    (models, contexts or seeds this command did not ask for) that the stored
    calibrations still give, by context, model and seed: what the report shows."""
    minutes = planned[0].minutes if planned else DEFAULT_MINUTES
    seeds = [r.get("seed", 0) for r in store.all_records()
             if r.get("minutes") == minutes and r.get("status") == "done"]
    keys = {c.key for c in planned}
    stored = [c for c in timed_cells(calibrated, rates, minutes, 1 + max(seeds, default=0))
              if c.key not in keys and store.finished([c])]
    order = {name: i for i, name in enumerate(MECHANISMS)}
    return sorted(planned + stored, key=lambda c: (c.context, order.get(c.variant.name, 99),
                                                   c.seed))


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS),
                        help="comma-separated (default: %(default)s)")
    parser.add_argument("--contexts", type=int, nargs="+", default=list(CONTEXTS))
    parser.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                        help="training minutes per model and context (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per cell (default 1)")
    parser.add_argument("--work", default=None,
                        help="run directories (default: $WEIRDNET_BENCH_DIR/runs)")
    parser.add_argument("--recalibrate", action="store_true",
                        help="measure every model's steps/s again (e.g. on another "
                             "machine, or after a change to the code); timed runs whose "
                             "step count changes then run again")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the stored records; train nothing")
    parser.add_argument("--no-plot", action="store_true", help="skip lm.png")
    parser.add_argument("--quick", action="store_true",
                        help="seconds-long smoke run (1 KiB per step, tiny evaluations), "
                             "into OUT/lm-quick")
    output.add_out_arguments(parser, "lm/lm.{md,png} and lm/cells/*.json")


def require_corpus() -> None:
    """DataMissingError (one line saying how to get it) unless the :data:`CORPUS` bytes
    can be read: checked before any cell starts, so a missing package is not a failed
    cell whose reason sits only in its record (the bytes are built and cached once)."""
    from weirdnet.data.text.corpora import corpus_bytes

    corpus_bytes(CORPUS)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Calibrate, run the timed cells not done, write the report; the exit status (2 for
    bad options, a busy folder or missing data)."""
    out = output.out_dir(args.out)
    work = Path(args.work).expanduser() if args.work else output.bench_dir() / "runs"
    folder = "lm-quick" if args.quick else "lm"
    store = CellStore(out / folder, work / folder)
    try:
        if args.minutes <= 0 or args.seeds < 1:
            raise ValueError("--minutes must be > 0 and --seeds >= 1")
        if args.recalibrate and args.report_only:
            raise ValueError("--recalibrate trains; it cannot go with --report-only")
        calibrations = calibration_cells(_names(args.mechanisms), args.contexts,
                                         QUICK if args.quick else Scale())
    except (ValueError, KeyError) as error:
        print(f"weirdnet bench lm: {error}", file=sys.stderr)
        return 2
    try:
        folders = [store.results_dir] + ([] if args.report_only else [store.work_dir])
        with output.writing(folders, "weirdnet bench lm") as session:
            return _run(args, argv, calibrations, store, session)
    except output.BenchError as error:
        return output.fail(error)
    except DataMissingError as error:  # the corpus's package is absent: how to get it
        print(f"weirdnet bench lm: {error}", file=sys.stderr)
        return 2


def _run(args, argv, calibrations: list[LMCell], store: CellStore,
         session: output.Writing) -> int:
    from .command import run_cells
    from .lm_report import write_report

    command = ["weirdnet", *argv]
    configs = {c.key: c.config_dict(store.work_dir) for c in calibrations}
    states = {c.key: "rerun" if args.recalibrate else store.state(c, configs[c.key])
              for c in calibrations}
    if not args.report_only and any(s != "done" for s in states.values()):
        require_corpus()
        status = run_cells("calibration", calibrations, configs, states, store, session,
                           command, False, None)
        if status:
            return status
    calibrated = stored_calibrations(store, calibrations)
    records = {c.key: store.read(c) for c in calibrated}
    missing = [c.key for c in calibrations if not (records[c.key] or {}).get("steps_per_s")]
    if missing:
        print(f"weirdnet bench lm: no calibration for {', '.join(missing)}", file=sys.stderr)
        return 1
    rates = {k: r["steps_per_s"] for k, r in records.items() if r}
    cells = timed_cells(calibrations, rates, args.minutes, args.seeds, calibrated)
    configs = {c.key: c.config_dict(store.work_dir) for c in cells}
    states = {c.key: store.state(c, configs[c.key]) for c in cells}
    if not args.report_only and any(s != "done" for s in states.values()):
        require_corpus()
    shown = stored_runs(store, cells, calibrated, rates)
    return run_cells("lm", cells, configs, states, store, session, command,
                     args.report_only, lambda: write_report(store, shown, not args.no_plot))
