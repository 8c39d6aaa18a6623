"""The whole suite report (Markdown): what ran, the tables, the claim checks, errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weirdnet_lab.suite import numbers
from weirdnet_lab.suite.budgets import Budget
from weirdnet_lab.suite.claims import claim_lines
from weirdnet_lab.suite.numbers import LRA_COLUMNS, TABLE_X_TASKS, UEA_COLUMNS
from weirdnet_lab.suite.plan import TABLES_BY_NAME
from weirdnet_lab.suite.report import (
    Results,
    ablation_table,
    dba_form,
    form_table,
    lm_table,
    lra_table,
    metric_of,
    readout,
    table_xi,
    uea_table,
)
from weirdnet_lab.suite.tasks import TASKS, Task, get_task
from weirdnet_lab.variants import MECHANISMS


def _provenance(records: Sequence[dict[str, Any]]) -> list[str]:
    done = [r for r in records if r.get("status") == "done"]
    if not done:
        return ["No finished cells yet."]
    machines = sorted({_machine_text(r["machine"]) for r in done})
    commits = sorted({(r.get("commit") or "?")[:12] + ("+dirty" if r.get("dirty") else "")
                      for r in done})
    minutes = sum(r.get("wall_s", 0.0) for r in done) / 60.0
    seeds = sorted({r["seed"] for r in done})
    commands = sorted({str(r.get("machine", {}).get("command")) for r in done})
    shared = sum(r.get("cells_at_once", 1) > 1 for r in done)
    return [
        f"- cells finished: {len(done)}; failed: {len(records) - len(done)}; "
        f"wall time {minutes:.1f} min (sum over cells: data, training, evaluation)"
        + (f"; {shared} of them ran beside other cells (`--jobs`), so their steps/s and "
           "wall times are those of a shared machine" if shared else ""),
        ("- machine: " if len(machines) == 1 else "- machines (timings compare only "
         "within one): ") + "; ".join(machines),
        f"- commits: {', '.join(commits)}; seeds: {', '.join(map(str, seeds))}",
        "- " + ("command" if len(commands) == 1 else "commands") + ": "
        + ", ".join(f"`{command}`" for command in commands),
    ]


def _machine_text(machine: dict[str, Any]) -> str:
    return (f"{machine.get('cpu_model')} ({machine.get('usable_cores')} usable cores)"
            f"{', ' + machine['gpu'] if machine.get('gpu') else ''}, torch "
            f"{machine.get('torch')}, Python {machine.get('python')}, weirdnet "
            f"{machine.get('weirdnet')}")


def _readouts(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line: the readout (pooling) and, for DBA, the form each variant's records used,
    as their stored configs say."""
    seen: dict[str, set[str]] = {}
    for record in records:
        if record.get("status") != "done" or record["task"] == "lm":
            continue
        form = dba_form(record)
        seen.setdefault(record["variant"], set()).add(
            readout(record) + (f", {form} DBA" if form else ""))
    if not seen:
        return []
    parts = [f"{name}: {' / '.join(sorted(kinds))}" for name, kinds in sorted(seen.items())]
    return ["- readout (classification) and DBA form, from the records' configs: "
            + "; ".join(parts)]


def _progress(budget: Budget, records: Sequence[dict[str, Any]],
              tables: Sequence[str]) -> list[str]:
    """How much of the budget's ``tables`` is done, and how long the rest would
    take at the finished cells' mean wall time of the same mechanism on the task, else
    of the task (the same machine and threads assumed); the tasks with no finished cell
    yet are named, not guessed."""
    from weirdnet_lab.suite.plan import plan_cells

    planned = plan_cells(budget, tables)
    done = {(r["task"], r["variant"], r["seed"]) for r in records
            if r.get("status") == "done"}
    left = [c for c in planned if (c.task.name, c.variant.name, c.seed) not in done]
    if not left:
        return [f"- all {len(planned)} cells of these tables are done"]
    per_task: dict[str, list[float]] = {}
    per_cell: dict[tuple[str, str], list[float]] = {}
    for record in records:
        if record.get("status") == "done" and record.get("wall_s"):
            per_task.setdefault(record["task"], []).append(record["wall_s"])
            per_cell.setdefault((record["task"], record["variant"]), []).append(
                record["wall_s"])

    def estimate(cell) -> float:  # the mechanism's own mean there, else the task's
        times = per_cell.get((cell.task.name, cell.variant.name)) or per_task[cell.task.name]
        return sum(times) / len(times)

    timed = [c for c in left if c.task.name in per_task]
    hours = sum(estimate(c) for c in timed) / 3600
    untimed = sorted({c.task.label for c in left if c.task.name not in per_task})
    text = (f"- {len(planned) - len(left)} of these tables' {len(planned)} cells done; the "
            f"{len(timed)} left on tasks already timed would take about {hours:.1f} h more "
            "(the mean wall time per cell of the same mechanism on the task, else of the "
            "task)")
    if untimed:
        text += (f"; {len(left) - len(timed)} more on tasks not timed yet "
                 f"({', '.join(untimed)})")
    return [text]


