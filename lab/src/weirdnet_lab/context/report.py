"""The report of ``weirdnet bench context`` (``context.md``, ``context.png``), built from
the stored records alone: per evaluation window, test bits per byte of every model in each
bucket of context length (mean over seeds), and the curves."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weirdnet.train import short_bytes, span_label, truncation_rows
from weirdnet_lab.context.settings import BOUNDS, CORPUS
from weirdnet_lab.opbench.report import markdown_table
from weirdnet_lab.sweep import writing
from weirdnet_lab.sweep.store import CellStore
from weirdnet_lab.variants import VARIANTS


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


def truncation(records: list[dict[str, Any]]
               ) -> tuple[list[int], dict[int, tuple[float, float, float, float]]]:
    """(contexts, context -> (bits per byte, its difference from the longest context, the
    difference's 95% interval)) of the truncation test: per window, the mean over
    records (seeds), then :func:`weirdnet.train.positions.truncation_rows`."""
    tests = [r["truncation_bpc"] for r in records if r.get("truncation_bpc")]
    if not tests:
        return [], {}
    contexts = [int(c) for c in tests[0]["contexts"]]
    windows = {str(c): [statistics.fmean(values) for values in zip(*(t["bpc"][str(c)]
                                                                      for t in tests))]
               for c in contexts}
    rows = truncation_rows(windows, contexts)
    return contexts, {r["context"]: (r["bpc"], r["minus_longest"], r["low"], r["high"])
                      for r in rows}


def _truncation_section(models: dict[str, list[dict[str, Any]]]) -> list[str]:
    tables = {name: truncation(records) for name, records in models.items()}
    tables = {name: table for name, table in tables.items() if table[0]}
    if not tables:
        return []
    first = next(r["truncation_bpc"] for records in models.values() for r in records
                 if r.get("truncation_bpc"))
    contexts = max((table[0] for table in tables.values()), key=len)
    rows = []
    for name, (shown, values) in tables.items():
        cells = []
        for context in contexts:
            if context not in values:
                cells.append("–")
                continue
            bpc, diff, low, high = values[context]
            cells.append(f"{bpc:.3f}" if context == shown[-1] else
                         f"{bpc:.3f} ({diff:+.3f} [{low:+.3f}, {high:+.3f}])")
        rows.append([VARIANTS[name].label, *cells])
    return ["## The same bytes with less context (truncation)", "",
            f"The last {first['span']:,} bytes of each test window that lies inside one document "
            f"({first['windows']} windows) are scored with only the bytes before them up to "
            "the context named visible. In brackets: the difference from the longest "
            "context and its 95% interval over windows, each window paired with itself. A "
            "model uses the context between two columns when its bits per byte fall from "
            "one to the next by more than the interval.", "",
            *markdown_table(["Model", *(f"{short_bytes(c)} bytes" for c in contexts)],
                            rows), ""]


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
    corpus = cells[0].corpus if cells else CORPUS
    documents = "whole works" if corpus == CORPUS else "whole documents"
    out = ["# Does each model use long context? (ours)", "",
           f"Byte-level language models trained on `{corpus}` ({documents}, packed) at a "
           f"{', '.join(f'{n:,}' for n in train)}-byte context; test bits per byte by "
           "context length, the bytes of the same document a target sees. A model that uses "
           "long context keeps improving in the later buckets; windows longer than the "
           "training context measure length extrapolation. `weirdnet bench context`.", "",
           "A bucket holds the contexts above its lower edge up to its upper one. The first "
           "buckets hold every window's start and every document's opening bytes (titles, "
           "casts, headings, which are harder to predict); a longer window has fewer window "
           "starts, so its first buckets hold more openings. Compare a bucket across models "
           "at one window; the last row gives each bucket's size.", ""]
    if done:
        out += [*writing.machine_lines(done), ""]
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
    out += _truncation_section(models)
    out += writing.progress_lines(cells, done, failed)
    return "\n".join(out)


def draw(cells: Sequence, done: dict[str, dict], path: Path) -> Path:
    """context.png: bits per byte against the context bucket, a panel per window."""
    from weirdnet.run import write_png

    contexts = sorted({c for cell in cells for c in cell.eval_contexts})
    models = _by_model(cells, done)
    tests = {name: truncation(records) for name, records in models.items()}
    tests = {name: test for name, test in tests.items() if test[0]}
    count = len(contexts) + bool(tests)
    fig, axes = writing.panels(1, count, 4.2 * count, 3.6)
    if tests:
        ax = axes[0][-1]
        for name, (shown, values) in tests.items():
            ax.plot(shown, [values[c][0] for c in shown], marker="o",
                    color=f"C{list(models).index(name) % 10}", label=VARIANTS[name].label)
        low, high = ax.get_ylim()
        middle = (low + high) / 2  # at least 0.1 bits tall: noise must not look like a trend
        ax.set_ylim(min(low, middle - 0.05), max(high, middle + 0.05))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes visible before the scored bytes")
        ax.set_ylabel("test bits per byte (the same bytes)")
        ax.set_title("truncation", fontsize=10)
        ax.grid(alpha=0.3)
    for ax, context in zip(axes[0], contexts):
        for index, (name, records) in enumerate(models.items()):
            values = curves(records, context)
            if values:
                xs = [max(edge, 1) for edge in values]
                ax.plot(xs, list(values.values()), marker="o", color=f"C{index % 10}",
                        label=VARIANTS[name].label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bucket start: bytes of the document before the target")
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
