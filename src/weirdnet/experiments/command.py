"""``weirdnet bench suite``: plan the cells, run the missing ones, write the report.

Each cell runs in a fresh process (:mod:`.child`) so its peak memory is its own and a
crash or missing dataset costs one cell, not the suite.  A rerun skips finished cells,
resumes interrupted ones from their last checkpoint, and reruns failed or stale ones (a
stale cell was recorded with a config that the current code no longer builds).

While it runs, the suite holds the locks of its results folder and its run directories'
folder (one writer each, :mod:`weirdnet.bench.output`).  SIGINT or SIGTERM stops it
cleanly: each running cell's process (one, or ``--jobs`` of them) gets one SIGTERM and is
waited for (the trainer saves a checkpoint), the cell stays unfinished (no record: a rerun
resumes it), and one line says what was kept and the command that continues.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from weirdnet._signals import Interrupted
from weirdnet.bench import output

from .budgets import BUDGETS, Budget, get_budget
from .cells import Cell, CellStore, config_hash
from .plan import DEFAULT_TABLES, OPT_IN_TABLES, TABLES_BY_NAME, plan_cells
from .tasks import TASKS_BY_NAME
from .variants import VARIANTS

HELP = "the papers' tables: every mechanism on every task, one budget"

DESCRIPTION = """\
Train every mechanism on the papers' tasks under one budget and print the papers' tables
with our numbers beside theirs: LRA (Weird-Net Table III / DBA Table 2), UEA (DBA Table 3),
byte-level LM, the ablations (Weird-Net Tables IX-XI, DBA Table 12), the papers' claimed
orderings checked, and the Fig. 6 plot (accuracy vs speed, memory as circle size).

