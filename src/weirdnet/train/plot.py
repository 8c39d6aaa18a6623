"""``weirdnet plot``: training and evaluation curves of one or more runs, as one PNG.

A run directory holds ``log.jsonl``, one JSON event per line (``start``, ``train``,
``eval``, ``end``), written by ``weirdnet train``.  :func:`read_log` reads it into a
:class:`RunHistory`; :func:`plot_runs` draws the runs side by side: the training loss against
the optimizer step (raw as a faint line, an exponential moving average as the solid one),
then one panel per evaluation metric (the val split solid with markers, any other split
dashed), one colour per run in every panel; :func:`throughput_lines` gives each run's
median input tokens/s, samples/s and targets/s.

A resumed run appends to the same log, so the steps redone after a crash appear twice:
for each (event, split, step) the last line wins, and a ``start`` event at step S drops
the earlier points after S (the abandoned part of a crashed run that was not redone yet).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from weirdnet.run.files import write_png

LOG_NAME = "log.jsonl"
PLOT_NAME = "curves.png"
METRIC_ORDER = ("loss", "bpc", "perplexity", "accuracy", "token_accuracy", "exact_match")
"""Evaluation metrics in panel order; other metrics follow alphabetically."""
LOG_SCALE_METRICS = frozenset({"perplexity"})
DPI = 120
_PANEL_SIZE = (4.8, 3.6)  # inches per panel

DESCRIPTION = """\
Draw the training and evaluation curves of one or more runs into one PNG.

Panels side by side: the training loss against the optimizer step (raw as a faint line,
an exponential moving average as the solid one, see --smooth), then one panel per
evaluation metric (default: every metric of any run's val evaluations, in the order
loss, bpc, perplexity, accuracy, token_accuracy, exact_match, then the others
alphabetically; perplexity on a log scale). Each run keeps its colour in every panel.

RUN is a run directory written by `weirdnet train` (or its log.jsonl). Steps redone
after a resume count once (the last logged value wins); a malformed line, such as a
half-written last line after a crash, is skipped with a warning. The PNG goes to
RUN/curves.png for one run, else ./curves.png, unless --out says otherwise. Then one
line a run gives its median training throughput: input tokens/s (the positions the model
reads that are not padding), samples/s and targets/s (the positions the loss counts:
one a sample for a classifier). A log written before input tokens were counted has
samples/s and targets/s only (its tokens_per_s counted targets).

examples:
  weirdnet plot runs/quickstart
  weirdnet plot runs/a runs/b --out compare.png --metrics loss,accuracy
"""

_NO_MATPLOTLIB = ("weirdnet plot needs matplotlib: pip install 'weirdnet[plot]' "
                  "(or pip install matplotlib)")


class TrainPoint(NamedTuple):
    """One ``train`` event: the step and what was logged there (NaN where missing; see
    :mod:`weirdnet.run.runlog` for what each rate counts)."""

    step: int
    loss: float
    lr: float
    input_tokens_per_s: float
    samples_per_s: float
    targets_per_s: float
    """Logs written before the rates had these names: their ``tokens_per_s``, which
    counted targets."""


def _train_point(event: dict[str, Any], step: int) -> TrainPoint:
    """The :class:`TrainPoint` of one ``train`` event."""
    targets = event.get("targets_per_s", event.get("tokens_per_s"))
    return TrainPoint(step, _number(event.get("loss")), _number(event.get("lr")),
                      _number(event.get("input_tokens_per_s")),
                      _number(event.get("samples_per_s")), _number(targets))


@dataclass
class RunHistory:
    """One run's history as read back from its ``log.jsonl`` (written by
    :class:`weirdnet.run.runlog.RunLog`), deduplicated and sorted by step."""

    name: str
    """The run directory's name."""
    path: Path
    """The ``log.jsonl`` file."""
    train: list[TrainPoint] = field(default_factory=list)
    evals: dict[str, list[tuple[int, dict[str, float]]]] = field(default_factory=dict)
    """``{split: [(step, {metric: value}), ...]}``."""
    results: dict[str, dict[str, float]] | None = None
    """The ``end`` event's final metrics per split, if the run finished."""
    best_step: int | None = None
    task: str | None = None
    """From the last ``start`` event ("lm", "classification", ...)."""

    def metrics(self, split: str = "val") -> list[str]:
        """The metrics that appear in this run's evaluations of ``split``."""
        seen: dict[str, None] = {}
        for _, values in self.evals.get(split, ()):
            seen.update(dict.fromkeys(values))
        return list(seen)


