"""``weirdnet bench suite``: plan the cells, run the missing ones, write the report.

The cells run through the sweep engine (:mod:`weirdnet_lab.sweep.engine`): each in a
fresh process (:mod:`weirdnet_lab.sweep.cell`), so its peak memory is its own and a crash
or missing dataset costs one cell, not the suite.  A rerun skips finished cells,
resumes interrupted ones from their last checkpoint, and reruns failed or stale ones (a
stale cell was recorded with a config that the current code no longer builds).

While it runs, the suite holds the locks of its results folder and its run directories'
folder (one writer each, :mod:`weirdnet_lab.harness.output`).  SIGINT or SIGTERM stops it
cleanly: each running cell's process (one, or ``--jobs`` of them) gets one SIGTERM and is
waited for (the trainer saves a checkpoint), the cell stays unfinished (no record: a rerun
resumes it), and one line says what was kept and the command that continues.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from weirdnet_lab.harness import output
from weirdnet_lab.suite.budgets import BUDGETS, Budget, get_budget
from weirdnet_lab.suite.cells import Cell
from weirdnet_lab.suite.plan import DEFAULT_TABLES, OPT_IN_TABLES, TABLES_BY_NAME, plan_cells
from weirdnet_lab.suite.shortcuts import read_shortcuts, write_missing
from weirdnet_lab.suite.tasks import TASKS, TASKS_BY_NAME
from weirdnet_lab.sweep.engine import add_jobs_argument, print_plan, run_cells
from weirdnet_lab.sweep.store import CellStore
from weirdnet_lab.variants import VARIANTS

HELP = "the papers' tables: every mechanism on every task, one budget"

DESCRIPTION = """\
Train every mechanism on the papers' tasks under one budget and print the papers' tables
with our numbers beside theirs: LRA (Weird-Net Table III / DBA Table 2), UEA (DBA Table 3),
byte-level LM, the ablations (Weird-Net Tables IX-XI, DBA Table 12), the papers' claimed
orderings checked, and the Fig. 6 plot (accuracy vs speed, memory as circle size).