def data_text(task: Task, data: dict[str, Any]) -> str:
    """The dataset, its note, and the sizes the budget gives a generated set, e.g.
    ``listops (generated with LRA's generator; 20,000 training items of 500-2000 tokens)``."""
    options = data.get("options", {})
    notes = [task.data_note] if task.data_note else []
    if "n_train" in options:
        lengths = (f" of {options['min_length']}-{options['max_length']} tokens"
                   if "min_length" in options and "max_length" in options else "")
        notes.append(f"{options['n_train']:,} training items{lengths}")
    if data.get("eval_split") == "test":
        notes.append("best checkpoint picked on the test split, as the papers' scripts do")
    elif options.get("val_fraction"):
        notes.append(f"best checkpoint picked on {options['val_fraction']:.0%} of the "
                     "training file")
    return data["dataset"] + (f" ({'; '.join(notes)})" if notes else "")


def _task_lines(budget: Budget, records: Sequence[dict[str, Any]]) -> list[str]:
    """Per task: data, sequence length, steps, batch, model size and test items."""
    lines = ["| task | data | length | steps × batch | model | test metric on |",
             "|---|---|---|---|---|---|"]
    for task in TASKS:
        config = next((r["config"] for r in records if r["task"] == task.name
                       and r.get("status") == "done"), None)
        if config is None:
            continue
        train, backbone = config["train"], config["model"].get("backbone", {})
        final = train.get("final_eval_batches", 0)
        items = f"{final * train['batch_size']} items" if final else "the whole split"
        data = data_text(task, config["data"])
        model = (f"D={backbone.get('dim')}, N={backbone.get('depth')}, "
                 f"d_ff={backbone.get('d_ff')}")
        options = config["data"].get("options", {})
        length = options.get("max_len") or options.get("seq_len") or "the data's"
        lines.append(f"| {task.label} | {data} | {length} | {train['steps']} × "
                     f"{train['batch_size']} "
                     f"| {model} | {items} |")
    return lines


def _stage_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """Per cell with a curriculum: each stage's data, steps, own test score and minutes,
    beside the whole cell's minutes and test score (empty when no cell has stages)."""
    staged = sorted((r for r in records if r.get("stages") and r.get("status") == "done"),
                    key=lambda r: (r["task"], r["variant"], r["seed"]))
    if not staged:
        return []
    lines = ["Each cell below first trained these stages, each from the weights of the one "
             "before, then its own config from the last stage's weights "
             "(`train.init_from`). A stage's test score is on its own test items (its own "
             "data), not the task's; the cell's minutes include its stages.", "",
             "| cell | stage | data | steps × batch | stage test | stage min | cell test "
             "| cell min |", "|---|---|---|---|---|---|---|---|"]
    for record in staged:
        task = get_task(record["task"])
        for stage in record["stages"]:
            train = stage["config"]["train"]
            lines.append(
                f"| {record['task']}--{record['variant']}--s{record['seed']} "
                f"| {stage['name'].rsplit('--', 1)[-1]} "
                f"| {data_text(task, stage['config']['data'])} "
                f"| {train['steps']} × {train['batch_size']} | {_test_text(task, stage)} "
                f"| {stage['wall_s'] / 60:.1f} | {_test_text(task, record)} "
                f"| {record['wall_s'] / 60:.1f} |")
    return lines


