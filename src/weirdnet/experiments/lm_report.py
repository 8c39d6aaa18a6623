"""The report of ``weirdnet bench lm``, from the stored records alone: per context, test
bits per byte after the same minutes, speed, and validation bits per byte at the same
step; ``lm.png``, validation bits per byte against training minutes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weirdnet.bench.report import markdown_table

from . import writing
from .cells import CellStore
from .claims import BETTER, WORSE, compare
from .intervals import mean_interval
from .report import score_of
from .variants import VARIANTS

REFERENCE = "softmax"  # every model is compared with the Transformer


def curve(record: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(step, training minutes, validation bits per byte) of every evaluation; minutes =
    step / the run's median steps/s (evaluation time left out)."""
    rate = record["steps_per_s"]
    return [(e["step"], e["step"] / rate / 60.0, e["metrics"]["bpc"])
            for e in record.get("evaluations", [])]


def _mean_text(values: list[float], digits: int = 3) -> str:
    mean, low, high = mean_interval(values)
    return f"{mean:.{digits}f}" + (f" [{low:.{digits}f}, {high:.{digits}f}]"
                                    if len(values) > 1 else "")


def _at_step(record: dict[str, Any], step: int) -> float | None:
    return next((bpc for s, _, bpc in curve(record) if s == step), None)


def context_table(cells: Sequence, done: dict[str, dict]) -> list[str]:
    """One row per mechanism of a context (mean over seeds)."""
    by_variant: dict[str, list[dict]] = {}
    for cell in cells:
        if cell.key in done:
            by_variant.setdefault(cell.variant.name, []).append(done[cell.key])
    if not by_variant:
        return ["(no finished runs)"]
    common = min(max((s for s, _, _ in curve(r)), default=0)
                 for records in by_variant.values() for r in records)
    header = ["Model", "steps", "steps/s", "bytes/s", "train min",
              f"test bits/byte after {cells[0].minutes:g} min",
              f"val bits/byte at step {common}"]
    rows = []
    for name, records in by_variant.items():
        rate = sum(r["steps_per_s"] for r in records) / len(records)
        steps = records[0]["steps"]
        at_step = [v for r in records if (v := _at_step(r, common)) is not None]
        bytes_per_step = records[0]["config"]["train"]["batch_size"] * cells[0].context
        rows.append([VARIANTS[name].label, f"{steps:,}", f"{rate:.2f}",
                     f"{rate * bytes_per_step:,.0f}",
                     f"{steps / rate / 60:.1f}",
                     _mean_text([r["results"]["test"]["bpc"] for r in records]),
                     _mean_text(at_step) if at_step else "–"])
    return markdown_table(header, rows)


def _test_bpc(cells: Sequence, done: dict[str, dict]) -> dict[str, list[float]]:
    """Test bits per byte of each mechanism's finished runs (one per seed), by name."""
    out: dict[str, list[float]] = {}
    for cell in cells:
        if cell.key in done:
            out.setdefault(cell.variant.name, []).append(
                done[cell.key]["results"]["test"]["bpc"])
    return out


def comparisons(cells: Sequence, done: dict[str, dict]) -> list[str]:
    """Each model against the Transformer, and Weird-Net B against A, on test bits per
    byte after the same minutes: "lower" or "higher" only when the 95% interval of the
    difference excludes 0 (t over seeds); one seed has no interval, so "undecided"."""
    scores = {name: score_of(v, None, accuracy=False)  # t over seeds, none for one
              for name, v in _test_bpc(cells, done).items()}
    pairs = [(name, REFERENCE) for name in scores if name != REFERENCE]
    if {"weird-a", "weird-b"} <= scores.keys():
        pairs.append(("weird-b", "weird-a"))
    rows = []
    for name, other in pairs:
        if other not in scores:
            continue
        a, b = scores[name], scores[other]
        outcome = compare(a, b, higher_is_better=False)
        verdict = {BETTER: "**lower**", WORSE: "**higher**"}.get(
            outcome, "undecided" + (" (one seed)" if min(a.n, b.n) < 2 else ""))
        rows.append([f"{VARIANTS[name].label} vs {VARIANTS[other].label}",
                     f"{a.with_interval(3)} vs {b.with_interval(3)}",
                     f"{a.mean - b.mean:+.3f}", verdict])
    if not rows:
        return []
    return markdown_table(["comparison", "test bits/byte", "difference", "verdict"], rows)


