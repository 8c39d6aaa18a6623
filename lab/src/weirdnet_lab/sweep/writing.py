"""Writing a sweep's report: the Markdown text and its figure, each whole."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from weirdnet_lab.sweep.cell import training_seconds


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
    from weirdnet.run import write_atomic
    from weirdnet_lab.harness import output

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


def _machine_label(record: dict) -> str:
    """The machine a record names: its GPU, else its CPU model."""
    machine = record.get("machine") or {}
    return machine.get("gpu") or machine.get("cpu_model") or "?"


def machine_lines(done: dict[str, dict], *, name: Callable[[dict], str] = _machine_label,
                  unit: str = "cell",
                  details: Callable[[list[dict]], str] | None = None) -> list[str]:
    """One line per machine (``name(record)``) the finished records name: how many
    ``unit``s ran there, ``details(records)`` if given, torch (and transformers where a
    record names it), and every commit they ran at (a cell resumed across commits names
    each)."""
    by_machine: dict[str, list[dict]] = {}
    for record in done.values():
        by_machine.setdefault(name(record), []).append(record)
    lines = []
    for label, records in by_machine.items():
        machines = [r.get("machine") or {} for r in records]
        versions = "torch " + ", ".join(sorted({str(m.get("torch", "?")) for m in machines}))
        if transformers := sorted({str(m["transformers"]) for m in machines
                                   if m.get("transformers")}):
            versions += ", transformers " + ", ".join(transformers)
        commits = sorted({_commit_label(c) for r in records
                          for c in (r.get("commits") or [r.get("commit")])})
        count = f"{len(records)} {unit}" + ("s" if len(records) > 1 else "")
        extra = f"; {details(records)}" if details else ""
        lines.append(f"- machine: {label} ({count}){extra}; {versions}; "
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

