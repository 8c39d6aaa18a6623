"""The report of ``weirdnet bench recall --recipe zoology`` (``recall-zoology.md``), from
the stored records alone: per sequence length, a table of test accuracy by width (the
learning rate with the best validation accuracy), the sanity gate of each column, the
wall time per cell, and every deviation from Zoology's recipe."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weirdnet_lab.opbench.report import markdown_table
from weirdnet_lab.recall import zoology
from weirdnet_lab.recall.report import chosen, records_by_rate
from weirdnet_lab.sweep import writing
from weirdnet_lab.sweep.cell import training_seconds
from weirdnet_lab.sweep.intervals import Z95, accuracy_interval, wilson
from weirdnet_lab.sweep.store import CellStore
from weirdnet_lab.variants import VARIANTS


def _model(cell) -> tuple[str, int]:
    return cell.variant.name, cell.short_conv


def _groups(cells: Sequence) -> dict[tuple, list]:
    """Cells grouped by (length, width, variant, short_conv) over rates and seeds."""
    groups: dict[tuple, list] = {}
    for cell in cells:
        groups.setdefault((cell.length, cell.width, *_model(cell)), []).append(cell)
    return groups


def _test(records: list[dict[str, Any]]) -> float | None:
    if not records:
        return None
    return statistics.mean(float(r["results"]["test"]["accuracy"]) for r in records)


def cell_interval(records: list[dict[str, Any]]) -> tuple[float, float, float]:
    """(mean, low, high) test accuracy in [0, 1] with its 95% interval: over seeds where
    several ran, never narrower than the Wilson interval over the test sequences.  A
    sequence's accuracy is the mean of its queries', a value in [0, 1] whose variance
    is at most mu (1 - mu) (Bhatia-Davis), the variance of a Bernoulli draw of the same
    mean, so the Wilson interval over sequences (not over the dependent queries) covers
    it.  ``records``: one (length, width, model, rate) group's finished records."""
    sequences = (records[0].get("evaluated") or {}).get("test", zoology.TEST_SEQUENCES)
    mean, low, high = accuracy_interval(
        [float(r["results"]["test"]["accuracy"]) for r in records], sequences)
    return mean, max(low, 0.0), min(high, 1.0)


def gate(groups, done, length: int, width: int) -> tuple[bool, float | None]:
    """(whether the column is ranked, the reference's test accuracy or None): ranked when
    the Transformer++ without a convolution (or, if only that ran, with one) reaches
    ``zoology.GATE`` at its best learning rate."""
    best = None
    for conv in (0, zoology.SHORT_CONV):
        value = _test(chosen(groups.get((length, width, zoology.REFERENCE, conv), []),
                             done)[0])
        if value is not None:
            best = value if best is None else max(best, value)
    return best is not None and best >= zoology.GATE, best


def sampling_error(sequences: int = zoology.TEST_SEQUENCES) -> float:
    """The largest 95% half-width (accuracy points) that the test split's sampling alone
    gives a cell's accuracy: each sequence is one draw of its queries' mean accuracy, a
    value in [0, 1] whose variance is at most 1/4."""
    return 100 * Z95 * math.sqrt(0.25 / sequences)


def _wilson_half_width(accuracy: float, sequences: int = zoology.TEST_SEQUENCES) -> float:
    low, high = wilson(accuracy, sequences)
    return (high - low) / 2


def sampling_note() -> str:
    return (f"**Intervals.** One seed per cell, so no interval over seeds (MQAR's "
            f"accuracy jumps at a phase change whose epoch varies by seed). The "
            f"{zoology.TEST_SEQUENCES:,} test sequences alone give each cell the 95% "
            "interval in brackets: the Wilson interval over sequences, each sequence one "
            "draw of its queries' mean accuracy, whose variance is at most that of a "
            "Bernoulli draw of the same mean (Bhatia-Davis). It is widest at 50% "
            f"(±{sampling_error():.1f} points; a difference of two cells there: "
            f"±{math.sqrt(2) * sampling_error():.1f}) and narrows towards 0% and 100% "
            f"(±{100 * _wilson_half_width(0.99):.1f} at 99%). Cells whose intervals "
            "overlap are not ordered by this report.")


def _label(name: str, conv: int) -> str:
    return VARIANTS[name].label + (f" + conv{conv}" if conv else "")


