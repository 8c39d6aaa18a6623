"""The papers' Fig. 6: LRA average accuracy (y) against training speed (x), with peak
memory as the circle area; our measured numbers beside the papers' (Weird-Net Table III /
DBA Table 2 averages, speed and memory at 4K from Weird-Net Table V / DBA Table 1).

Needs matplotlib (``pip install matplotlib``); drawn with the Agg canvas, no display.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from . import numbers
from .report import Results
from .tasks import get_task
from .variants import VARIANTS


def our_points(results: Results, variants: Sequence[str]) -> list[tuple[str, float, float,
                                                                         float]]:
    """(label, speed ×, LRA average, memory ×) for each variant measured on all of it."""
    points = []
    for name in variants:
        average = results.average(numbers.LRA_COLUMNS, name).mean
        speed, memory = results.relative_speed(name)
        if None not in (average, speed, memory):
            points.append((VARIANTS[name].label, speed, average, memory))
    return points


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


def _panel(axes, points, title: str, xlabel: str) -> None:
    for index, (label, speed, average, memory) in enumerate(points):
        color = f"C{index % 10}"
        axes.scatter([speed], [average], s=1500.0 * memory, alpha=0.35, color=color,
                     edgecolors=color)
        axes.annotate(label, (speed, average), ha="center", va="center", fontsize=8)
    axes.set_title(title, fontsize=10)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("LRA average accuracy (%), 5 tasks")
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

    from weirdnet._atomic import write_png

    figure = Figure(figsize=(12, 5), dpi=110)
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    speed_task = get_task(results.speed_task()).label
    _panel(left, our_points(results, variants), f"ours ({budget} budget): speed and "
           f"memory of the {speed_task} cells", "training steps/s relative to the Transformer")
    _panel(right, paper_points(variants), "papers' numbers (speed and memory at 4K)",
           "training steps/s relative to the Transformer")
    figure.suptitle("Fig. 6 layout: accuracy vs speed; circle area = peak memory "
                    "relative to the Transformer")
    figure.tight_layout()
    return write_png(figure, out)
