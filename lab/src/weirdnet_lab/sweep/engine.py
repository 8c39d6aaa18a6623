"""The sweep engine: run the cells not done, each in a fresh process, and write the report.

``bench suite``, ``bench lm`` and ``bench recall`` plan their cells and call
:func:`run_cells`: every cell runs in its own child (:mod:`weirdnet_lab.sweep.cell`), so
its peak memory is its own and a crash or a missing dataset costs one cell, not the sweep;
``--jobs`` cells at once; a rerun skips finished cells, resumes interrupted ones from their
last checkpoint and reruns failed or stale ones.  SIGINT or SIGTERM stops every running
cell (each saves a checkpoint), and one line says what was kept and the command that
continues.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
from collections.abc import Callable
from pathlib import Path

from weirdnet.run import Interrupted
from weirdnet_lab.harness import output
from weirdnet_lab.harness.arguments import positive
from weirdnet_lab.sweep.store import CellStore, config_hash


def add_jobs_argument(parser: argparse.ArgumentParser) -> None:
    """``--jobs N``: cells run at once (:func:`run_cells`)."""
    parser.add_argument("--jobs", type=positive, default=1, metavar="N",
                        help="cells to run at once (default 1), each with an equal share "
                             "of the cores unless OMP_NUM_THREADS is set; small models "
                             "gain little from more threads, so a sweep can finish sooner, "
                             "but the cells' steps/s and wall times are then those of a "
                             "shared machine (the report says so)")


def add_sweep_arguments(parser: argparse.ArgumentParser, results: str,
                        figure: str | None = None) -> None:
    """The options every sweep command shares: ``--work``, ``--list``, ``--report-only``,
    ``--no-plot`` (when its report has ``figure``), ``--jobs`` and ``--out`` (its
    ``results`` named in the help)."""
    from weirdnet_lab.harness import output

    parser.add_argument("--work", default=None,
                        help="run directories (default: $WEIRDNET_BENCH_DIR/runs)")
    parser.add_argument("--list", action="store_true", help="print the cells and exit")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the stored records; train nothing")
    if figure:
        parser.add_argument("--no-plot", action="store_true", help=f"skip {figure}")
    add_jobs_argument(parser)
    output.add_out_arguments(parser, results)


def sweep_store(args: argparse.Namespace, folder: str):
    """The :class:`~.store.CellStore` of a sweep command: records in OUT/``folder``, run
    directories in ``--work``/``folder``."""
    from pathlib import Path

    from weirdnet_lab.harness import output

    from .store import CellStore

    work = Path(args.work).expanduser() if args.work else output.bench_dir() / "runs"
    return CellStore(output.out_dir(args.out) / folder, work / folder)


def list_or_run(command: str, cells: list, configs: dict[str, dict], store, args,
                argv: list[str], report) -> int:
    """The end of a sweep command: ``--list`` prints the plan; otherwise the folders are
    held for ``weirdnet bench <command>``, the cells not done run (``--jobs`` at once) and
    ``report()`` writes the report.  Returns the exit status."""
    from weirdnet_lab.harness import output

    if args.list:
        print_plan(cells, {c.key: store.state(c, configs[c.key]) for c in cells}, store)
        return 0
    try:
        folders = [store.results_dir] + ([] if args.report_only else [store.work_dir])
        with output.writing(folders, f"weirdnet bench {command}") as session:
            states = {cell.key: store.state(cell, configs[cell.key]) for cell in cells}
            return run_cells(store.results_dir.name, cells, configs, states, store, session,
                             ["weirdnet", *argv], args.report_only, report, args.jobs)
    except output.BenchError as error:
        return output.fail(error)


SIGNAL_EXITS = {-signal.SIGINT: signal.SIGINT, 128 + signal.SIGINT: signal.SIGINT,
                -signal.SIGTERM: signal.SIGTERM, 128 + signal.SIGTERM: signal.SIGTERM}
"""A cell process's exit statuses that mean it was stopped by SIGINT/SIGTERM."""


STOP_GRACE_S = 300.0
"""How long a stopped cell may take to save its checkpoint before it is killed."""


def cell_spec(cell, config: dict, store: CellStore, command: list[str],
              fresh: bool = False, jobs: int = 1) -> tuple[dict, Path, Path]:
    """Write the spec of ``cell`` (training ``config``; any cell with ``key`` and
    ``info``, and ``stage_configs`` if it has a curriculum) for its child
    (:mod:`.cell`); the spec, its file and the child's log.
    ``fresh``: start over even where a run of this config exists (its run directory is
    overwritten, as ``weirdnet train --overwrite`` does); ``jobs``: how many cells run at
    once (kept in the record: their speeds are those of a shared machine)."""
    logs = store.work_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    spec = {"config": config, "config_hash": config_hash(config), "cell": cell.info,
            "record": str(store.record_path(cell)), "command": command, "fresh": fresh,
            "cells_at_once": jobs, "code_log": str(logs / f"{cell.key}.code.jsonl")}
    # a curriculum (a suite budget's): configs trained before the cell's own
    stages = cell.stage_configs(store.work_dir) if hasattr(cell, "stage_configs") else []
    if stages:
        spec["stages"] = stages
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
    store.write(cell, {**cell.info, "status": "failed", "exit_status": code,
                       "error": f"{exit_reason(code)}\n{tail}",
                       "config_hash": spec["config_hash"], "log": str(log_path)})
    return False


def exit_reason(code: int) -> str:
    """One line on how a cell's process ended: its exit status, or the signal that killed
    it (SIGKILL with no message of its own is, on Linux, usually the out-of-memory
    killer: a 2026-11-27 Mamba cell beside a 16K-context cell left only warnings)."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        name = signal.Signals(number).name if number else None
    except ValueError:
        name = None
    if name is None:
        return f"the cell's process exited with status {code}"
    hint = " (on Linux usually the out-of-memory killer)" if number == signal.SIGKILL else ""
    return f"the cell's process was killed by {name}{hint}"


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


def run_cells(name: str, cells: list, configs: dict[str, dict], states: dict[str, str],
              store: CellStore, session: output.Writing, command: list[str],
              report_only: bool, write: Callable[[], Path] | None, jobs: int = 1) -> int:
    """Run every cell not done (one child each, ``jobs`` at once, with a progress bar; a
    cell in state "rerun" starts over), then ``write()`` the report and print it
    (``write`` None: no report); the exit status (1 when a cell failed).  An
    interruption stops every running cell (each saves a checkpoint) and leaves one line
    (``session.kept``) saying what was kept and how to continue."""
    from tqdm.auto import tqdm

    from weirdnet_lab.harness import children

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
    from weirdnet.train import list_checkpoints

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