def _rates_note(group: Sequence, done: dict[str, dict], rate: float) -> str:
    """' (lr 0.01; 0.0022: 3.1)' where several rates of ``group`` finished: the chosen
    ``rate``, then each other finished rate's test accuracy (mean over seeds), shown so
    that a rate's failure stays visible (validation alone chose between them); and
    '0.0022 not run yet' for each rate of the grid whose cell has not finished, so that
    a row chosen from fewer rates than the grid holds says so.  '' with one rate."""
    finished = records_by_rate(group, done)
    pending = sorted({cell.lr for cell in group} - set(finished))
    if len(finished) < 2 and not pending:
        return ""
    parts = [f"lr {rate:g}",
             *(f"{other:g}: {100 * _test(records):.1f}"
               for other, records in sorted(finished.items()) if other != rate),
             *(f"{other:g} not run yet" for other in pending)]
    return " (" + "; ".join(parts) + ")"


def _minutes(records) -> str:
    """The cells' median training time (:func:`training_seconds`)."""
    times = [t for r in records if (t := training_seconds(r))]
    return f"{statistics.median(times) / 60:.0f} min" if times else "–"


def markdown(cells: Sequence, done: dict[str, dict], failed: list[str],
             left_out: int = 0) -> str:
    groups = _groups(cells)
    models = list(dict.fromkeys(_model(c) for c in cells))
    out = ["# MQAR at Zoology's recipe (ours)", "",
           f"Test accuracy (%) over the {zoology.TEST_SEQUENCES:,} test sequences' "
           "queries with its 95% interval [in brackets], at the learning rate with the "
           "best validation accuracy (in parentheses where several ran, then each other "
           "rate's test accuracy, which did not choose, and each rate of the grid whose "
           "cell has not run yet), and the epochs "
           "trained (early stopping at 99%), and the minutes a cell trained (its steps at "
           "its median steps per second, counted in CPU time where the record keeps it, "
           "so that neither a pause, a resume nor another job changes it; evaluations "
           "not counted). `weirdnet bench recall --recipe zoology`; the recipe: "
           "`weirdnet_lab.recall.zoology`.", "",
           sampling_note(), "",
           f"**Sanity gate.** A column is ranked only where the Transformer++ reaches "
           f"{100 * zoology.GATE:.0f}% test accuracy; elsewhere the budget, not the "
           "mechanisms, is what the column measures.", "",
           "Deviations from Zoology's Figure 2 in this sweep:", "",
           *(f"- {line}" for line in zoology.deviations(list(cells), left_out)), ""]
    if done:
        out += [*writing.machine_lines(done), ""]
    for length in sorted({c.length for c in cells}):
        widths = sorted({c.width for c in cells if c.length == length})
        out += [f"## L = {length}, {zoology.pairs(length)} key-value pairs, batch "
                f"{zoology.BATCH.get(length, 128)}", ""]
        verdicts = []
        for width in widths:
            ranked, reference = gate(groups, done, length, width)
            if reference is None:
                verdicts.append(f"D = {width}: the Transformer++ has not run; nothing ranked")
            elif ranked:
                verdicts.append(f"D = {width}: ranked (the Transformer++ reaches "
                                f"{100 * reference:.1f}%)")
            else:
                verdicts.append(f"D = {width}: budget too small: attention reaches "
                                f"{100 * reference:.1f}%; nothing ranked")
        out += [f"- {v}" for v in verdicts] + [""]
        rows = []
        for name, conv in models:
            row = [_label(name, conv)]
            for width in widths:
                group = groups.get((length, width, name, conv), [])
                records, rate, _ = chosen(group, done)
                if not records:
                    row.append("–")
                    continue
                value, low, high = cell_interval(records)
                epochs = max(r.get("steps") or 0 for r in records) / \
                    zoology.steps_per_epoch(length, group[0].train_sequences)
                row.append(f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"
                           + _rates_note(group, done, rate)
                           + f", {epochs:.1f} ep, {_minutes(records)}")
            rows.append(row)
        out += markdown_table(["Model", *(f"D = {w}" for w in widths)], rows) + [""]
    out += _rate_effect_lines(groups, done)
    out += writing.progress_lines(cells, done, failed)
    out += _remaining(cells, done)
    return "\n".join(out)