def markdown(cells: Sequence, done: dict[str, dict]) -> str:
    out = ["# Language modelling at equal compute (ours)", "",
           "Byte-level models (D = 128, 4 layers, d_ff = 512) trained for the same minutes "
           "on this machine on `wiki-xml`, the same bytes per step; `weirdnet bench lm`. "
           "Test bits per byte at the end; validation bits per byte at the last step every "
           "model reached. Intervals: 95% over seeds (none with one seed).", ""]
    for record in list(done.values())[:1]:
        machine = record.get("machine", {})
        threads = sorted({r.get("torch_threads") for r in done.values()} - {None})
        commits = sorted({str(r.get("commit"))[:10] for r in done.values()})
        out += [f"- machine: {machine.get('cpu_model', '?')}, "
                f"{machine.get('usable_cores', '?')} cores; torch threads per run: "
                f"{', '.join(map(str, threads)) or '?'}; torch {machine.get('torch', '?')}"
                f"; commits {', '.join(commits)}", ""]
    for context in dict.fromkeys(c.context for c in cells):
        mine = [c for c in cells if c.context == context]
        out += [f"## Context {context} bytes", "", *context_table(mine, done), ""]
        if table := comparisons(mine, done):
            out += ["Decided only when the 95% interval of the difference excludes 0 "
                    "(t over seeds, standard errors added in quadrature):", "", *table, ""]
    hours = sum(r.get("wall_s", 0.0) for r in done.values()) / 3600
    out += [f"{len(done)} of {len(cells)} runs done; wall time of those {hours:.2f} h "
            "(training and evaluations).", ""]
    return "\n".join(out)


def draw(cells: Sequence, done: dict[str, dict], path: Path) -> Path:
    """lm.png: validation bits per byte against training minutes, a panel per context,
    and each run's test bits per byte at its end (a star); ImportError without
    matplotlib."""
    from weirdnet._atomic import write_png

    contexts = list(dict.fromkeys(c.context for c in cells))
    fig, axes = writing.panels(1, len(contexts), 5 * len(contexts), 3.6)
    names = list(dict.fromkeys(c.variant.name for c in cells))
    for ax, context in zip(axes[0], contexts):
        for k, name in enumerate(names):
            for cell in cells:
                if cell.context == context and cell.variant.name == name and cell.key in done:
                    record = done[cell.key]
                    points = curve(record)
                    ax.plot([m for _, m, _ in points], [b for _, _, b in points],
                            marker=".", color=f"C{k % 10}",
                            label=VARIANTS[name].label if cell.seed == 0 else None)
                    ax.plot([record["steps"] / record["steps_per_s"] / 60.0],
                            [record["results"]["test"]["bpc"]], marker="*", markersize=9,
                            color=f"C{k % 10}", linestyle="none")
        ax.set_title(f"context {context} bytes (star: test split at the end)", fontsize=10)
        ax.set_xlabel("training minutes")
        ax.set_ylabel("validation bits per byte")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return write_png(fig, path)


def write_report(store: CellStore, cells: Sequence, plot: bool) -> Path:
    """Write lm.md (and lm.png) into the results folder; returns lm.md."""
    done = store.finished(cells)
    figure = (lambda path: draw(cells, done, path)) if plot and done else None
    return writing.write_report(store.results_dir, "lm", markdown(cells, done), figure,
                                "bits per byte against training minutes")