def _log_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    file = path if path.suffix == ".jsonl" and not path.is_dir() else path / LOG_NAME
    if not file.is_file():
        raise FileNotFoundError(f"{path} is not a run directory: no {LOG_NAME} "
                                f"(runs are written by `weirdnet train`)")
    return file


def _number(value: Any) -> float:
    """``value`` as a float; NaN for anything that is not a number (missing, null, text)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return math.nan


def read_log(path: str | os.PathLike) -> RunHistory:
    """Read a run's ``log.jsonl`` (``path``: the run directory or the file itself).

    For each (event, split, step) the last occurrence wins, and a ``start`` event at
    step S drops the train and eval points after S logged before it (a resumed run
    redoes them).  Unknown events and keys are ignored; a line that is not a JSON object
    with an ``event`` and an integer ``step`` is skipped, and one warning names the
    first such line and counts the rest.
    """
    file = _log_file(path)
    train: dict[int, TrainPoint] = {}
    evals: dict[str, dict[int, dict[str, float]]] = {}
    log = RunHistory(name=file.parent.resolve().name, path=file)
    skipped: list[tuple[int, str]] = []  # (line number, why) of each malformed line
    with file.open(encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                event, kind, step = _event(line)
            except (ValueError, KeyError) as error:
                reason = f"no {error}" if isinstance(error, KeyError) else str(error)
                skipped.append((lineno, reason))
                continue
            if kind == "train":
                train[step] = _train_point(event, step)
            elif kind == "eval":
                metrics = event.get("metrics")
                if isinstance(metrics, dict):
                    split = str(event.get("split", "val"))
                    evals.setdefault(split, {})[step] = {
                        str(k): _number(v) for k, v in metrics.items()
                        if isinstance(v, int | float) and not isinstance(v, bool)}
            elif kind == "start":
                log.task = event.get("task", log.task)
                log.results, log.best_step = None, None  # running again: a new end comes
                for points in (train, *evals.values()):
                    for stale in [s for s in points if s > step]:
                        del points[stale]
            elif kind == "end":
                results = event.get("results")
                log.results = results if isinstance(results, dict) else None
                best = event.get("best_step")
                log.best_step = best if isinstance(best, int) else None
    log.train = [train[s] for s in sorted(train)]
    log.evals = {split: [(s, points[s]) for s in sorted(points)]
                 for split, points in evals.items() if points}
    if skipped:  # one warning, however many lines (a log that is not one warns once)
        (lineno, reason), more = skipped[0], len(skipped) - 1
        warnings.warn(f"{file}:{lineno}: skipped a malformed line ({reason})"
                      + (f" and {more} more" if more else ""), stacklevel=2)
    return log


def _event(line: str) -> tuple[dict, Any, int]:
    """(the event, its kind, its step) of one log line; ValueError or KeyError when it is
    not a JSON object with an ``event`` and an integer ``step``."""
    event = json.loads(line)
    if not isinstance(event, dict):
        raise ValueError("not a JSON object")
    kind, step = event["event"], event["step"]
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"step {step!r} is not an integer")
    return event, kind, step


def order_metrics(names) -> list[str]:
    """``names`` deduplicated, in :data:`METRIC_ORDER` and then alphabetically."""
    names = set(names)
    known = [m for m in METRIC_ORDER if m in names]
    return known + sorted(names - set(known))


def ema(values: list[float], smooth: float) -> list[float]:
    """Exponential moving average ``m = smooth * m + (1 - smooth) * x``, started at the
    first finite value; non-finite values (a diverged step) leave it unchanged."""
    out, mean = [], math.nan
    for x in values:
        if math.isfinite(x):
            mean = x if math.isnan(mean) else smooth * mean + (1.0 - smooth) * x
        out.append(mean)
    return out


def _labels(paths: list[Path], logs: list[RunHistory]) -> list[str]:
    """Run names for the legend; the paths as given where two runs share a name."""
    names = [log.name for log in logs]
    return [str(p) if names.count(n) > 1 else n for p, n in zip(paths, names)]


def _finite(values) -> list[float]:
    return [v if math.isfinite(v) else math.nan for v in values]


def plot_runs(runs: list[str | os.PathLike], out: str | os.PathLike | None = None,
              metrics: list[str] | None = None, smooth: float = 0.9) -> Path:
    """Draw the curves of ``runs`` (run directories or their ``log.jsonl``) into one PNG
    and return its path (default: ``RUN/curves.png`` for one run, else ``./curves.png``).

    ``metrics``: the evaluation metrics to draw, one panel each (default: every metric in
    any run's val evaluations, see :func:`order_metrics`).  ``smooth`` in [0, 1): the EMA
    factor of the training loss.  Raises ``FileNotFoundError`` for a path without a log,
    ``ValueError`` for a run with no training step yet or a metric no run has, and
    ``ImportError`` without matplotlib.
    """
    paths = [Path(r) for r in runs]
    if not paths:
        raise ValueError("no runs to plot")
    if not 0.0 <= smooth < 1.0:
        raise ValueError(f"smooth must be in [0, 1), got {smooth}")
    logs = [read_log(p) for p in paths]
    for p, log in zip(paths, logs):
        if not log.train:
            raise ValueError(f"run {log.name} ({p}) has no training steps logged yet")
    metrics = _metrics_to_draw(logs, metrics)
    if out is None:
        out = (logs[0].path.parent if len(logs) == 1 else Path.cwd()) / PLOT_NAME
    try:
        from matplotlib import colormaps
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(_NO_MATPLOTLIB) from None

    palette = colormaps["tab10"].colors
    colours = [palette[i % len(palette)] for i in range(len(logs))]
    panels = 1 + len(metrics)
    fig = Figure(figsize=(_PANEL_SIZE[0] * panels, _PANEL_SIZE[1]), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    _draw_training_loss(axes[0], logs, _labels(paths, logs), colours, smooth)
    other_splits = sorted({s for log in logs for s in log.evals} - {"val"})
    for ax, metric in zip(axes[1:], metrics):
        _draw_metric(ax, metric, logs, colours, ("val", *other_splits))
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return write_png(fig, out, DPI)


def _metrics_to_draw(logs: list[RunHistory], metrics: list[str] | None) -> list[str]:
    """``metrics`` without repeats, each checked against the runs' evaluations; by
    default every metric of any run's val evaluations, in :func:`order_metrics` order."""
    if metrics is None:
        return order_metrics(m for log in logs for m in log.metrics("val"))
    available = {m for log in logs for points in log.evals.values()
                 for _, values in points for m in values}
    missing = [m for m in metrics if m not in available]
    if missing:
        raise ValueError(f"no run has evaluation metric(s) {', '.join(missing)} "
                         f"(available: {', '.join(order_metrics(available)) or 'none'})")
    return list(dict.fromkeys(metrics))


def _draw_training_loss(ax, logs: list[RunHistory], labels: list[str], colours: list,
                        smooth: float) -> None:
    """The first panel: each run's raw loss (faint) and its EMA (solid, labelled)."""
    for log, label, colour in zip(logs, labels, colours):
        steps = [p.step for p in log.train]
        loss = _finite(p.loss for p in log.train)
        ax.plot(steps, loss, color=colour, alpha=0.25, linewidth=0.8)
        ax.plot(steps, ema(loss, smooth), color=colour, linewidth=1.6, label=label)
    ax.set_title(f"training loss (EMA {smooth:g})" if smooth else "training loss")
    ax.set_ylabel("loss")
    ax.legend(fontsize="small")


def _split_style(split: str) -> dict:
    """val solid with dots, any other split dashed with crosses."""
    val = split == "val"
    return {"linestyle": "-" if val else "--", "marker": "o" if val else "x",
            "markersize": 3.5}


def _draw_metric(ax, metric: str, logs: list[RunHistory], colours: list,
                 splits: tuple[str, ...]) -> None:
    """One evaluation panel: ``metric`` of every run (its colour) on every split that has
    it (its line style); a legend of the styles where more than val is drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogFormatter

    splits_drawn = set()
    for log, colour in zip(logs, colours):
        for split in splits:
            points = [(s, v[metric]) for s, v in log.evals.get(split, ()) if metric in v]
            if not points:
                continue
            splits_drawn.add(split)
            steps, values = zip(*points)
            ax.plot(steps, _finite(values), color=colour,
                    linewidth=1.4 if split == "val" else 1.0, **_split_style(split))
    if metric in LOG_SCALE_METRICS:
        ax.set_yscale("log")
        for axis_formatter in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis_formatter(LogFormatter())  # plain "4", "6", "10", not 4×10⁰
    shown = [s for s in splits if s in splits_drawn]
    ax.set_title(f"{' / '.join(shown) or 'val'} {metric}")
    ax.set_ylabel(metric + (" (log scale)" if metric in LOG_SCALE_METRICS else ""))
    if shown != ["val"] and shown:  # tell the splits apart by line style
        ax.legend(handles=[Line2D([], [], color="grey", label=s, **_split_style(s))
                           for s in shown], fontsize="small")


_RATES = (("input_tokens_per_s", "input tokens/s", ",.0f"),
          ("samples_per_s", "samples/s", ",.1f"), ("targets_per_s", "targets/s", ",.1f"))
"""(TrainPoint field, its name in ``weirdnet plot``'s output, format)."""


def throughput_lines(runs: list[str | os.PathLike]) -> list[str]:
    """One line per run: the median of each training rate its log has (a log written
    before input tokens were counted has targets/s only: its ``tokens_per_s``)."""
    lines = []
    for run_ in runs:
        log, rates = read_log(run_), []
        for name, label, spec in _RATES:
            values = [getattr(p, name) for p in log.train]
            values = [v for v in values if math.isfinite(v)]
            if values:
                rates.append(f"{label} {statistics.median(values):{spec}}")
        lines.append(f"{log.name}: median {', '.join(rates) or 'throughput not logged'}")
    return lines


def _smooth(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _metric_list(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise argparse.ArgumentTypeError("no metric names given")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``weirdnet plot``."""
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="run directory written by `weirdnet train` (or its log.jsonl)")
    parser.add_argument("--out", type=Path, default=None, metavar="PNG",
                        help=f"image to write (default: RUN/{PLOT_NAME} for one run, "
                             f"else ./{PLOT_NAME})")
    parser.add_argument("--metrics", type=_metric_list, default=None, metavar="M1,M2",
                        help="comma-separated evaluation metrics, one panel each "
                             "(default: every metric of the val evaluations)")
    parser.add_argument("--smooth", type=_smooth, default=0.9, metavar="S",
                        help="EMA factor in [0, 1) of the training-loss line; 0 draws the "
                             "raw loss only (default: %(default)s)")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Draw the plot and print where it went; 2 on a missing run, bad input or no
    matplotlib (the message on stderr)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            path = plot_runs(args.runs, out=args.out, metrics=args.metrics,
                             smooth=args.smooth)
        except (FileNotFoundError, ValueError, ImportError) as error:
            text = str(error)  # the ImportError's message already says who speaks
            status, message = 2, text if text.startswith("weirdnet plot") else (
                f"weirdnet plot: {text}")
        else:
            with warnings.catch_warnings():  # plot_runs warned of a malformed line once
                warnings.simplefilter("ignore")
                rates = throughput_lines(args.runs)
            status, message = 0, "\n".join([f"wrote {path}", *rates])
    for warning in caught:
        print(f"weirdnet plot: warning: {warning.message}", file=sys.stderr)
    print(message, file=sys.stderr if status else sys.stdout)
    return status
