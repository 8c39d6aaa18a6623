"""``weirdnet bench lm``: byte-level language models at equal compute and at equal
steps, at contexts of 1K and 4K bytes: quality per CPU-minute and per token.

Every model is matched to one size: the non-embedding parameters of the GPT-2-style
Transformer with D = 128, 4 layers, d_ff = 512, 4 heads (the widths of the ``*-small-cpu``
presets), within 5%, by its feed-forward width (for Mamba and Mamba-2, which have no
feed-forward, by its number of layers; :mod:`.matching`).  Every model sees the same
bytes per step (16,384: batch 16 at 1K, 4 at 4K) of the offline Wikipedia XML corpus
(``wiki-xml``), with the same optimiser and schedule.

- Equal minutes (the default): a short calibration run (30 steps) measures each model's
  steps/s on this machine; then each trains for ``minutes x 60 x steps/s`` steps, so its
  cosine schedule ends when its time is up.  On a CPU the rate is steps per second of
  the run's own CPU time, per thread (with one thread, steps per CPU-second), so other
  jobs running at the same time do not shorten a model's budget; a CPU calibration
  recorded before that rate existed is measured again.  The rates are stored and reused
  by later runs (``--recalibrate`` measures them again).
- Equal steps (``--steps N``): every model trains N steps, so every model sees the same
  bytes: quality per token, whatever each model's speed.

Every run evaluates validation bits per byte every E steps (equal minutes: E the same for
every model of a context, an eighth of the slowest model's steps among every model
calibrated in the folder, on the doubling grid of ``train.eval_spacing``: every E steps
up to 8E, then 4 evaluations each time the step count doubles, and the last step, the
same steps for every model; a context whose runs were stored before that keeps even
spacing; equal steps: every N / 8), then the test split at the end.

The report (``lm.md``, ``lm.png``): per context, the parameters, test bits per byte after
the same minutes or steps, tokens/s, and validation bits per byte at the same step; the
curves are validation bits per byte against training minutes (and against steps).  It
shows every stored run of the same minutes and of every step count, whichever models,
contexts and seeds the command named.  Records and resuming as in the suite
(:mod:`.command`).  Structure A here is causal (every layer Weird-attention); DBA and
Linformer have no causal form.  The peers (Llama, Mamba, Mamba-2, RWKV, Qwen3-Next,
RecurrentGemma, xLSTM) are the ``transformers`` models; on a CPU the layers of Mamba,
Mamba-2, Qwen3-Next's Gated DeltaNet and xLSTM run their pure-PyTorch reference paths,
so their speed is a CPU user's, not a GPU's.  The flash-linear-attention peers
(``fla-gated-deltanet``, ``fla-mamba2``) run on CUDA only.

Precision: on CUDA every model trains in bf16 autocast (the trainer's
``train.precision = "auto"``), on a CPU in float32.  Before a CUDA run trains, the
Transformer++'s SDPA backend at each context is recorded (``sdpa_cuda.json``; the report
flags one that is not FlashAttention or cuDNN).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weirdnet.data import DataMissingError
from weirdnet_lab.harness import output
from weirdnet_lab.harness.arguments import above, positive
from weirdnet_lab.lm.models import model_table, reference_parameters
from weirdnet_lab.lm.settings import MIN_STEPS
from weirdnet_lab.sweep.engine import add_jobs_argument
from weirdnet_lab.sweep.store import CellStore
from weirdnet_lab.variants import Variant, get_variant

MECHANISMS = ("weird-a", "weird-b", "weird-a-pp", "weird-b-pp", "transformerpp", "softmax",
              "llama", "mamba", "mamba2", "rwkv", "qwen3-next", "recurrent-gemma", "xlstm",
              "ps", "linear", "local")
CONTEXTS = (1024, 4096)
BYTES_PER_STEP = 16_384
CALIBRATION_STEPS = 30
DEFAULT_MINUTES = 10.0
CORPUS = "wiki-xml"

HELP = "byte-level LMs at equal CPU-minutes or equal steps: bits per byte, peers included"

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`")
EXAMPLES = """\
examples:
  weirdnet bench lm                                  # 10 minutes per model and context
  weirdnet bench lm --minutes 30 --out lab/results
  weirdnet bench lm --contexts 1024 --mechanisms weird-a,softmax --minutes 2
  weirdnet bench lm --steps 200 --mechanisms weird-a,transformerpp,mamba2 --seeds 3
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
    """One run: a calibration (``steps`` = CALIBRATION_STEPS, no evaluation), a run of
    ``minutes`` (``steps`` from the calibration), or with ``equal_steps`` a run of
    ``steps`` every model shares; timed runs are evaluated every ``eval_every`` steps
    with ``eval_spacing`` ("even", or "doubling": ``train.eval_spacing``)."""

    variant: Variant
    context: int
    seed: int
    steps: int
    eval_every: int = 0
    minutes: float | None = None
    scale: Scale = Scale()
    equal_steps: bool = False
    eval_spacing: str = "even"

    @property
    def kind(self) -> str:
        """"calibration", "minutes" (equal compute) or "steps" (equal steps)."""
        if self.equal_steps:
            return "steps"
        return "calibration" if self.minutes is None else "minutes"

    @property
    def key(self) -> str:
        name = self.variant.name
        if self.kind == "calibration":
            return f"calibrate--{name}--L{self.context}"
        budget = f"n{self.steps}" if self.equal_steps else f"m{self.minutes:g}"
        return f"{name}--L{self.context}--{budget}--s{self.seed}"

    @property
    def info(self) -> dict[str, Any]:
        return {"variant": self.variant.name, "context": self.context, "seed": self.seed,
                "minutes": self.minutes, "kind": self.kind,
                "non_embedding_parameters": model_table(self.variant.name)[1],
                "reference_parameters": reference_parameters()}

    def config_dict(self, work_dir: Path) -> dict[str, Any]:
        timed = self.kind != "calibration"
        return {
            "data": {"dataset": CORPUS, "options": {"seq_len": self.context},
                     "test_split": "test" if timed else ""},
            "model": model_table(self.variant.name)[0],
            "optim": {"lr": 2e-3},
            "schedule": {"name": "cosine", "warmup_steps": min(100, self.steps // 10)},
            "train": {"steps": self.steps,
                      "batch_size": max(1, self.scale.bytes_per_step // self.context),
                      "eval_every": self.eval_every if timed else 0,
                      # only where not "even": the runs stored before the option keep
                      # their config (and hash)
                      **({"eval_spacing": self.eval_spacing}
                         if timed and self.eval_spacing != "even" else {}),
                      "eval_batches": self.scale.eval_batches,
                      "final_eval_batches": self.scale.final_eval_batches if timed else 1,
                      "log_every": 10},
            "run": {"name": self.key, "out_dir": str(work_dir), "seed": self.seed},
        }


def lm_variants(mechanisms) -> list[Variant]:
    """The variants named; ValueError for one without a causal form, or one whose
    parameters cannot be matched."""
    variants = [get_variant(name) for name in mechanisms]
    for variant in variants:
        if reason := variant.unsupported("lm"):
            raise ValueError(reason)
        model_table(variant.name)
    return variants


def calibration_cells(mechanisms, contexts, scale: Scale = Scale()) -> list[LMCell]:
    """The calibration runs; ValueError for a mechanism without a causal form."""
    return [LMCell(v, n, 0, scale.calibration_steps, scale=scale) for n in contexts
            for v in lm_variants(mechanisms)]


def step_cells(mechanisms, contexts, steps: int, seeds: int,
               scale: Scale = Scale()) -> list[LMCell]:
    """The equal-steps runs: every model ``steps`` steps, evaluated every steps / 8."""
    return [LMCell(v, n, seed, steps, max(1, steps // 8), None, scale, equal_steps=True)
            for n in contexts for v in lm_variants(mechanisms) for seed in range(seeds)]




def timed_cells(calibrations: list[LMCell], rates: dict[str, float], minutes: float,
                seeds: int, peers: list[LMCell] | None = None,
                spacings: dict[int, str] | None = None) -> list[LMCell]:
    """The timed runs of ``calibrations``: steps = minutes x 60 x the calibrated steps/s
    (at least :data:`MIN_STEPS`);
    every model of a context evaluated every E steps, E = an eighth of the fewest steps
    among ``peers`` of that context (default: ``calibrations``; the command passes every
    model calibrated in its folder, so that naming fewer models keeps E, and with it the
    runs already stored), with the spacing ``spacings[context]`` (default "doubling":
    :func:`stored_spacing`)."""
    steps = {c.key: max(MIN_STEPS, round(minutes * 60 * rates[c.key]))
             for c in (*calibrations, *(peers or ()))}
    out = []
    for context in dict.fromkeys(c.context for c in calibrations):
        mine = [c for c in calibrations if c.context == context]
        group = [c for c in (peers or mine) if c.context == context] or mine
        every = max(1, min(steps[c.key] for c in group) // 8)
        spacing = (spacings or {}).get(context, "doubling")
        out += [LMCell(c.variant, context, seed, steps[c.key], every, minutes, c.scale,
                       eval_spacing=spacing)
                for c in mine for seed in range(seeds)]
    return out


def stored_spacing(store: CellStore, contexts, minutes: float) -> dict[int, str]:
    """Per context, the evaluation spacing of its timed runs of ``minutes``: that of a run
    already recorded there (so later seeds and models keep the configs of the stored
    runs; the runs made before ``train.eval_spacing`` existed are "even"), else
    "doubling" (evaluations that grow as log(steps), not as steps / E)."""
    out = {context: "doubling" for context in contexts}
    for record in store.all_records():
        try:
            context = int(record["context"])
        except (KeyError, TypeError, ValueError):
            continue  # a record this code cannot place
        if _kind(record) == "minutes" and record.get("minutes") == minutes \
                and context in out:
            out[context] = record.get("config", {}).get("train", {}).get(
                "eval_spacing", "even")
    return out


def _kind(record: dict[str, Any]) -> str:
    """A record's kind (older records name none: a calibration has no minutes)."""
    return record.get("kind") or ("calibration" if record.get("minutes") is None
                                  else "minutes")


def stored_calibrations(store: CellStore, named: list[LMCell],
                        scale: Scale = Scale()) -> list[LMCell]:
    """``named``, then every other calibration finished in ``store`` with the config the
    code builds now (models or contexts this command did not name)."""
    keys, extra = {c.key for c in named}, []
    for record in store.all_records():
        if _kind(record) != "calibration" or record.get("status") != "done":
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


def stored_runs(store: CellStore, planned: list[LMCell], minutes: float,
                calibrated: list[LMCell], rates: dict[str, float],
                spacings: dict[int, str], scale: Scale = Scale()) -> list[LMCell]:
    """``planned`` and every other run stored in ``store`` that the code still builds
    (models, contexts or seeds this command did not ask for): the runs of ``minutes``
    that the stored calibrations give (evaluated with ``spacings``, as
    :func:`timed_cells`), and the equal-steps runs of every step count;
    what the report shows, by context, model and seed."""
    done = [r for r in store.all_records() if r.get("status") == "done"]
    seeds = [r.get("seed", 0) for r in done if _kind(r) == "minutes"
             and r.get("minutes") == minutes]
    candidates = timed_cells([c for c in calibrated if c.key in rates], rates, minutes,
                             1 + max(seeds, default=0), calibrated, spacings) if seeds else []
    for record in done:
        if _kind(record) == "steps":
            try:
                steps = int(record["config"]["train"]["steps"])
                candidates.append(LMCell(get_variant(record["variant"]),
                                         int(record["context"]), int(record["seed"]), steps,
                                         max(1, steps // 8), None, scale, equal_steps=True))
            except (KeyError, TypeError, ValueError):
                continue  # a record this code cannot place
    keys = {c.key for c in planned}
    stored = {c.key: c for c in candidates if c.key not in keys and store.finished([c])}
    order = {name: i for i, name in enumerate(MECHANISMS)}
    return sorted([*planned, *stored.values()],
                  key=lambda c: (c.kind, c.steps if c.equal_steps else 0, c.context,
                                 order.get(c.variant.name, 99), c.seed))


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS),
                        help="comma-separated (default: %(default)s)")
    parser.add_argument("--contexts", type=positive, nargs="+", default=list(CONTEXTS))
    parser.add_argument("--minutes", type=above(0), default=DEFAULT_MINUTES,
                        help="training minutes per model and context (default %(default)s)")
    parser.add_argument("--steps", type=positive, default=None, metavar="N",
                        help="equal steps instead of equal minutes: every model trains N "
                             "steps (the same bytes); no calibration")
    parser.add_argument("--seeds", type=positive, default=1, help="seeds per cell (default 1)")
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
    add_jobs_argument(parser)
    output.add_out_arguments(parser, "lm/lm.{md,png} and lm/cells/*.json")


def require_corpus(name: str = CORPUS) -> None:
    """DataMissingError (one line saying how to get it) unless the LM dataset ``name``
    (default :data:`CORPUS`) can be read: checked before any cell starts, so a missing
    package is not a failed cell whose reason sits only in its record (an offline
    corpus's bytes are built and cached once)."""
    from weirdnet.data import get

    get(name, "test")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Calibrate (equal minutes), run the cells not done, write the report; the exit
    status (2 for bad options, a busy folder or missing data)."""
    out = output.out_dir(args.out)
    work = Path(args.work).expanduser() if args.work else output.bench_dir() / "runs"
    folder = "lm-quick" if args.quick else "lm"
    store = CellStore(out / folder, work / folder)
    scale = QUICK if args.quick else Scale()
    try:
        if args.recalibrate and (args.report_only or args.steps):
            raise ValueError("--recalibrate measures the rates of an equal-minutes run; it "
                             "cannot go with --report-only or --steps")
        if args.steps:
            planned = step_cells(_names(args.mechanisms), args.contexts, args.steps,
                                 args.seeds, scale)
        else:
            planned = calibration_cells(_names(args.mechanisms), args.contexts, scale)
    except (ValueError, KeyError) as error:
        print(f"weirdnet bench lm: {error}", file=sys.stderr)
        return 2
    try:
        folders = [store.results_dir] + ([] if args.report_only else [store.work_dir])
        with output.writing(folders, "weirdnet bench lm") as session:
            return _run(args, argv, planned, store, session, scale)
    except output.BenchError as error:
        return output.fail(error)
    except DataMissingError as error:  # the corpus's package is absent: how to get it
        print(f"weirdnet bench lm: {error}", file=sys.stderr)
        return 2


def _calibrate(args, command: list[str], calibrations: list[LMCell], store: CellStore,
               session: output.Writing) -> int:
    """Run the calibrations not done (all of them with ``--recalibrate``)."""
    from weirdnet_lab.sweep.engine import run_cells

    configs = {c.key: c.config_dict(store.work_dir) for c in calibrations}
    states = {c.key: "rerun" if args.recalibrate or _wall_clock_calibration(store.read(c))
              else store.state(c, configs[c.key]) for c in calibrations}
    if args.report_only or all(s == "done" for s in states.values()):
        return 0
    require_corpus()
    return run_cells("calibration", calibrations, configs, states, store, session,
                     command, False, None, args.jobs)


def _rates(store: CellStore, calibrated: list[LMCell]) -> dict[str, float]:
    """Steps/s of each stored calibration (:func:`~weirdnet_lab.sweep.cell.training_rate`:
    on a CPU, per CPU-second and thread), by key."""
    from weirdnet_lab.sweep.cell import training_rate  # imports torch: not for --help

    records = {c.key: store.read(c) for c in calibrated}
    return {k: rate for k, r in records.items() if r and (rate := training_rate(r))}


def _wall_clock_calibration(record: dict | None) -> bool:
    """A CPU calibration recorded before its CPU-time rate existed: its wall-clock rate
    counts whatever else the machine ran, so it is measured again."""
    from weirdnet_lab.sweep.cell import ran_on_cpu

    if not record or record.get("status") != "done":
        return False
    return ran_on_cpu(record) and not record.get("cpu_steps_per_s")


def _run(args, argv, planned: list[LMCell], store: CellStore, session: output.Writing,
         scale: Scale) -> int:
    from weirdnet_lab.lm.report import write_report
    from weirdnet_lab.sweep.engine import run_cells

    command = ["weirdnet", *argv]
    cells = planned
    if not args.steps:
        if status := _calibrate(args, command, planned, store, session):
            return status
    calibrated = stored_calibrations(store, [] if args.steps else planned, scale)
    rates = _rates(store, calibrated)
    spacings = stored_spacing(store, {c.context for c in calibrated}, args.minutes)
    if not args.steps:
        missing = [c.key for c in planned if c.key not in rates]
        if missing and not args.report_only:
            print(f"weirdnet bench lm: no calibration for {', '.join(missing)}",
                  file=sys.stderr)
            return 1
        # --report-only: a model never calibrated has no timed run to show
        planned = [c for c in planned if c.key in rates]
        calibrated = [c for c in calibrated if c.key in rates]
        cells = timed_cells(planned, rates, args.minutes, args.seeds, calibrated, spacings)
    configs = {c.key: c.config_dict(store.work_dir) for c in cells}
    states = {c.key: store.state(c, configs[c.key]) for c in cells}
    if not args.report_only and any(s != "done" for s in states.values()):
        require_corpus()
        from weirdnet_lab.lm.sdpa import record_if_cuda

        record_if_cuda(store.results_dir, [c.variant.name for c in cells],
                       sorted({c.context for c in cells}))
    shown = stored_runs(store, cells, args.minutes, calibrated, rates, spacings, scale)
    return run_cells("lm", cells, configs, states, store, session, command,
                     args.report_only, lambda: write_report(store, shown, not args.no_plot),
                     args.jobs)
