"""The report of ``weirdnet bench recall``: a table per diagnostic (test accuracy with its
95% interval) and ``recall.png`` (accuracy against width, one panel per diagnostic and
length), built from the stored records alone (``--report-only`` rebuilds it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weirdnet_lab.opbench.report import markdown_table
from weirdnet_lab.recall.settings import DEFAULT_LR, DIAGNOSTICS, TEST_SEQUENCES, diagnostic_options
from weirdnet_lab.sweep import writing
from weirdnet_lab.sweep.intervals import accuracy_interval, mean_interval
from weirdnet_lab.sweep.store import CellStore
from weirdnet_lab.variants import VARIANTS


def asked_per_sequence(diagnostic: str, options: dict[str, int]) -> int:
    """Targets asked in one test sequence: MQAR's pairs, the copied tokens, or 1."""
    if diagnostic == "mqar":
        return options["num_pairs"]
    if diagnostic == "selective-copy":
        return options["num_tokens"]
    return 1


def chance(diagnostic: str, options: dict[str, int]) -> float:
    """Accuracy of a uniform guess among the tokens a target can take."""
    vocab = options["vocab_size"]
    if diagnostic == "mqar":
        return 1.0 / (vocab - 1 - (vocab - 1) // 2)
    return 1.0 / (vocab - 2)


def _accuracy(record: dict[str, Any]) -> float:
    return float(record["results"]["test"]["accuracy"])


def _entry(records: list[dict[str, Any]], asked: int) -> str:
    """Test accuracy in % with its 95% interval: over seeds (t), never narrower than the
    test set's binomial (Wilson) interval, whose trials are the asked targets (MQAR's
    targets within a sequence are not independent: that interval is optimistic)."""
    if not records:
        return "–"
    sequences = (records[0].get("evaluated") or {}).get("test", TEST_SEQUENCES)
    mean, low, high = accuracy_interval([_accuracy(r) for r in records], sequences * asked)
    low, high = max(low, 0.0), min(high, 1.0)  # a t interval over seeds can pass 100%
    return f"{100 * mean:.1f} [{100 * low:.0f}, {100 * high:.0f}]"


def _in_order(names) -> list[str]:
    """Diagnostics or mechanisms in the sweep's own order (DIAGNOSTICS, then VARIANTS),
    whatever order the cells came in."""
    order = {name: i for i, name in enumerate((*DIAGNOSTICS, *VARIANTS))}
    return sorted(set(names), key=lambda name: order.get(name, len(order)))


def _groups(cells: Sequence) -> dict[tuple, list]:
    """Cells grouped by (diagnostic, length, width, variant) over seeds and learning
    rates."""
    groups: dict[tuple, list] = {}
    for cell in cells:
        groups.setdefault((cell.diagnostic, cell.length, cell.width, cell.variant.name),
                          []).append(cell)
    return groups


def records_by_rate(group: Sequence, done: dict[str, dict]
                    ) -> dict[float, list[dict[str, Any]]]:
    """The finished records of one group's cells, by learning rate."""
    by_rate: dict[float, list[dict[str, Any]]] = {}
    for cell in group:
        if cell.key in done:
            by_rate.setdefault(cell.lr, []).append(done[cell.key])
    return by_rate


def chosen(group: Sequence, done: dict[str, dict]
           ) -> tuple[list[dict[str, Any]], float | None, bool]:
    """The finished records of one group at its chosen learning rate: the rate whose
    seeds' mean validation accuracy is best (ties: the default rate, then the smaller).
    Returns (records, rate, whether several rates were finished); ([], None, False)
    when none is."""
    by_rate = records_by_rate(group, done)
    if not by_rate:
        return [], None, False

    def validation(rate: float) -> tuple[float, bool, float]:
        records = by_rate[rate]
        mean = sum(r["results"]["val"]["accuracy"] for r in records) / len(records)
        return mean, rate == DEFAULT_LR, -rate

    rate = max(by_rate, key=validation)
    return by_rate[rate], rate, len(by_rate) > 1


def markdown(cells: Sequence, done: dict[str, dict], failed: list[str]) -> str:
    """The report text."""
    groups = _groups(cells)
    out = ["# Recall diagnostics (ours)", "",
           "Test accuracy (%) over the asked positions, with its 95% interval (over seeds, "
           "else the test set's binomial interval). 2-layer causal models, d_ff = 2 D, "
           "trained on generated data; `weirdnet bench recall`. Where several learning "
           "rates were run, an entry is the one with the best validation accuracy, its "
           "rate in brackets (the test split never chooses).", ""]
    for record in list(done.values())[:1]:
        machine = record.get("machine", {})
        out += [f"- machine: {machine.get('cpu_model', '?')}; torch "
                f"{machine.get('torch', '?')}; commit {str(record.get('commit'))[:10]}", ""]
    for diagnostic in _in_order(c.diagnostic for c in cells):
        mine = [c for c in cells if c.diagnostic == diagnostic]
        columns = sorted({(c.length, c.width) for c in mine})
        variants = _in_order(c.variant.name for c in mine)
        options = diagnostic_options(diagnostic, columns[0][0])
        out += [f"## {diagnostic} (chance {100 * chance(diagnostic, options):.1f}%)", ""]
        header = ["Model", *(f"L={n} D={w}" for n, w in columns)]
        rows = []
        for name in variants:
            row = [VARIANTS[name].label]
            for length, width in columns:
                records, rate, swept = chosen(groups.get((diagnostic, length, width, name), []),
                                              done)
                asked = asked_per_sequence(diagnostic, diagnostic_options(diagnostic, length))
                row.append(_entry(records, asked) + (f" (lr {rate:g})" if swept else ""))
            rows.append(row)
        out += markdown_table(header, rows) + [""]
    out += writing.progress_lines(cells, done, failed)
    return "\n".join(out)


def draw(cells: Sequence, done: dict[str, dict], path: Path) -> Path:
    """recall.png: accuracy against width, a panel per (diagnostic, length); ImportError
    without matplotlib."""
    from weirdnet.run import write_png

    diagnostics = _in_order(c.diagnostic for c in cells)
    lengths = sorted({c.length for c in cells})
    fig, axes = writing.panels(len(diagnostics), len(lengths), 4 * len(lengths),
                       3.2 * len(diagnostics))
    groups = _groups(cells)
    variants = _in_order(c.variant.name for c in cells)
    for i, diagnostic in enumerate(diagnostics):
        for j, length in enumerate(lengths):
            ax = axes[i][j]
            widths = sorted({c.width for c in cells if c.length == length})
            for k, name in enumerate(variants):
                xs, ys = [], []
                for width in widths:
                    records = chosen(groups.get((diagnostic, length, width, name), []),
                                     done)[0]
                    if records:
                        xs.append(width)
                        ys.append(100 * mean_interval([_accuracy(r) for r in records])[0])
                if xs:
                    ax.plot(xs, ys, marker="o", color=f"C{k % 10}",
                            label=VARIANTS[name].label)
            ax.axhline(100 * chance(diagnostic, diagnostic_options(diagnostic, length)),
                       color="grey", linestyle=":", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_xticks(widths, [str(w) for w in widths])
            ax.set_xlim(min(widths) / 1.3, max(widths) * 1.3)
            ax.set_ylim(0, 100)
            ax.set_title(f"{diagnostic}, L = {length}", fontsize=10)
            ax.set_xlabel("model width D")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return write_png(fig, path)


def write_report(store: CellStore, cells: Sequence, plot: bool) -> Path:
    """Write recall.md (and recall.png) into the results folder; returns recall.md."""
    return writing.write_sweep_report(store, cells, "recall", markdown, draw, plot,
                                      "accuracy against width")
