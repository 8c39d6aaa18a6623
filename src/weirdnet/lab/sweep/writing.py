"""Writing a sweep's report: the Markdown text and its figure, each whole."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from weirdnet.lab.sweep.cell import training_seconds


def panels(rows: int, cols: int, width: float, height: float):
    """A matplotlib Figure on the Agg canvas (no pyplot state) and its (rows, cols) grid
    of axes; ImportError when matplotlib is not installed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, cols, squeeze=False)


def write_sweep_report(store, cells, stem: str, markdown, draw, plot: bool,
                       caption: str) -> Path:
    """A sweep's report from its records: ``markdown(cells, done, failed)`` as
    ``stem.md`` and, with ``plot`` and a finished cell, ``draw(cells, done, path)`` as
    ``stem.png`` (see :func:`write_report`)."""
    done = store.finished(cells)
    failed = [c.key for c in cells if (store.read(c) or {}).get("status") == "failed"]
    figure = (lambda path: draw(cells, done, path)) if plot and done and draw else None
    return write_report(store.results_dir, stem, markdown(cells, done, failed), figure,
                        caption)


def write_report(folder: Path, stem: str, text: str,
                 draw: Callable[[Path], None] | None, caption: str) -> Path:
    """Write ``folder/stem.md`` and, when ``draw`` is given, ``folder/stem.png``
    (``draw(path)`` writes it), both whole even if a stop signal arrives meanwhile; the
    Markdown links the figure.  Without matplotlib the figure is skipped with one line.
    Returns the Markdown file."""
    from weirdnet._atomic import write_atomic
    from weirdnet.lab.harness import output

    folder.mkdir(parents=True, exist_ok=True)
    with output.write_whole():
        if draw is not None:
            try:
                draw(folder / f"{stem}.png")
                text += f"\n![{caption}]({stem}.png)\n"
            except ImportError:
                print(f"{stem}.png skipped: matplotlib is not installed (pip install "
                      "matplotlib)", file=sys.stderr)
        return write_atomic(folder / f"{stem}.md", text)


def _commit_label(label: object) -> str:
    """A commit as a report names it: 10 hex digits, "+dirty" kept."""
    text = str(label)
    return text[:10] + ("+dirty" if text.endswith("+dirty") else "")


def machine_lines(done: dict[str, dict]) -> list[str]:
    """One line per machine the finished cells' records name: how many cells ran there,
    torch, and every commit they ran at (a cell resumed across commits names each)."""
    by_machine: dict[str, list[dict]] = {}
    for record in done.values():
        machine = record.get("machine") or {}
        name = machine.get("gpu") or machine.get("cpu_model") or "?"
        by_machine.setdefault(name, []).append(record)
    lines = []
    for name, records in by_machine.items():
        torch = sorted({str((r.get("machine") or {}).get("torch", "?")) for r in records})
        commits = sorted({_commit_label(c) for r in records
                          for c in (r.get("commits") or [r.get("commit")])})
        cells = f"{len(records)} cell" + ("s" if len(records) > 1 else "")
        lines.append(f"- machine: {name} ({cells}); torch {', '.join(torch)}; "
                     f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}")
    return lines


def progress_lines(cells, done: dict[str, dict], failed: list[str]) -> list[str]:
    """A report's closing lines: how many cells are done and their training time (each
    cell's steps at its measured rate, :func:`.cell.training_seconds`: a cell resumed
    across processes counts all its steps; evaluations left out), and the failed cells."""
    total_s = sum(training_seconds(r) or 0.0 for r in done.values())
    out = [f"{len(done)} of {len(cells)} cells done; their training time {total_s / 3600:.2f} "
           "h (each cell's steps at its measured steps/s, on the machine its record names; "
           "evaluations left out).", ""]
    if failed:
        out += ["Failed cells (see their logs): " + ", ".join(failed), ""]
    return out