Budgets: smoke (seconds per cell, checks the plumbing), cpu (about an hour on 2 cores;
decides little), laptop (several hours on 2 cores, sized so that the Transformer learns
every task it runs, 3 seeds for the papers' mechanisms and the Transformer; the tasks it
cannot decide are listed, not run), laptop-curriculum (laptop's ListOps after a first
stage on short expressions), gpu (about 30 minutes on one GPU), paper (the papers'
configs and official data).  Every report says which tasks its budget decides: those
where the Transformer clears the best trivial baseline (the majority class, or a
shortcut such as ListOps' first operator) by 10 points (LM: the unigram entropy by 1 bit
per byte).
Results: OUT/suite-<budget>/{cells/*.json, report.md, fig6.png}; run directories
(checkpoints, logs) under WORK/suite-<budget>/.  OUT is --out DIR, else
$WEIRDNET_BENCH_DIR, else ~/.cache/weirdnet/bench; WORK is --work DIR, else runs/ in that
default folder.  The committed results are written only with --out lab/results,
and never by the smoke budget (unless --force).  A rerun skips finished cells and resumes
interrupted ones; Ctrl-C or SIGTERM leaves the running cells resumable.  --jobs N runs N
cells at once (each with cores/N threads unless OMP_NUM_THREADS is set).
"""

EXAMPLES = """\
examples:
  weirdnet bench suite --budget cpu                       # everything (about an hour)
  weirdnet bench suite --budget cpu --out lab/results   # the committed results
  weirdnet bench suite --budget cpu --tables main --tasks listops,text
  weirdnet bench suite --budget cpu --list                # the cells and their state
  weirdnet bench suite --budget laptop --jobs 2           # two cells at once
  weirdnet bench suite --budget cpu --report-only         # rebuild report.md and fig6.png
"""


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", required=True, choices=list(BUDGETS),
                        help="sizes and steps of every cell (see above)")
    parser.add_argument("--tables", type=_names, default=list(DEFAULT_TABLES),
                        help=f"comma-separated tables (default: all but "
                             f"{', '.join(OPT_IN_TABLES)}, which run the transformers "
                             f"peers: hours a cell on a CPU): {', '.join(TABLES_BY_NAME)}")
    parser.add_argument("--tasks", type=_names, default=None,
                        help=f"only these tasks: {', '.join(TASKS_BY_NAME)}")
    parser.add_argument("--mechanisms", type=_names, default=None,
                        help=f"only these variants: {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in _names(s)], default=None,
                        help="comma-separated seeds (default: the budget's)")
    output.add_out_arguments(parser, "suite-<budget>/ (records, report)",
                             quick="--budget smoke")
    parser.add_argument("--work", type=Path, default=None, metavar="DIR",
                        help="folder for the cells' run directories (default: "
                             "$WEIRDNET_BENCH_DIR/runs, else ~/.cache/weirdnet/bench/runs)")
    parser.add_argument("--list", action="store_true",
                        help="print the cells and their state, run nothing")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the stored cells, run nothing")
    parser.add_argument("--no-plot", action="store_true", help="skip fig6.png")
    add_jobs_argument(parser)


def write_report(budget_name: str, store: CellStore, tables: list[str],
                 plot: bool, compute_shortcuts: bool = False) -> Path:
    """Write ``report.md`` (and ``fig6.png``) from every stored record of the budget;
    both are written whole (a stop signal waits until they are).  With
    ``compute_shortcuts``, first compute and store the shortcut baselines of every task
    that lacks current ones (:mod:`.shortcuts`; seconds per task)."""
    from weirdnet.run import write_atomic
    from weirdnet_lab.suite.document import render
    from weirdnet_lab.suite.report import Results

    budget = get_budget(budget_name)
    records, stale = current_records(budget, store)
    if compute_shortcuts:
        write_missing(store, records, [t for t in TASKS if t.name not in budget.excluded])
    shortcuts = read_shortcuts(store, records)
    with output.write_whole():
        figure = None
        if plot and "main" in tables:
            try:
                from weirdnet_lab.suite.figure import draw_fig6
                from weirdnet_lab.variants import MECHANISMS

                draw_fig6(Results(records, shortcuts), [m.name for m in MECHANISMS],
                          store.results_dir / "fig6.png", budget_name)
                figure = "fig6.png"
            except ImportError:
                print("fig6.png skipped: matplotlib is not installed (pip install "
                      "matplotlib)", file=sys.stderr)
        path = store.results_dir / "report.md"
        write_atomic(path, render(budget, records, tables, figure, stale, shortcuts))
    return path


def current_records(budget: Budget, store: CellStore) -> tuple[list[dict], int]:
    """The stored records of ``budget`` minus the stale ones (a cell of the budget whose
    config the code now builds differently: its numbers answer another question), and
    how many were left out.  Records of cells outside the budget's plan (other seeds)
    are kept."""
    cells = {(c.task.name, c.variant.name, c.seed): c
             for c in plan_cells(budget, list(TABLES_BY_NAME))}
    records, kept = store.all_records(), []
    for record in records:
        cell = cells.get((record.get("task"), record.get("variant"), record.get("seed")))
        if cell is None or store.current(cell, record):
            kept.append(record)
    return kept, len(records) - len(kept)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Plan, run the cells that are not done, write the report; the exit status (0, 1
    when a cell failed, 2 for a bad name, a busy folder or a refused smoke run)."""
    budget = get_budget(args.budget)
    out = output.out_dir(args.out)
    work = Path(args.work).expanduser() if args.work else output.bench_dir() / "runs"
    store = CellStore(out / f"suite-{budget.name}", work / f"suite-{budget.name}")
    try:  # unknown names, a missing configs/ or a broken config file: one line, status 2
        cells = plan_cells(budget, args.tables, args.tasks, args.mechanisms, args.seeds)
        # every config is built (and checked) once, before anything runs
        configs = {cell.key: cell.config_dict(store.work_dir) for cell in cells}
        states = {cell.key: store.state(cell, configs[cell.key]) for cell in cells}
    except (ValueError, FileNotFoundError) as error:
        print(f"weirdnet bench suite: {error}", file=sys.stderr)
        return 2
    if args.list:
        print_plan(cells, states, store)
        return 0

    def refuse() -> None:
        if budget.name == "smoke":
            output.refuse_quick_over_full(output.full_suite_dirs(out, budget.name),
                                          "--budget smoke", args.force)

    try:
        refuse()
        folders = [store.results_dir] + ([] if args.report_only else [store.work_dir])
        with output.writing(folders, "weirdnet bench suite") as session:
            refuse()  # again, now that no one else can write there
            states = {cell.key: store.state(cell, configs[cell.key]) for cell in cells}
            return _run_cells(args, argv, cells, configs, states, store, session)
    except output.BenchError as error:
        return output.fail(error)


def _run_cells(args: argparse.Namespace, argv: list[str], cells: list[Cell],
               configs: dict[str, dict], states: dict[str, str], store: CellStore,
               session: output.Writing) -> int:
    budget = get_budget(args.budget)
    return run_cells(f"suite {budget.name}", cells, configs, states, store, session,
                     ["weirdnet", *argv], args.report_only,
                     lambda: write_report(budget.name, store, args.tables, not args.no_plot,
                                          compute_shortcuts=not args.report_only),
                     args.jobs)


