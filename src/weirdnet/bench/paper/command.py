"""``weirdnet bench suite``: plan the cells, run the missing ones, write the report.

Each cell runs in a fresh process (:mod:`.child`) so its peak memory is its own and a
crash or missing dataset costs one cell, not the suite.  A rerun skips finished cells,
resumes interrupted ones from their last checkpoint, and reruns failed or stale ones (a
stale cell was recorded with a config that the current code no longer builds).  Ctrl-C
stops after the running cell has saved a checkpoint.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from .budgets import BUDGETS, get_budget
from .cells import Cell, CellStore, config_hash
from .plan import TABLES_BY_NAME, plan_cells
from .tasks import TASKS_BY_NAME
from .variants import VARIANTS

DESCRIPTION = """\
Train every mechanism on the papers' tasks under one budget and print the papers' tables
with our numbers beside theirs: LRA (Weird-Net Table III / DBA Table 2), UEA (DBA Table 3),
byte-level LM, the ablations (Weird-Net Tables IX-XI, DBA Table 12), the papers' claimed
orderings checked, and the Fig. 6 plot (accuracy vs speed, memory as circle size).

Budgets: smoke (seconds per cell, checks the plumbing), cpu (about an hour on 2 cores),
gpu (about 30 minutes on one GPU), paper (the papers' configs and official data).
Results: <out>/suite-<budget>/{cells/*.json, report.md, fig6.png}; run directories
(checkpoints, logs) under <work>/suite-<budget>/.  A rerun skips finished cells and
resumes interrupted ones.
"""

EXAMPLES = """\
examples:
  weirdnet bench suite --budget cpu                       # everything (about an hour)
  weirdnet bench suite --budget cpu --tables main --tasks listops,text
  weirdnet bench suite --budget cpu --list                # the cells and their state
  weirdnet bench suite --budget cpu --report-only         # rebuild report.md and fig6.png
"""


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", required=True, choices=list(BUDGETS),
                        help="sizes and steps of every cell (see above)")
    parser.add_argument("--tables", type=_names, default=list(TABLES_BY_NAME),
                        help=f"comma-separated tables (default: all): "
                             f"{', '.join(TABLES_BY_NAME)}")
    parser.add_argument("--tasks", type=_names, default=None,
                        help=f"only these tasks: {', '.join(TASKS_BY_NAME)}")
    parser.add_argument("--mechanisms", type=_names, default=None,
                        help=f"only these variants: {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in _names(s)], default=None,
                        help="comma-separated seeds (default: the budget's)")
    parser.add_argument("--out", default="benchmarks/results",
                        help="results folder (default: benchmarks/results)")
    parser.add_argument("--work", default="runs",
                        help="folder for run directories (default: runs)")
    parser.add_argument("--list", action="store_true",
                        help="print the cells and their state, run nothing")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the stored cells, run nothing")
    parser.add_argument("--no-plot", action="store_true", help="skip fig6.png")


def _run_child(cell: Cell, config: dict, store: CellStore, command: list[str]) -> bool:
    """Run ``cell`` (training ``config``) in a fresh process; on failure store a failed
    record.  True if done."""
    logs = store.work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    spec_path = logs / f"{cell.key}.spec.json"
    cell_info = {"task": cell.task.name, "variant": cell.variant.name, "seed": cell.seed,
                 "budget": cell.budget.name}
    spec = {"config": config, "config_hash": config_hash(config), "cell": cell_info,
            "record": str(store.record_path(cell)), "command": command}
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    log_path = logs / f"{cell.key}.log"
    with open(log_path, "w", encoding="utf-8") as log:
        code = subprocess.call([sys.executable, "-m", "weirdnet.bench.paper.child",
                                str(spec_path)], stdout=log, stderr=subprocess.STDOUT)
    if code == 0 and store.read(cell) is not None:
        return True
    if code in (-2, 130):  # the child got Ctrl-C too: it saved a checkpoint
        raise KeyboardInterrupt
    tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
    store.write(cell, {**cell_info, "status": "failed", "error": tail,
                       "config_hash": spec["config_hash"], "log": str(log_path)})
    return False


def _print_plan(cells: list[Cell], states: dict[str, str]) -> None:
    for cell in cells:
        print(f"{states[cell.key]:<12} {cell.key}")
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


def write_report(budget_name: str, store: CellStore, tables: list[str],
                 plot: bool) -> Path:
    """Write ``report.md`` (and ``fig6.png``) from every stored record of the budget."""
    from weirdnet._atomic import write_atomic

    from .document import render
    from .report import Results

    budget = get_budget(budget_name)
    records = store.all_records()
    figure = None
    if plot and "main" in tables:
        try:
            from .figure import draw_fig6
            from .variants import MECHANISMS

            draw_fig6(Results(records), [m.name for m in MECHANISMS],
                      store.results_dir / "fig6.png", budget_name)
            figure = "fig6.png"
        except ImportError:
            print("fig6.png skipped: matplotlib is not installed (pip install matplotlib)",
                  file=sys.stderr)
    path = store.results_dir / "report.md"
    write_atomic(path, render(budget, records, tables, figure))
    return path


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from tqdm.auto import tqdm

    budget = get_budget(args.budget)
    store = CellStore(Path(args.out) / f"suite-{budget.name}",
                      Path(args.work) / f"suite-{budget.name}")
    try:  # unknown names, a missing configs/ or a broken config file: one line, status 2
        cells = plan_cells(budget, args.tables, args.tasks, args.mechanisms, args.seeds)
        # every config is built (and checked) once, before anything runs
        configs = {cell.key: cell.config_dict(store.work_dir) for cell in cells}
        states = {cell.key: store.state(cell, configs[cell.key]) for cell in cells}
    except (ValueError, FileNotFoundError) as error:
        print(f"weirdnet bench suite: {error}", file=sys.stderr)
        return 2
    if args.list:
        _print_plan(cells, states)
        return 0
    todo = [c for c in cells if states[c.key] != "done"] if not args.report_only else []
    print(f"suite {budget.name}: {len(cells)} cells, {len(cells) - len(todo)} already "
          f"done, {len(todo)} to run", flush=True)
    command = ["weirdnet", *argv]
    failed = 0
    with tqdm(todo, unit="cell", dynamic_ncols=True, disable=not todo) as bar:
        for cell in bar:
            bar.set_postfix_str(f"{cell.key} ({states[cell.key]})")
            try:
                failed += not _run_child(cell, configs[cell.key], store, command)
            except KeyboardInterrupt:
                print(f"\ninterrupted in {cell.key}; rerun the same command to resume: "
                      f"{shlex.join(command)}", file=sys.stderr)
                return 130
    path = write_report(budget.name, store, args.tables, not args.no_plot)
    print(path.read_text(encoding="utf-8"))
    print(f"report: {path}" + (f"; {failed} cell(s) failed (see the report's end)"
                               if failed else ""))
    return 1 if failed else 0



