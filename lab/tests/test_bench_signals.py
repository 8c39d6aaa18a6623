"""SIGINT and SIGTERM sent from outside to real ``weirdnet bench`` commands at chosen
points (a memory child running, a ``bench speed`` cell running, a suite cell's process
started or training).  Every case must end with exit status 130/143, one last line
``weirdnet bench: ...`` on stderr saying what was kept, no traceback, no child process
left, and the output folder as it was or with whole files added (no half-written report:
``bench speed`` keeps its measured cells as a partial report); an interrupted suite cell
is unfinished (not failed) and a rerun completes it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.train import run_cli, subprocess_env, weirdnet_cmd
from weirdnet.train import list_checkpoints
from weirdnet_lab.suite.budgets import get_budget
from weirdnet_lab.suite.cells import Cell
from weirdnet_lab.suite.tasks import get_task
from weirdnet_lab.sweep.store import CellStore, config_hash
from weirdnet_lab.variants import get_variant

pytestmark = pytest.mark.slow  # benchmark subprocesses

STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _descendants(pid: int) -> dict[int, str]:
    """PID -> command line of every process below ``pid``, from /proc."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[int(entry.name)] = command
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found[child] = commands[child]
                todo.append(child)
    return found


def _running(pid: int, command: str) -> bool:
    """Whether ``pid`` is still that process (not gone, not a zombie, not reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        now = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and now == command


class Bench:
    """A ``weirdnet bench`` command running in a subprocess, output in files."""

    def __init__(self, tmp_path: Path, *args: str):
        self.err_path, self.out_path = tmp_path / "stderr.txt", tmp_path / "stdout.txt"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.process = subprocess.Popen(weirdnet_cmd("bench", *args), cwd=tmp_path,
                                            env=subprocess_env(), stdout=out, stderr=err)

    def wait_for(self, ready: Callable[[], object], what: str, timeout: float = 60):
        """Poll ``ready()`` until it returns something true; return that."""
        deadline = time.monotonic() + timeout
        while True:
            found = ready()
            if found:
                return found
            assert self.process.poll() is None, f"ended before {what}: {self.stderr()}"
            assert time.monotonic() < deadline, f"no {what} after {timeout} s"
            time.sleep(0.02)

    def children(self, words: str) -> dict[int, str]:
        return {pid: cmd for pid, cmd in _descendants(self.process.pid).items()
                if words in cmd}

    def stop(self, signum: int, timeout: float = 60) -> tuple[int, float]:
        """Send ``signum``; (exit status, seconds it took to end)."""
        started = time.monotonic()
        self.process.send_signal(signum)
        status = self.process.wait(timeout=timeout)
        return status, time.monotonic() - started

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")


def _assert_clean_end(bench: Bench, signum: int, status: int,
                      watched: dict[int, str]) -> str:
    """Exit status 128 + signal, last line ``weirdnet bench: ...``, no traceback, none of
    the ``watched`` processes left; returns the last line."""
    err = bench.stderr()
    out = bench.out_path.read_text(errors="replace")
    assert status == STATUS[signum], err[-3000:]
    assert "Traceback" not in err + out
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("weirdnet bench"), err[-3000:]
    assert lines[-1].startswith(f"weirdnet bench: interrupted by {signal.Signals(signum).name}")
    left = [pid for pid, command in watched.items() if _running(pid, command)]
    assert left == [], f"child processes left running: {left}"
    return lines[-1]


def _no_temporaries(folder: Path) -> None:
    assert [p.name for p in folder.rglob(".*") if p.name != ".lock"] == []


# --- scan, speed, generate: nothing written, children stopped ----------------------------

def test_sigint_while_scan_memory_children_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    old = {"scan_cpu.json": json.dumps({"benchmark": "scan", "quick": True}) + "\n",
           "scan_cpu.md": "# an earlier quick run\n"}
    for name, text in old.items():
        (out / name).write_text(text)
    bench = Bench(tmp_path, "scan", "--quick", "--methods", "scan,sdpa", "--lengths", "64,128",
                  "--out", str(out))
    children = bench.wait_for(lambda: bench.children("weirdnet_lab.harness.child"),
                              "a memory child")
    status, took = bench.stop(signal.SIGINT)
    line = _assert_clean_end(bench, signal.SIGINT, status, children)
    assert took < 10
    assert f"nothing written ({out} left as it was)" in line
    assert {p.name: p.read_text() for p in out.iterdir() if p.name != ".lock"} == old
    _no_temporaries(out)


def test_sigterm_while_a_speed_cell_runs(tmp_path):
    bench = Bench(tmp_path, "speed", "--lengths", "64", "128", "--mechanisms", "weird-a",
                  "--dim", "16", "--depth", "1", "--d-ff", "32", "--heads", "2", "--batch",
                  "2", "--steps", "1", "--warmup", "0", "--out", str(tmp_path / "out"))
    children = bench.wait_for(lambda: bench.children("weirdnet_lab.harness.child speed"),
                              "a speed cell")
    status, took = bench.stop(signal.SIGTERM)
    _assert_clean_end(bench, signal.SIGTERM, status, children)
    assert took < 10
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".lock"]


def test_sigterm_after_a_speed_cell_keeps_it_as_a_partial_report(tmp_path):
    """The first cell (the reference at the first length) has been measured, the second
    runs: the first is written as a partial report, beside no full one."""
    out = tmp_path / "out"
    bench = Bench(tmp_path, "speed", "--lengths", "64", "128", "--mechanisms", "weird-a",
                  "--dim", "16", "--depth", "1", "--d-ff", "32", "--heads", "2", "--batch",
                  "2", "--steps", "1", "--warmup", "0", "--out", str(out))
    first = bench.wait_for(lambda: bench.children("weirdnet_lab.harness.child speed"),
                           "the first speed cell", timeout=120)
    second = bench.wait_for(lambda: {pid: command for pid, command in bench.children(
        "weirdnet_lab.harness.child speed").items() if pid not in first},
        "the second speed cell", timeout=120)
    status, took = bench.stop(signal.SIGTERM)
    line = _assert_clean_end(bench, signal.SIGTERM, status, {**first, **second})
    assert took < 20
    assert "the 1 cell(s) measured before it were written to" in line
    assert sorted(p.name for p in out.iterdir()) == [".lock", "speed_cpu.partial.json",
                                                     "speed_cpu.partial.md"]
    rows = json.loads((out / "speed_cpu.partial.json").read_text())["rows"]
    assert [r["status"] for r in rows if r["mechanism"] == "softmax"] == \
        ["ok", "not run (stopped by SIGTERM)"]
    _no_temporaries(out)


def test_sigint_while_generate_measures(tmp_path):
    bench = Bench(tmp_path, "decode", "--quick", "--models", "weirdnet-small-cpu",
                  "--out", str(tmp_path / "out"))
    bench.wait_for(lambda: "at context 256" in bench.stderr(), "a measurement")
    status, _ = bench.stop(signal.SIGINT)
    _assert_clean_end(bench, signal.SIGINT, status, {})
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".lock"]


# --- suite: the running cell stays unfinished and resumable ------------------------------

def _suite(tmp_path: Path, mechanisms: str) -> list[str]:
    return ["suite", "--budget", "smoke", "--tables", "main", "--tasks", "listops",
            "--mechanisms", mechanisms, "--out", str(tmp_path / "results"),
            "--work", str(tmp_path / "work")]


def _cell(store: CellStore, variant: str) -> tuple[Cell, dict]:
    cell = Cell(get_task("listops"), get_variant(variant), 0, get_budget("smoke"))
    return cell, cell.config_dict(store.work_dir)


def _store(tmp_path: Path) -> CellStore:
    return CellStore(tmp_path / "results" / "suite-smoke", tmp_path / "work" / "suite-smoke")


def test_sigint_as_a_suite_cell_starts_keeps_the_records(tmp_path):
    store = _store(tmp_path)
    done, done_config = _cell(store, "softmax")
    store.write(done, {"task": "listops", "variant": "softmax", "seed": 0, "budget": "smoke",
                       "status": "done", "config_hash": config_hash(done_config)})
    kept = store.record_path(done).read_bytes()
    bench = Bench(tmp_path, *_suite(tmp_path, "weird-a,softmax"))
    children = bench.wait_for(lambda: bench.children("weirdnet_lab.harness.child cell"),
                              "the cell's process")
    status, _ = bench.stop(signal.SIGINT)
    line = _assert_clean_end(bench, signal.SIGINT, status, children)
    assert "cell listops--weird-a--s0 is unfinished" in line
    assert "1 of 2 cells done" in line and "continue with: weirdnet bench suite" in line
    cell, config = _cell(store, "weird-a")
    assert store.read(cell) is None  # unfinished, not failed
    assert store.state(cell, config) in ("pending", "interrupted")
    assert store.record_path(done).read_bytes() == kept
    assert sorted(p.name for p in store.cells_dir.iterdir()) == [done.key + ".json"]
    assert not (store.results_dir / "report.md").exists()
    _no_temporaries(store.results_dir)


def test_sigterm_while_a_suite_cell_trains_then_a_rerun_completes_it(tmp_path):
    store = _store(tmp_path)
    cell, config = _cell(store, "weird-a")
    bench = Bench(tmp_path, *_suite(tmp_path, "weird-a"))
    run_lock = store.run_dir(cell) / ".lock"  # the trainer has claimed its run directory
    bench.wait_for(lambda: run_lock.exists(), "the cell's trainer")
    children = bench.children("weirdnet_lab.harness.child cell")
    status, _ = bench.stop(signal.SIGTERM)
    if status == 0:
        pytest.skip("the cell finished before the signal arrived")
    _assert_clean_end(bench, signal.SIGTERM, status, children)
    assert store.read(cell) is None  # unfinished, not failed
    checkpoints = list_checkpoints(store.run_dir(cell))
    assert store.state(cell, config) == ("interrupted" if checkpoints else "pending")

    rerun = run_cli("bench", *_suite(tmp_path, "weird-a"), cwd=tmp_path, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "0 already done, 1 to run" in rerun.stdout
    record = store.read(cell)
    assert record["status"] == "done" and record["resumed"] is bool(checkpoints)


def test_sigterm_while_two_suite_cells_train_stops_both_resumably(tmp_path):
    store = _store(tmp_path)
    bench = Bench(tmp_path, *_suite(tmp_path, "weird-a,softmax"), "--jobs", "2")
    children = bench.wait_for(
        lambda: (found := bench.children("weirdnet_lab.harness.child cell")) and len(found) == 2
        and found, "both cells' processes")
    status, _ = bench.stop(signal.SIGTERM)
    if status == 0:
        pytest.skip("the cells finished before the signal arrived")
    line = _assert_clean_end(bench, signal.SIGTERM, status, children)
    for variant in ("weird-a", "softmax"):
        cell, config = _cell(store, variant)
        assert store.read(cell) is None or store.read(cell)["status"] == "done"
        if store.read(cell) is None:  # unfinished, not failed, and named in the line
            assert f"cell {cell.key} is unfinished" in line
            assert store.state(cell, config) in ("pending", "interrupted")
    _no_temporaries(store.results_dir)


def test_a_stop_signal_while_a_child_starts_reports_it_started(monkeypatch):
    """A signal that arrives while a child is being forked (shielded, so no child is ever
    unknown to its parent) acts only once the caller knows the child started: the suite
    then names that cell as unfinished (this race once dropped one of two cells from the
    last line under load)."""
    import os
    import sys

    from weirdnet.run import STOP, Interrupted
    from weirdnet_lab.harness import children

    original = children._Child.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the parent forks

    monkeypatch.setattr(children._Child, "__init__", init)
    seen = []
    installed = STOP.install()
    try:
        with pytest.raises(Interrupted):
            children.run_all([[sys.executable, "-c", "import time; time.sleep(30)"]], 1,
                             lambda i, result: None, started=seen.append, grace_s=5.0)
    finally:
        if installed:
            STOP.uninstall()
        STOP.reset()
    assert seen == [0]
    assert not children._LIVE  # and the child was stopped


def test_a_killed_cell_records_how_it_ended(tmp_path):
    """A cell whose process the kernel killed (SIGKILL, the out-of-memory killer's signal)
    is a failed cell whose record says so first, above the log's tail (which held only
    warnings when it happened to a Mamba cell); a plain exit status reads as one."""
    from types import SimpleNamespace

    from weirdnet_lab.sweep.engine import cell_outcome, exit_reason

    assert exit_reason(-signal.SIGKILL) == exit_reason(128 + signal.SIGKILL)
    assert "out-of-memory" in exit_reason(-signal.SIGKILL)
    assert exit_reason(1) == "the cell's process exited with status 1"
    assert "SIGSEGV" in exit_reason(-signal.SIGSEGV)
    store = CellStore(tmp_path / "results", tmp_path / "work")
    cell = SimpleNamespace(key="c", info={"variant": "mamba"})
    log = tmp_path / "c.log"
    log.write_text("[transformers] a warning\n")
    assert not cell_outcome(cell, {"config_hash": "h"}, -signal.SIGKILL, log, store)
    record = store.read(cell)
    assert record["status"] == "failed" and record["exit_status"] == -signal.SIGKILL
    assert record["error"].startswith("the cell's process was killed by SIGKILL")