def _test_text(task: Task, run: dict[str, Any]) -> str:
    """A run's test metric as the tables print it (accuracy in %)."""
    value = metric_of(run, task.metric)
    return f"{value:.1f}%" if task.metric == "accuracy" else f"{value:.3f}"


def _decided_lines(budget: Budget, results: Results) -> list[str]:
    """Per task run: its trivial baseline, the Transformer's score, the bar, and whether
    this budget decides anything on it; then the tasks the budget leaves out, and why."""
    from weirdnet_lab.sweep.baselines import bar, describe, is_accuracy

    lines = ["A task decides comparisons only where the Transformer clearly learns it: test "
             "accuracy at least 10 points above the best trivial baseline on the items read "
             "(the majority class, and a shortcut that does not read the input as a "
             "sequence: ListOps' first operator alone, or a linear classifier on the token "
             "histogram or on each channel's statistics), or bits per byte at least 1 "
             "below their unigram entropy. On the other tasks no ordering is ranked (their "
             "claims count as undecided). A bar above 100% means a shortcut solves the task: "
             "it cannot tell the mechanisms apart.", "",
             "| task | what ignoring the input (or its order) scores | Transformer (ours) "
             "[95%] | bar | decided at this budget |", "|---|---|---|---|---|"]
    for task in TASKS:
        if task.name in budget.excluded:
            continue
        score = results.score(task.name, "softmax")
        if score.mean is None:
            continue
        baseline, learned = results.baseline(task.name), results.learned(task.name)
        digits = 3 if task.metric != "accuracy" else 1
        verdict = {True: "yes", False: "**no**: the Transformer did not clear the bar",
                   None: "unknown (records predate the baseline)"}[learned]
        if learned is False and is_accuracy(baseline) and bar(baseline) > 100:
            verdict = f"**no**: a shortcut solves it ({describe(baseline)})"
        stated = "; ".join(describe(b) for b in results.baselines(task.name)) or "–"
        lines.append(f"| {task.label} | {stated} | "
                     f"{score.with_interval(digits)} | "
                     f"{f'{bar(baseline):.{digits}f}' if baseline else '–'} | {verdict} |")
    if budget.excluded:
        lines += ["", "Not run, not decided at this budget:", ""]
        lines += [f"- {get_task(name).label}: {why}." for name, why in budget.excluded.items()]
    return lines


def _failures(records: Sequence[dict[str, Any]]) -> list[str]:
    failed = [r for r in records if r.get("status") != "done"]
    if not failed:
        return []
    lines = ["", "## Cells that failed", ""]
    for record in failed:
        error = (record.get("error") or "").strip().splitlines()
        lines.append(f"- `{record['task']}--{record['variant']}--s{record['seed']}`: "
                     f"{error[-1] if error else 'no message'}")
    return lines


