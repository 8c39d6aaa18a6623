"""The papers' Fig. 6: LRA average accuracy (y) against training speed (x), with peak
memory as the circle area; our measured numbers beside the papers' (Weird-Net Table III /
DBA Table 2 averages, speed and memory at 4K from Weird-Net Table V / DBA Table 1).

Needs matplotlib (``pip install matplotlib``); drawn with the Agg canvas, no display.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from weirdnet_lab.suite import numbers
from weirdnet_lab.suite.report import Results
from weirdnet_lab.suite.tasks import get_task
from weirdnet_lab.variants import VARIANTS


def our_points(results: Results, variants: Sequence[str]
               ) -> tuple[list[tuple[str, float, float, float]], tuple[str, ...]]:
    """(label, speed ×, LRA average, memory ×) for each variant with a measured speed,
    each averaged over the same LRA tasks (:meth:`~.report.Results.common_tasks`: all
    five, else those the budget ran); and those tasks."""
    timed = [n for n in variants if None not in results.relative_speed(n)
             and any(results.score(t, n).mean is not None for t in numbers.LRA_COLUMNS)]
    tasks = results.common_tasks(numbers.LRA_COLUMNS, timed)
    if not tasks:
        return [], tasks
    points = []
    for name in timed:
        speed, memory = results.relative_speed(name)
        points.append((VARIANTS[name].label, speed, results.average(tasks, name).mean,
                       memory))
    return points, tasks


def accuracy_label(tasks: Sequence[str]) -> str:
    """The y axis: the LRA average of all five tasks, or of the ones named."""
    if tuple(tasks) == numbers.LRA_COLUMNS or not tasks:
        return "LRA average accuracy (%), 5 tasks"
    return "accuracy (%), average of " + ", ".join(get_task(t).label for t in tasks)


def paper_points(variants: Sequence[str]) -> list[tuple[str, float, float, float]]:
    """The same from the papers' tables (only the rows that give all three numbers)."""
    points = []
    for name in variants:
        row = numbers.LRA.get(name)
        if row is None or not all(t in row[2] for t in numbers.LRA_COLUMNS):
            continue
        average = statistics.fmean(row[2][t] for t in numbers.LRA_COLUMNS)
        if name == "softmax":
            speed, memory = 1.0, 1.0
        elif name in numbers.SPEED and 4096 in numbers.SPEED[name][1]:
            speed, memory = numbers.SPEED[name][1][4096]
        else:
            continue
        points.append((VARIANTS[name].label, speed, average, memory))
    return points


def _panel(axes, points, title: str, xlabel: str, ylabel: str,
           colors: dict[str, str]) -> None:
    for label, speed, average, memory in points:
        color = colors[label]
        axes.scatter([speed], [average], s=1500.0 * memory, alpha=0.35, color=color,
                     edgecolors=color)
        axes.annotate(label, (speed, average), ha="center", va="center", fontsize=8)
    axes.set_title(title, fontsize=10)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)
    if points:
        xs = [p[1] for p in points]
        ys = [p[2] for p in points]
        axes.set_xlim(min(xs) * 0.8 - 0.05, max(xs) * 1.2 + 0.05)
        axes.set_ylim(min(ys) - 4, max(ys) + 4)


def draw_fig6(results: Results, variants: Sequence[str], out: Path, budget: str) -> Path:
    """Write the two-panel figure to ``out`` (PNG) and return the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from weirdnet.run import write_png

    figure = Figure(figsize=(12, 5), dpi=110)
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    speed_task = get_task(results.speed_task()).label
    points, tasks = our_points(results, variants)
    speed_label = "training steps/s relative to the Transformer"
    colors = {VARIANTS[n].label: f"C{i % 10}" for i, n in enumerate(variants)}  # both panels
    _panel(left, points, f"ours ({budget} budget): speed and memory of the {speed_task} "
           "cells", speed_label, accuracy_label(tasks), colors)
    _panel(right, paper_points(variants), "papers' numbers (speed and memory at 4K)",
           speed_label, accuracy_label(numbers.LRA_COLUMNS), colors)
    figure.suptitle("Fig. 6 layout: accuracy vs speed; circle area = peak memory "
                    "relative to the Transformer")
    figure.tight_layout()
    return write_png(figure, out)
