"""The report of ``weirdnet bench context`` (``context.md``, ``context.png``), built from
the stored records alone: per evaluation window, test bits per byte of every model in each
bucket of context length (mean over seeds), and the curves."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weirdnet.lab.context.command import BOUNDS, CORPUS
from weirdnet.lab.opbench.report import markdown_table
from weirdnet.lab.sweep import writing
from weirdnet.lab.sweep.store import CellStore
from weirdnet.lab.variants import VARIANTS
from weirdnet.train.positions import span_label


def curves(records: list[dict[str, Any]], context: int) -> dict[int, float]:
    """Bucket lower edge -> bits per byte at window ``context``, the mean over records."""
    by_edge: dict[int, list[float]] = {}
    for record in records:
        for row in _rows(record, context):
            by_edge.setdefault(row["from"], []).append(row["bpc"])
    return {edge: statistics.mean(values) for edge, values in sorted(by_edge.items())}


def _rows(record: dict[str, Any], context: int) -> list[dict[str, Any]]:
    return record.get("positions_bpc", {}).get(str(context), [])


def window_bpc(records: list[dict[str, Any]], context: int) -> float | None:
    """Test bits per byte of the whole split read at window ``context`` (every bucket's
    targets together), the mean over records; None if none was read there."""
    values = []
    for record in records:
        rows = _rows(record, context)
        if rows:
            targets = sum(r["targets"] for r in rows)
            values.append(sum(r["bpc"] * r["targets"] for r in rows) / targets)
    return statistics.mean(values) if values else None


def _by_model(cells: Sequence, done: dict[str, dict]) -> dict[str, list[dict[str, Any]]]:
    models: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        if cell.key in done:
            models.setdefault(cell.variant.name, []).append(done[cell.key])
    return models


def markdown(cells: Sequence, done: dict[str, dict], failed: list[str]) -> str:
    models = _by_model(cells, done)
    contexts = sorted({c for cell in cells for c in cell.eval_contexts})
    train = sorted({cell.train_context for cell in cells})
    out = ["# Does each model use long context? (ours)", "",
           f"Byte-level language models trained on `{CORPUS}` (whole works, packed) at a "
           f"{', '.join(f'{n:,}' for n in train)}-byte context; test bits per byte by "
           "context length, the bytes of the same work a target sees. A model that uses "
           "long context keeps improving in the later buckets; windows longer than the "
           "training context measure length extrapolation. `weirdnet bench context`.", "",
           "A bucket holds the contexts above its lower edge up to its upper one. The first "
           "buckets hold every window's start and every work's opening bytes (titles, lists "
           "of characters, which are harder to predict); a longer window has fewer window "
           "starts, so its first buckets hold more openings. Compare a bucket across models "
           "at one window; the last row gives each bucket's size.", ""]
    for record in list(done.values())[:1]:
        machine = record.get("machine", {})
        out += [f"- machine: {machine.get('cpu_model', '?')}; torch "
                f"{machine.get('torch', '?')}; commit {str(record.get('commit'))[:10]}", ""]
    edges = list(BOUNDS)
    for context in contexts:
        shown = [e for e in edges if e < context]
        spans = [span_label(e, edges[i + 1] if i + 1 < len(shown) else context)
                 for i, e in enumerate(shown)]
        rows, counts = [], None
        for name, records in models.items():
            values, whole = curves(records, context), window_bpc(records, context)
            rows.append([VARIANTS[name].label, str(len(records)),
                         "–" if whole is None else f"{whole:.3f}",
                         *(f"{values[e]:.3f}" if e in values else "–" for e in shown)])
            counts = counts or {r["from"]: r["targets"] for r in _rows(records[0], context)}
        if counts:
            rows.append(["*targets per bucket*", "", f"*{sum(counts.values()):,}*",
                         *(f"*{counts.get(e, 0):,}*" for e in shown)])
        extrapolated = " (longer than training: extrapolation)" \
            if context > max(train) else ""
        out += [f"## Window {context:,} bytes{extrapolated}", "",
                *markdown_table(["Model", "seeds", "test bpc, whole window", *spans], rows),
                ""]
    total_s = sum(r.get("wall_s", 0.0) for r in done.values())
    out += [f"{len(done)} of {len(cells)} cells done; training wall time {total_s / 3600:.2f} "
            "h.", ""]
    if failed:
        out += ["Failed cells (see their logs): " + ", ".join(failed), ""]
    return "\n".join(out)


def draw(cells: Sequence, done: dict[str, dict], path: Path) -> Path:
    """context.png: bits per byte against the context bucket, a panel per window."""
    from weirdnet._atomic import write_png

    contexts = sorted({c for cell in cells for c in cell.eval_contexts})
    fig, axes = writing.panels(1, len(contexts), 4.2 * len(contexts), 3.6)
    for ax, context in zip(axes[0], contexts):
        for index, (name, records) in enumerate(_by_model(cells, done).items()):
            values = curves(records, context)
            if values:
                xs = [max(edge, 1) for edge in values]
                ax.plot(xs, list(values.values()), marker="o", color=f"C{index % 10}",
                        label=VARIANTS[name].label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context: bytes of the same work before the target (bucket start)")
        ax.set_ylabel("test bits per byte")
        ax.set_title(f"window {context:,}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return write_png(fig, path)


def write_report(store: CellStore, cells: Sequence, plot: bool) -> Path:
    """Write context.md (and context.png) into the results folder; returns context.md."""
    return writing.write_sweep_report(store, cells, "context", markdown, draw, plot,
                                      "test bits per byte by context length")