def render(budget: Budget, records: Sequence[dict[str, Any]], tables: Sequence[str],
           figure: str | None, stale: int = 0,
           shortcuts: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """The report for ``records`` of ``budget``, with the sections of ``tables``;
    ``stale``: how many stored records were left out as stale (said in the header);
    ``shortcuts``: each task's stored shortcut baselines (:mod:`.shortcuts`)."""
    results = Results(records, shortcuts)
    out = _header(budget, records, tables, stale)
    if records:
        out += ["## What each task ran", "", *_task_lines(budget, records), ""]
        stages = _stage_lines(records)
        if stages:
            out += ["## Curriculum stages", "", *stages, ""]
        out += ["## What this budget decides", "", *_decided_lines(budget, results), ""]
    out += _table_sections(results, tables, figure)
    out += ["## The papers' orderings, checked", "", _CLAIMS_NOTE, "",
            *claim_lines(results)]
    out += _failures(records)
    return "\n".join(out) + "\n"


def _header(budget: Budget, records: Sequence[dict[str, Any]], tables: Sequence[str],
            stale: int) -> list[str]:
    """Title, budget, provenance, readouts, progress and the legend of the numbers."""
    return [f"# Suite results: `{budget.name}` budget", "",
            f"Budget: {budget.description}.", "", *_provenance(records), *_readouts(records),
            *(_progress(budget, records, tables) if records else []),
            *([f"- {stale} stored record(s) left out: their cells' config has changed "
               "since they ran (they are rerun by the next run of the budget)"]
              if stale else []), "",
            "Numbers marked **(ours)** were measured by this suite under this budget; "
            "numbers marked **(paper)** are the papers' own, copied from the tables named, "
            "under the papers' far larger budgets and official data. Test accuracy in %, "
            "mean (± population std over seeds when more than one). `n/a`: the mechanism "
            "has no causal form; `–`: not run; `error`: see the end.", ""]


_TODAY_NOTE = (
    "The Transformer++ (rotary positions, SwiGLU, RMSNorm, no biases) and the "
    "`transformers` peers, each matched to the non-embedding parameters of the "
    "GPT-2-style Transformer with this task's widths (within 5%, by the "
    "feed-forward width; Mamba and Mamba-2 by their number of layers), and "
    "Weird-Net A and B with and without the Transformer++ options (A++ and B++ "
    "matched the same way). The rows of the papers' own models (Weird-Net A "
    "and B, the Transformer) keep the papers' widths, so their counts differ: "
    "the parameters column says by how much; the rows \"Weird-Net A, "
    "matched\" and \"Weird-Net B, matched\" are those models with the "
    "feed-forward width matched. On a CPU, Mamba and Mamba-2 run "
    "`transformers`' pure-PyTorch path: their steps/s is a CPU user's.")

_CLAIMS_NOTE = (
    "A comparison counts only when the 95% interval of the difference excludes 0 "
    "(over seeds, or the test set's binomial interval for one seed): \"holds\" and "
    "\"does not hold\" are decided at this budget, \"undecided\" is not (a larger "
    "budget, more seeds or more test items would decide it). A claim about the LRA "
    "average, where this budget ran only some of its tasks, is judged on the "
    "average over the tasks run (\"... on the tasks run\"): evidence about those "
    "tasks, not the paper's claim.")


def _table_sections(results: Results, tables: Sequence[str],
                    figure: str | None) -> list[str]:
    """The sections of ``tables``, in the papers' order."""
    out = _main_tables(results, figure) if "main" in tables else []
    if "table9" in tables:
        out += ["## W modes (Weird-Net Table IX)", "",
                *ablation_table(results, numbers.TABLE_IX, LRA_COLUMNS, "W"), ""]
    if "table10" in tables:
        out += ["## Structures in the encoder (Weird-Net Table X)", "",
                *ablation_table(results, numbers.TABLE_X, TABLE_X_TASKS, "Structure"), ""]
    if "table11" in tables:
        out += ["## Structures in the decoder (Weird-Net Table XI)", "", *table_xi(results),
                ""]
    if "table12" in tables:
        out += ["## DBA d_p and d_in (DBA Table 12)", "",
                *ablation_table(results, numbers.TABLE_12, LRA_COLUMNS, "setting"), ""]
    if "today" in tables:
        out += ["## The baselines the field uses today (byte-level LM)", "", _TODAY_NOTE, "",
                *lm_table(results, TABLES_BY_NAME["today"].variants), ""]
    if "dba-forms" in tables:
        out += ["## DBA: the authors' code against eqs. 7-12 read literally", "",
                "Both rows train the same model, data and readout; only the DBA form "
                "differs (docs/design.md §4). Mean over seeds [95% interval].", "",
                *form_table(results, ("dba", "dba-literal"), (*LRA_COLUMNS, *UEA_COLUMNS)),
                ""]
    return out


def _main_tables(results: Results, figure: str | None) -> list[str]:
    """LRA (with its speed and memory columns and Fig. 6), UEA and byte-level LM."""
    mechanisms = [m.name for m in MECHANISMS]
    out = ["## LRA (Table III layout)", "",
           "Speed and memory: training steps/s and peak memory of the "
           f"{get_task(results.speed_task()).label} cells relative to the "
           "Transformer's (ours; the training runs' own steps/s, which may have "
           "shared the machine with another run: indicative only; only cells run on "
           "the Transformer's machine are compared, `–` where there are none).", "",
           *lra_table(results, mechanisms, LRA_COLUMNS), ""]
    if figure:
        out += [f"![Fig. 6 layout]({figure})", ""]
    return out + ["## UEA (DBA Table 3 layout)", "",
                  *uea_table(results, mechanisms, UEA_COLUMNS), "",
                  "## Byte-level language modelling", "",
                  *lm_table(results, mechanisms), ""]

