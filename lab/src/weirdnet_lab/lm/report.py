"""The report of ``weirdnet bench lm``, from the stored records alone: per context and
budget (equal minutes; equal steps), each model's parameters, test bits per byte, speed,
and validation bits per byte at the same step, with each model compared with the
Transformer++ (or the Transformer where no Transformer++ ran); ``lm.png``, validation bits
per byte against training minutes (equal minutes) and steps (equal steps)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from weirdnet_lab.lm.settings import MIN_STEPS
from weirdnet_lab.opbench.report import markdown_table
from weirdnet_lab.suite.claims import BETTER, WORSE, compare
from weirdnet_lab.suite.report import score_of
from weirdnet_lab.sweep import writing
from weirdnet_lab.sweep.cell import training_rate
from weirdnet_lab.sweep.intervals import mean_interval
from weirdnet_lab.sweep.store import CellStore
from weirdnet_lab.variants import VARIANTS

REFERENCES = ("transformerpp", "softmax")
"""The model every other is compared with: the first of these that ran."""
WEIRD = ("weird-a", "weird-b", "weird-a-pp", "weird-b-pp")
PEERS_COMPARED_WITH = "weird-a"
"""The Weird-Net compared with every peer (the papers' best decoder at this size)."""
SLOW_ON_CPU = frozenset({"mamba", "mamba2", "rwkv", "qwen3-next", "recurrent-gemma",
                         "xlstm"})
"""Peers whose ``transformers`` layers run a pure-PyTorch reference path on a CPU (their
fused kernels need a GPU; RecurrentGemma's RG-LRU is a step-by-step loop everywhere)."""


def budget_rate(record: dict[str, Any]) -> float:
    """Steps per second of the clock a run's minutes are counted on: for an equal-minutes
    run, its calibration's rate (the one that set its steps; see :func:`with_calibrations`),
    else the run's own (:func:`training_rate`)."""
    return record.get("calibrated_rate") or training_rate(record)


def _machine_name(record: dict[str, Any]) -> str:
    machine = record.get("machine", {})
    return f"{machine.get('cpu_model', '?')}, {machine.get('usable_cores', '?')} cores"


def with_calibrations(store: CellStore, cells: Sequence,
                      done: dict[str, dict]) -> dict[str, dict]:
    """``done`` with each equal-minutes run's calibration joined in: its rate
    (``calibrated_rate``) and machine (``calibrated_on``).  The minutes of such a run are
    the calibration machine's, wherever the run itself trained: its steps were set there,
    and its quality depends only on its steps."""
    out = dict(done)
    for cell in cells:
        if cell.key not in done or cell.kind != "minutes":
            continue
        calibration = store.read(dataclasses.replace(cell, minutes=None))
        if calibration and calibration.get("status") == "done":
            out[cell.key] = {**done[cell.key], "calibrated_rate": training_rate(calibration),
                             "calibrated_on": _machine_name(calibration)}
    return out


def curve(record: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(step, training minutes, validation bits per byte) of every evaluation; minutes =
    step / :func:`budget_rate` (evaluation time left out)."""
    rate = budget_rate(record)
    return [(e["step"], e["step"] / rate / 60.0, e["metrics"]["bpc"])
            for e in record.get("evaluations", [])]


def last_common_step(records: Sequence[dict[str, Any]]) -> int:
    """The last step at which every record was evaluated (0: none): the end of the
    shortest run on the shared grid (even or doubling spacing)."""
    steps = [{s for s, _, _ in curve(r)} for r in records]
    return max(set.intersection(*steps), default=0) if steps else 0


def _mean_text(values: list[float], digits: int = 3) -> str:
    mean, low, high = mean_interval(values)
    return f"{mean:.{digits}f}" + (f" [{low:.{digits}f}, {high:.{digits}f}]"
                                    if len(values) > 1 else "")


def _at_step(record: dict[str, Any], step: int) -> float | None:
    return next((bpc for s, _, bpc in curve(record) if s == step), None)


def label(name: str) -> str:
    """The table label of variant ``name``, marked ¹ where it runs a CPU reference path."""
    return VARIANTS[name].label + (" ¹" if name in SLOW_ON_CPU else "")


def _by_variant(cells: Sequence, done: dict[str, dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for cell in cells:
        if cell.key in done:
            out.setdefault(cell.variant.name, []).append(done[cell.key])
    return out


def _parameters(record: dict[str, Any]) -> str:
    count, reference = (record.get("non_embedding_parameters"),
                        record.get("reference_parameters"))
    if not count:
        return "–"
    return f"{count / 1e6:.3f}M" + (f" ({count / reference - 1:+.1%})" if reference else "")


def context_table(cells: Sequence, done: dict[str, dict]) -> list[str]:
    """One row per mechanism of a context and budget (mean over seeds)."""
    by_variant = _by_variant(cells, done)
    if not by_variant:
        return ["(no finished runs)"]
    common = last_common_step([r for records in by_variant.values() for r in records])
    budget = (f"{cells[0].steps:,} steps" if cells[0].equal_steps
              else f"{cells[0].minutes:g} min")
    header = ["Model", "non-embedding parameters (vs reference)", "seeds", "steps",
              "steps/s", "bytes/s", "train min", f"test bits/byte after {budget}",
              f"val bits/byte at step {common}"]
    rows, longer = [], False
    for name, records in by_variant.items():
        rate = sum(budget_rate(r) for r in records) / len(records)
        steps = records[0]["steps"]
        at_step = [v for r in records if (v := _at_step(r, common)) is not None]
        bytes_per_step = records[0]["config"]["train"]["batch_size"] * cells[0].context
        over = _over_budget(cells[0], steps, rate)
        longer = longer or over
        rows.append([label(name) + (" ²" if over else ""), _parameters(records[0]),
                     str(len(records)), f"{steps:,}", f"{rate:.2f}",
                     f"{rate * bytes_per_step:,.0f}", f"{steps / rate / 60:.1f}",
                     _mean_text([r["results"]["test"]["bpc"] for r in records]),
                     _mean_text(at_step) if at_step else "–"])
    note = ["", f"² fewer than {MIN_STEPS} steps fit in {cells[0].minutes:g} minutes at "
            f"this model's calibrated rate: it trained {MIN_STEPS}, longer than the others "
            "(train min), which favours it in this table."] if longer else []
    return markdown_table(header, rows) + note + _clock_note(cells, done)


def _clock_note(cells: Sequence, done: dict[str, dict]) -> list[str]:
    """Under an equal-minutes table: the machines whose calibrations set its steps (the
    minutes' clock), and a warning where they are more than one.  Under an equal-steps
    table whose runs trained on more than one machine: which models ran where."""
    if cells[0].equal_steps:
        return _where_steps_ran(cells, done)
    records = [done[c.key] for c in cells if c.key in done]
    clocks = sorted({r.get("calibrated_on") or f"{_machine_name(r)} (its own run)"
                     for r in records})
    ran = sorted({_machine_name(r) for r in records})
    lines = ["", f"Steps/s, bytes/s and minutes are the calibrations' (the runs' steps "
                 f"were set from them), measured on: {'; '.join(clocks)}. The runs "
                 f"trained on: {'; '.join(ran)}."]
    if len(clocks) > 1:
        lines.append("The calibrations come from more than one machine: these minutes "
                     "are equal only between models calibrated on the same one.")
    return lines


def _where_steps_ran(cells: Sequence, done: dict[str, dict]) -> list[str]:
    """Under an equal-steps table whose runs trained on more than one machine: which
    models ran where (their speeds compare only within one)."""
    where: dict[str, list[str]] = {}
    for cell in cells:
        if cell.key in done:
            models = where.setdefault(_machine_name(done[cell.key]), [])
            if cell.variant.label not in models:
                models.append(cell.variant.label)
    if len(where) < 2:
        return []
    return ["", "The runs trained on more than one machine, so steps/s, bytes/s and "
                "minutes compare only within one (test bits per byte depend on the "
                "steps alone): " + "; ".join(f"{m}: {', '.join(models)}"
                                             for m, models in where.items()) + "."]


def _over_budget(cell, steps: int, rate: float) -> bool:
    """Whether an equal-minutes run trained the step floor, longer than its budget."""
    return (not cell.equal_steps and steps == MIN_STEPS
            and steps / rate / 60 > 1.05 * cell.minutes)


def _test_bpc(cells: Sequence, done: dict[str, dict]) -> dict[str, list[float]]:
    """Test bits per byte of each mechanism's finished runs (one per seed), by name."""
    return {name: [r["results"]["test"]["bpc"] for r in records]
            for name, records in _by_variant(cells, done).items()}


def pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """(model, other) compared: every model with the reference (the Transformer++, or
    the Transformer), Weird-Net A with each other model, B with A, and each Weird-Net
    with its Transformer++-options form."""
    names = list(names)
    reference = next((r for r in REFERENCES if r in names), None)
    out = [(n, reference) for n in names if reference and n != reference]
    if PEERS_COMPARED_WITH in names:
        out += [(PEERS_COMPARED_WITH, n) for n in names
                if n not in (PEERS_COMPARED_WITH, reference) and n not in WEIRD]
    out += [(a, b) for a, b in (("weird-b", "weird-a"), ("weird-a-pp", "weird-a"),
                                ("weird-b-pp", "weird-b")) if {a, b} <= set(names)]
    return list(dict.fromkeys(out))


def comparisons(cells: Sequence, done: dict[str, dict]) -> list[str]:
    """The :func:`pairs` on test bits per byte after the same budget: "lower" or
    "higher" only when the 95% interval of the difference excludes 0 (t over seeds); one
    seed has no interval, so "undecided"."""
    scores = {name: score_of(v, None, accuracy=False)  # t over seeds, none for one
              for name, v in _test_bpc(cells, done).items()}
    rows = []
    for name, other in pairs(list(scores)):
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


def _run_details(records: list[dict]) -> str:
    """How the runs on one machine shared it: torch threads per run, runs at once."""
    threads = sorted({r.get("torch_threads") for r in records} - {None})
    at_once = sorted({r.get("cells_at_once", 1) for r in records})
    return (f"torch threads per run: {', '.join(map(str, threads)) or '?'}; runs at once: "
            f"{', '.join(map(str, at_once))}")


def _groups(cells: Sequence) -> list[tuple[str, list]]:
    """(section title, cells) per budget and context, equal minutes first."""
    keys = dict.fromkeys((c.kind, c.steps if c.equal_steps else c.minutes, c.context)
                         for c in cells)
    out = []
    for kind, budget, context in keys:
        title = (f"Equal steps ({budget:,} steps), context {context} bytes" if kind == "steps"
                 else f"Equal minutes ({budget:g} min), context {context} bytes")
        out.append((title, [c for c in cells if (c.kind, c.context) == (kind, context)
                            and (c.steps if c.equal_steps else c.minutes) == budget]))
    return out


def markdown(cells: Sequence, done: dict[str, dict], notes: Sequence[str] = ()) -> str:
    """lm.md; ``notes``: lines under the introduction (precision and the SDPA backend:
    :func:`weirdnet_lab.lm.sdpa.report_lines`)."""
    out = ["# Language modelling at equal compute and at equal steps (ours)", "",
           "Byte-level language models on `wiki-xml`, the same bytes per step, the same "
           "optimiser and schedule; `weirdnet bench lm`. Every model has the non-embedding "
           "parameters of the GPT-2-style Transformer with D = 128, 4 layers, d_ff = 512 "
           "within 5%, matched by its feed-forward width (Mamba and Mamba-2: by their "
           "number of layers). Equal minutes: each model trains as many steps as fit in the "
           "same minutes at the speed a short calibration run measured (the minutes are the "
           "calibration machine's, wherever the run itself trained). Steps/s, bytes/s and "
           "minutes count CPU time on a CPU (per thread), which other jobs running at the "
           "same time change much less than wall time (they still share caches and memory "
           "bandwidth); records made before CPU time was kept count wall time. Equal steps: "
           "each model "
           "trains the same steps, so it sees the same bytes. Test bits per byte at the "
           "end; validation bits per byte at the last step every model reached. Intervals: "
           "95% over seeds (none with one seed).", "",
           "¹ `transformers` runs this peer's layers on its pure-PyTorch reference path on a "
           "CPU (the fused kernels of Mamba, Mamba-2, Gated DeltaNet and xLSTM need a GPU; "
           "RecurrentGemma's RG-LRU is a step-by-step loop on every device): its speed is "
           "what a CPU user gets; its quality per step is unaffected.", ""]
    out += [line for note in notes for line in (note, "")]
    out += writing.machine_lines(done, name=_machine_name, unit="run", details=_run_details) + [""]
    for title, mine in _groups(cells):
        out += [f"## {title}", "", *context_table(mine, done), ""]
        if table := comparisons(mine, done):
            out += ["Decided only when the 95% interval of the difference excludes 0 "
                    "(t over seeds, standard errors added in quadrature):", "", *table, ""]
    hours = sum(r.get("wall_s", 0.0) for r in done.values()) / 3600
    out += [f"{len(done)} of {len(cells)} runs done; wall time of those {hours:.2f} h "
            "(training and evaluations).", ""]
    return "\n".join(out)


def draw(cells: Sequence, done: dict[str, dict], path: Path) -> Path:
    """lm.png: validation bits per byte against training minutes (equal minutes) or
    steps (equal steps), a panel per budget and context, and each run's test bits per
    byte at its end (a star); ImportError without matplotlib."""
    from weirdnet.run import write_png

    groups = _groups(cells)
    fig, axes = writing.panels(1, len(groups), 5 * len(groups), 3.6)
    names = list(dict.fromkeys(c.variant.name for c in cells))
    for ax, (title, mine) in zip(axes[0], groups):
        by_steps = mine[0].equal_steps
        for cell in mine:
            if cell.key not in done:
                continue
            record, colour = done[cell.key], f"C{names.index(cell.variant.name) % 10}"
            points = curve(record)
            xs = [s if by_steps else m for s, m, _ in points]
            end = record["steps"] if by_steps else record["steps"] / budget_rate(record) / 60
            ax.plot(xs, [b for _, _, b in points], marker=".", color=colour,
                    label=VARIANTS[cell.variant.name].label if cell.seed == 0 else None)
            ax.plot([end], [record["results"]["test"]["bpc"]], marker="*", markersize=9,
                    color=colour, linestyle="none")
        ax.set_title(f"{title} (star: test split)", fontsize=9)
        ax.set_xlabel("training steps" if by_steps else "training minutes")
        ax.set_ylabel("validation bits per byte")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return write_png(fig, path)


def write_report(store: CellStore, cells: Sequence, plot: bool) -> Path:
    """Write lm.md (and lm.png) into the results folder; returns lm.md."""
    from weirdnet_lab.lm.sdpa import report_lines

    done = with_calibrations(store, cells, store.finished(cells))
    figure = (lambda path: draw(cells, done, path)) if plot and done else None
    text = markdown(cells, done, report_lines(store.results_dir))
    return writing.write_report(store.results_dir, "lm", text, figure,
                                "bits per byte against training minutes and steps")
