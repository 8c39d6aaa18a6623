"""Where ``weirdnet bench`` writes: a scratch folder by default (never the committed
``lab/results``), no quick run over full results, one writer per folder, and
child processes that end with their command."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.train import run_cli
from weirdnet.cli import main
from weirdnet.run import DirectoryLock, Interrupted
from weirdnet_lab.harness import children, output

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "lab" / "results"


# --- the default folder ----------------------------------------------------------------

def test_bench_dir_env_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(output.ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert output.bench_dir() == tmp_path / "home" / ".cache" / "weirdnet" / "bench"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored
    assert output.bench_dir() == tmp_path / "home" / ".cache" / "weirdnet" / "bench"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert output.bench_dir() == tmp_path / "xdg" / "weirdnet" / "bench"
    monkeypatch.setenv(output.ENV, str(tmp_path / "mine"))
    assert output.bench_dir() == tmp_path / "mine"
    assert output.out_dir(None) == tmp_path / "mine"
    assert output.out_dir(tmp_path / "x") == tmp_path / "x"


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_quick_scan_without_out_writes_outside_the_repository(monkeypatch, tmp_path,
                                                              capsys):
    """The reported bug: `weirdnet bench scan --quick` replaced the committed results."""
    before = _digests(COMMITTED)
    locked_before = (COMMITTED / ".lock").exists()  # left by an earlier --out run, maybe
    monkeypatch.setenv(output.ENV, str(tmp_path / "scratch"))
    monkeypatch.chdir(REPO)  # where the old default, lab/results, is the real one
    argv = ["bench", "scan", "--quick", "--no-memory", "--methods", "scan", "--lengths", "64"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"wrote {tmp_path / 'scratch' / 'scan_cpu.md'}" in err
    assert json.loads((tmp_path / "scratch" / "scan_cpu.json").read_text())["quick"] is True
    assert _digests(COMMITTED) == before
    assert (COMMITTED / ".lock").exists() == locked_before  # not even a lock file made


# --- no toy numbers over real ones -----------------------------------------------------

def _full_report(folder: Path, name: str = "scan", **doc) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}_cpu.json").write_text(json.dumps(
        {"benchmark": name, "machine": {"command": f"weirdnet bench {name}"}, **doc}))
    (folder / f"{name}_cpu.md").write_text("# real numbers\n")
    return _digests(folder)


def test_full_reports_recognises_quick_and_full_runs(tmp_path):
    _full_report(tmp_path / "a")  # no "quick" key: an older report, by its command
    _full_report(tmp_path / "b", quick=True)
    _full_report(tmp_path / "c", quick=False)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "scan_cpu.md").write_text("a report without its JSON\n")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "scan_cpu.json").write_text(json.dumps(
        {"machine": {"command": "weirdnet bench scan --quick --out x"}}))
    (tmp_path / "e" / "scan_cpu.md").write_text("quick\n")
    assert [p.name for p in output.full_reports(tmp_path / "a", "scan")] == ["scan_cpu.md"]
    assert output.full_reports(tmp_path / "b", "scan") == []
    assert len(output.full_reports(tmp_path / "c", "scan")) == 1
    assert len(output.full_reports(tmp_path / "d", "scan")) == 1  # cannot tell: full
    assert output.full_reports(tmp_path / "e", "scan") == []
    assert output.full_reports(tmp_path / "a", "mixers") == []  # another benchmark
    assert output.full_reports(tmp_path / "missing", "scan") == []


def test_the_committed_results_count_as_full():
    for name in ("scan", "mixers", "decode"):
        assert output.full_reports(COMMITTED, name), name
    full = output.full_suite_dirs(COMMITTED, "smoke")
    assert COMMITTED / "suite-cpu" in full and COMMITTED / "suite-smoke" not in full


@pytest.mark.parametrize("name", ["scan", "mixers", "decode"])
def test_a_quick_run_refuses_a_folder_with_full_results(name, tmp_path, capsys):
    before = _full_report(tmp_path, name)
    assert main(["bench", name, "--quick", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("weirdnet bench: ")
    assert "full results" in lines[0] and "--force" in lines[0]
    assert _digests(tmp_path) == before and not (tmp_path / ".lock").exists()


def test_force_lets_a_quick_run_replace_full_results(tmp_path, capsys):
    _full_report(tmp_path)
    argv = ["bench", "scan", "--quick", "--no-memory", "--methods", "scan", "--lengths", "64",
            "--out", str(tmp_path)]
    assert main([*argv, "--force"]) == 0
    assert json.loads((tmp_path / "scan_cpu.json").read_text())["quick"] is True
    capsys.readouterr()
    assert main(argv) == 0  # a quick report may replace a quick report


def test_a_smoke_suite_refuses_a_folder_with_full_suite_results(tmp_path):
    cells = tmp_path / "suite-cpu" / "cells"
    cells.mkdir(parents=True)
    (cells / "listops--weird-a--s0.json").write_text("{}")
    out = run_cli("bench", "suite", "--budget", "smoke", "--tasks", "listops",
                  "--mechanisms", "local", "--out", str(tmp_path), "--work",
                  str(tmp_path / "work"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("weirdnet bench: ")
    assert "--budget smoke" in out.stderr and "--force" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite-cpu"]


# --- one writer per folder ---------------------------------------------------------------

BUSY = {
    "scan": ["bench", "scan", "--quick"],
    "decode": ["bench", "decode", "--quick"],
    "speed": ["bench", "speed", "--lengths", "64"],
    "suite": ["bench", "suite", "--budget", "smoke", "--tasks", "listops",
              "--mechanisms", "local"],
}


@pytest.mark.parametrize("command", list(BUSY))
def test_a_second_writer_fails_at_once(command, tmp_path):
    held = tmp_path / "out" / "suite-smoke" if command == "suite" else tmp_path / "out"
    extra = ["--work", str(tmp_path / "work")] if command == "suite" else []
    with DirectoryLock(held, "weirdnet bench test"):
        started = time.monotonic()
        out = run_cli(*BUSY[command], "--out", str(tmp_path / "out"), *extra, cwd=tmp_path)
        took = time.monotonic() - started
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("weirdnet bench: "), out.stderr
    assert f"process {os.getpid()}" in lines[0] and "Traceback" not in out.stderr
    assert took < 30
    assert sorted(p.name for p in held.iterdir()) == [".lock"]


# --- children -------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def test_run_all_stops_running_children_when_the_caller_stops():
    started: list[int] = []

    def done(i, result):
        assert i == 0 and result.returncode == 0
        started.extend(child.proc.pid for child in children._LIVE)
        raise Interrupted(signal.SIGINT)  # as a stop signal would, mid-run

    with pytest.raises(Interrupted):
        children.run_all([[sys.executable, "-c", "pass"], SLEEPER, SLEEPER], 3, done)
    assert len(started) == 2 and not children._LIVE
    assert [pid for pid in started if _alive(pid)] == []


def test_run_times_out_and_reports_output():
    result = children.run([sys.executable, "-c", "import sys; print('out'); "
                           "print('err', file=sys.stderr); sys.exit(3)"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    started = time.monotonic()
    with pytest.raises(children.ChildTimeout, match="timed out after 1 s"):
        children.run(SLEEPER, timeout_s=1)
    assert time.monotonic() - started < 15 and not children._LIVE


def test_a_child_stops_when_its_parent_is_killed(tmp_path):
    """watch_parent: a child whose command was SIGKILLed (no chance to stop it) ends."""
    code = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'from weirdnet_lab.harness.children "
            "import watch_parent; import time; watch_parent(0.1); time.sleep(60)'], "
            "start_new_session=True)\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(1.0)  # the child has imported and started watching
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