Budgets: smoke (seconds per cell, checks the plumbing), cpu (about an hour on 2 cores;
decides little), laptop (several hours on 2 cores, sized so that the Transformer learns
every task it runs, 3 seeds for the papers' mechanisms and the Transformer; the tasks it
cannot decide are listed, not run), gpu (about 30 minutes on one GPU), paper (the papers'
configs and official data).  Every report says which tasks its budget decides: those
where the Transformer clears the majority class by 10 points (LM: the unigram entropy by
1 bit per byte).
Results: OUT/suite-<budget>/{cells/*.json, report.md, fig6.png}; run directories
(checkpoints, logs) under WORK/suite-<budget>/.  OUT is --out DIR, else
$WEIRDNET_BENCH_DIR, else ~/.cache/weirdnet/bench; WORK is --work DIR, else runs/ in that
default folder.  The committed results are written only with --out benchmarks/results,
and never by the smoke budget (unless --force).  A rerun skips finished cells and resumes
interrupted ones; Ctrl-C or SIGTERM leaves the running cells resumable.  --jobs N runs N
cells at once (each with cores/N threads unless OMP_NUM_THREADS is set).
"""

EXAMPLES = """\
examples:
  weirdnet bench suite --budget cpu                       # everything (about an hour)
  weirdnet bench suite --budget cpu --out benchmarks/results   # the committed results
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


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_jobs_argument(parser: argparse.ArgumentParser) -> None:
    """``--jobs N``: cells run at once (:func:`run_cells`)."""
    parser.add_argument("--jobs", type=_positive, default=1, metavar="N",
                        help="cells to run at once (default 1), each with an equal share "
                             "of the cores unless OMP_NUM_THREADS is set; small models "
                             "gain little from more threads, so a sweep can finish sooner, "
                             "but the cells' steps/s and wall times are then those of a "
                             "shared machine (the report says so)")


SIGNAL_EXITS = {-signal.SIGINT: signal.SIGINT, 128 + signal.SIGINT: signal.SIGINT,
                -signal.SIGTERM: signal.SIGTERM, 128 + signal.SIGTERM: signal.SIGTERM}
"""A cell process's exit statuses that mean it was stopped by SIGINT/SIGTERM."""

STOP_GRACE_S = 300.0
"""How long a stopped cell may take to save its checkpoint before it is killed."""


def cell_spec(cell, config: dict, store: CellStore, command: list[str],
              fresh: bool = False, jobs: int = 1) -> tuple[dict, Path, Path]:
    """Write the spec of ``cell`` (training ``config``; any cell with ``key`` and
    ``info``) for its child (:mod:`.child`); the spec, its file and the child's log.
    ``fresh``: start over even where a run of this config exists (its run directory is
    overwritten, as ``weirdnet train --overwrite`` does); ``jobs``: how many cells run at
    once (kept in the record: their speeds are those of a shared machine)."""
    logs = store.work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    spec = {"config": config, "config_hash": config_hash(config), "cell": cell.info,
            "record": str(store.record_path(cell)), "command": command, "fresh": fresh,
            "cells_at_once": jobs}
    spec_path = logs / f"{cell.key}.spec.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return spec, spec_path, logs / f"{cell.key}.log"


def cell_outcome(cell, spec: dict, code: int, log_path: Path, store: CellStore) -> bool:
    """True if the cell's child (exit status ``code``) stored a record of ``spec``'s
    config; otherwise store a failed record (the log's tail) and return False.  A cell
    stopped by a signal stores nothing (it is unfinished, and resumable): this process
    stops too (:class:`Interrupted`)."""
    record = store.read(cell)
    if record is not None and record.get("status") == "done" and \
            record.get("config_hash") == spec["config_hash"]:
        return True
    if code in SIGNAL_EXITS:  # stopped from outside: unfinished, not failed
        raise Interrupted(SIGNAL_EXITS[code])
    tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
    store.write(cell, {**cell.info, "status": "failed", "error": tail,
                       "config_hash": spec["config_hash"], "log": str(log_path)})
    return False


def print_plan(cells: list, states: dict[str, str], store: CellStore) -> None:
    """Each cell's state and key, a count per state, and where the records and run
    directories were looked for (a cell recorded under another ``--out`` shows as
    "interrupted" or "pending" here)."""
    print(f"records: {store.cells_dir}; run directories: {store.work_dir}")
    for cell in cells:
        print(f"{states[cell.key]:<12} {cell.key}")
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


def write_report(budget_name: str, store: CellStore, tables: list[str],
                 plot: bool) -> Path:
    """Write ``report.md`` (and ``fig6.png``) from every stored record of the budget;
    both are written whole (a stop signal waits until they are)."""
    from weirdnet._atomic import write_atomic

    from .document import render
    from .report import Results

    budget = get_budget(budget_name)
    records, stale = current_records(budget, store)
    with output.write_whole():
        figure = None
        if plot and "main" in tables:
            try:
                from .figure import draw_fig6
                from .variants import MECHANISMS

                draw_fig6(Results(records), [m.name for m in MECHANISMS],
                          store.results_dir / "fig6.png", budget_name)
                figure = "fig6.png"
            except ImportError:
                print("fig6.png skipped: matplotlib is not installed (pip install "
                      "matplotlib)", file=sys.stderr)
        path = store.results_dir / "report.md"
        write_atomic(path, render(budget, records, tables, figure, stale))
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
                     lambda: write_report(budget.name, store, args.tables, not args.no_plot),
                     args.jobs)


def run_cells(name: str, cells: list, configs: dict[str, dict], states: dict[str, str],
              store: CellStore, session: output.Writing, command: list[str],
              report_only: bool, write: Callable[[], Path] | None, jobs: int = 1) -> int:
    """Run every cell not done (one child each, ``jobs`` at once, with a progress bar; a
    cell in state "rerun" starts over), then ``write()`` the report and print it
    (``write`` None: no report); the exit status (1 when a cell failed).  An
    interruption stops every running cell (each saves a checkpoint) and leaves one line
    (``session.kept``) saying what was kept and how to continue."""
    from tqdm.auto import tqdm

    from weirdnet.bench import children

    todo = [c for c in cells if states[c.key] != "done"] if not report_only else []
    print(f"{name}: {len(cells)} cells, {len(cells) - len(todo)} already "
          f"done, {len(todo)} to run" + (f", {jobs} at once" if jobs > 1 and todo else ""),
          flush=True)
    specs = [cell_spec(c, configs[c.key], store, command, states[c.key] == "rerun", jobs)
             for c in todo]
    running: dict[int, object] = {}
    session.kept = lambda: _kept(cells, configs, store, list(running.values()), command)
    failed = 0
    with tqdm(total=len(todo), unit="cell", dynamic_ncols=True, disable=not todo) as bar:
        def show() -> None:
            bar.set_postfix_str(", ".join(f"{c.key} ({states[c.key]})"
                                          for c in running.values()))

        def started(i: int) -> None:
            running[i] = todo[i]
            show()

        def ended(i: int, result) -> None:
            nonlocal failed
            code = getattr(result, "returncode", None)
            spec, _, log = specs[i]
            failed += not cell_outcome(todo[i], spec, code, log, store)
            del running[i]
            bar.update()
            show()

        commands = [children.job_command("cell", spec_path) for _, spec_path, _ in specs]
        children.run_all(commands, jobs, ended, env=cell_env(jobs), grace_s=STOP_GRACE_S,
                         logs=[log for _, _, log in specs], what=lambda i: f"cell {todo[i].key}",
                         started=started)
    if write is None:
        return 1 if failed else 0
    rebuild = command if report_only else [*command, "--report-only"]
    session.kept = (f"records kept in {store.cells_dir}; the report is whole (the old one "
                    f"or the new one): rebuild it with: {shlex.join(rebuild)}")
    path = write()
    print(path.read_text(encoding="utf-8"))
    print(f"report: {path}" + (f"; {failed} cell(s) failed (see the report's end)"
                               if failed else ""), flush=True)
    return 1 if failed else 0


def cell_env(jobs: int) -> dict[str, str] | None:
    """The cells' environment: with ``jobs`` > 1 and no ``OMP_NUM_THREADS`` set, each
    cell gets an equal share of the CPU cores (threads fighting over cores slow every
    cell many times); None (this process's environment) otherwise."""
    if jobs <= 1 or "OMP_NUM_THREADS" in os.environ:
        return None
    return {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}


def _kept(cells: list, configs: dict[str, dict], store: CellStore, running: list,
          command: list[str]) -> str:
    """What an interrupted suite kept, and the command that continues it (one line)."""
    from weirdnet.train.checkpoint import list_checkpoints

    done = sum(store.state(c, configs[c.key]) == "done" for c in cells)
    parts = []
    for cell in running:
        saved = list_checkpoints(store.run_dir(cell))
        parts.append(f"cell {cell.key} is unfinished, " + (
            f"its checkpoint {saved[-1].name} kept in {store.run_dir(cell)}" if saved
            else "no checkpoint yet (it starts again)"))
    parts.append(f"{done} of {len(cells)} cells done, records in {store.cells_dir}; "
                 f"report not rebuilt; continue with: {shlex.join(command)}")
    return "; ".join(parts)