def _overlap(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Whether two rates' 95% test-accuracy intervals (:func:`cell_interval`) overlap."""
    _, low_a, high_a = cell_interval(a)
    _, low_b, high_b = cell_interval(b)
    return low_a <= high_b and low_b <= high_a


def _rate_effect(length: int, groups: dict[tuple, list], done: dict[str, dict]) -> str | None:
    """One sentence on what running more than one learning rate changed at ``length``,
    over the rows where several rates finished: in how many the rates' test accuracies
    differ beyond both 95% intervals, and in how many whether the model reaches
    ``zoology.EARLY_STOP`` (solves MQAR) depends on the rate (those named, with each
    rate's accuracy).  None where no row finished two rates."""
    compared, differ, flips = 0, [], []
    several_widths = len({key[1] for key in groups if key[0] == length}) > 1
    rows = sorted((key, group) for key, group in groups.items() if key[0] == length)
    for (_, width, name, conv), group in rows:
        rates = sorted(records_by_rate(group, done).items())
        if len(rates) < 2:
            continue
        compared += 1
        label = _label(name, conv) + (f" (D = {width})" if several_widths else "")
        if any(not _overlap(a, b) for i, (_, a) in enumerate(rates)
               for _, b in rates[i + 1:]):
            differ.append(label)
        accuracy = {rate: _test(records) for rate, records in rates}
        if len({value >= zoology.EARLY_STOP for value in accuracy.values()}) > 1:
            flips.append(label + ": " + ", ".join(
                f"{100 * value:.1f}% at {rate:g}" for rate, value in accuracy.items()))
    if not compared:
        return None
    models = f"{compared} model" + ("s" if compared > 1 else "")
    sentence = (f"L = {length}: {models} ran at more than one rate; the rates' test "
                f"accuracies differ beyond both 95% intervals in {len(differ)}"
                + (f" ({', '.join(differ)})" if differ else "")
                + f", and whether the model reaches {100 * zoology.EARLY_STOP:.0f}% depends on "
                f"the rate in {len(flips)}" + (f" ({'; '.join(flips)})" if flips else "") + ".")
    return sentence


def _rate_effect_lines(groups: dict[tuple, list], done: dict[str, dict]) -> list[str]:
    """The section on what the second learning rate changed, per length; ``groups``:
    :func:`_groups` of the report's cells."""
    sentences = [s for length in sorted({key[0] for key in groups})
                 if (s := _rate_effect(length, groups, done))]
    if not sentences:
        return []
    return ["## What a second learning rate changed", "",
            "The tables show each model at the rate validation chose. Where a model ran at "
            "more than one rate, how much the rate mattered (a row that ran at one rate "
            "only may have missed the same):", "",
            *(f"- {s}" for s in sentences), ""]


def _remaining(cells: Sequence, done: dict[str, dict]) -> list[str]:
    """What the unfinished cells would cost here at the finished cells' seconds per
    token: stopping where those stopped, or never stopping early."""
    rest = [c for c in cells if c.key not in done]
    timed = [(r, t) for r in done.values() if r.get("steps") and (t := training_seconds(r))]
    if not rest or not timed:
        return []

    def tokens(length: int, steps: int) -> int:
        return steps * zoology.BATCH.get(length, 128) * length

    per_token = statistics.fmean(t / tokens(r["length"], r["steps"]) for r, t in timed)
    early = statistics.fmean(r["steps"] for r, _ in timed)  # where the finished ones stopped
    quick_s = per_token * sum(tokens(c.length, min(c.steps, round(early))) for c in rest)
    full_s = per_token * sum(tokens(c.length, c.steps) for c in rest)
    return [f"The remaining {len(rest)} cells would take about {quick_s / 3600:.0f} h here if "
            f"each stopped as early as the finished ones, and {full_s / 3600:.0f} h if none "
            "stopped early (at the mean seconds per token of the finished cells, whichever "
            "models those are; the models' speeds differ). Zoology's full grid (4 widths "
            "x 4 rates x 3 lengths, 64 epochs each) is what a larger machine adds beyond the "
            "deviations above.", ""]


def write_zoology_report(store: CellStore, cells: Sequence, plot: bool,
                         left_out: int = 0) -> Path:
    """Write recall-zoology.md into the results folder; returns its path.  (No figure:
    the tables carry every number.)  ``left_out``: the cells settled at another rate."""
    def text(cells, done, failed) -> str:
        return markdown(cells, done, failed, left_out)

    return writing.write_sweep_report(store, cells, "recall-zoology", text, None, plot, "")
