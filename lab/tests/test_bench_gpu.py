"""``weirdnet bench gpu``: its whole control flow on the CPU (``--dry-run-cpu``).

Without CUDA the command says so in one line and exits with status 2; a dry run writes
every step's record and report.md; a step that runs past its time box is recorded as
timed out and the next step still runs; a failing correctness check makes the exit
status non-zero.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from weirdnet.cli import main
from weirdnet_lab.gpu import plan as gpu_plan
from weirdnet_lab.gpu import report as gpu_report
from weirdnet_lab.gpu import steps as gpu_steps

NO_CUDA = not torch.cuda.is_available()


def _records(out) -> dict[str, dict]:
    paths = sorted((out / "records").glob("*.json"), key=lambda p: int(p.name.split("-")[0]))
    return {json.loads(p.read_text())["step"]: json.loads(p.read_text()) for p in paths}


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_without_cuda_one_line_and_status_2(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "weirdnet", "bench", "gpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == gpu_plan.NO_CUDA
    assert "\n" not in done.stderr.strip() and done.stdout == ""
    assert not out.exists()  # nothing written


def test_bad_step_and_time_box_are_usage_errors(tmp_path, capsys):
    for bad in (["--steps", "env,nope"], ["--time-box", "scan=0"], ["--time-box", "x=3"]):
        with pytest.raises(SystemExit) as exc:
            main(["bench", "gpu", "--out", str(tmp_path), "--dry-run-cpu", *bad])
        assert exc.value.code == 2
    assert "choose from env, correctness" in capsys.readouterr().err


@pytest.mark.slow  # every step's children: about 45 s on 2 cores
def test_dry_run_writes_every_record_and_the_report(tmp_path):
    out = tmp_path / "run"
    assert main(["bench", "gpu", "--out", str(out), "--dry-run-cpu", "--quick"]) == 0
    records = _records(out)
    assert list(records) == list(gpu_plan.STEPS)  # in the order
    for name, record in records.items():
        assert record["status"] in ("ok", "passed"), (name, record["note"])
        assert record["mode"] == "dry-run" and record["device"] == "cpu"
    assert records["env"]["data"]["torch"] == torch.__version__
    backends = records["env"]["data"]["sdpa_backends"]  # which SDPA kernel a call gets
    assert set(backends) == {"masked float32", "masked bfloat16", "causal bfloat16"}
    assert all(name in ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
               for name in backends.values()), backends
    assert "| SDPA backend, masked float32 |" in (out / "report.md").read_text()
    tests = records["correctness"]["data"]["tests"]
    assert tests["passed"] == len(gpu_plan.DRY_RUN_TESTS) and tests["failures"] == 0
    assert records["correctness"]["data"]["selfcheck"]["error"] is None
    scan = records["scan"]["data"]
    methods = gpu_plan.SCAN_METHODS.split(",")  # each scan method on both log_w classes
    assert {r["method"] for r in scan["scan"]["results"]} == {
        *methods, *(m + "-typical" for m in methods if m.startswith("scan"))}
    assert [f["L"] for f in scan["fractions"]] == [64, 128]
    assert all(f["fraction"] > 0 for f in scan["fractions"])
    assert {r["mechanism"] for r in records["speed"]["data"]["rows"]} == \
        set(gpu_plan.SPEED_MECHANISMS["dry-run"].split(","))
    assert [r["batch"] for r in records["decode"]["data"]["runs"]] == list(gpu_plan.DECODE_BATCHES)
    cells = records["suite"]["data"]["cells"]
    assert sorted(c["variant"] for c in cells) == ["softmax", "weird-a"]
    assert all(c["status"] == "done" for c in cells)
    for cell in cells:  # each cell's training log comes back beside the step's logs
        assert f"logs/suite-{cell['run']}.jsonl" in records["suite"]["logs"]
        assert (out / "logs" / f"suite-{cell['run']}.jsonl").exists()
    report = (out / "report.md").read_text()
    assert gpu_plan.DRY_RUN_NOTE in report
    for record in records.values():
        assert f"## {record['index']}. {record['title']}" in report
    summary = json.loads((out / "gpu.json").read_text())
    assert summary["mode"] == "dry-run" and summary["exit_status"] == 0
    assert (out / "scan" / "scan_cpu.json").exists()
    assert (out / "decode-b16" / "decode_cpu.json").exists()


def test_a_step_past_its_time_box_is_recorded_and_the_next_runs(tmp_path):
    ok = tmp_path / "test_ok.py"
    ok.write_text("def test_ok():\n    assert True\n")
    out = tmp_path / "run"
    status = main(["bench", "gpu", "--out", str(out), "--dry-run-cpu", "--steps",
                   "env,correctness", "--time-box", "env=0.05", "--tests", str(ok)])
    assert status == 0  # a timing step that timed out is reported, not fatal
    records = _records(out)
    assert records["env"]["status"] == "timed_out"
    assert "time box" in records["env"]["note"]
    # the commit is read by the command itself, not only by the env step that timed out
    commit = json.loads((out / "gpu.json").read_text())["commit"]
    assert commit and len(commit) == 40
    assert f"- commit: {commit}" in (out / "report.md").read_text()
    assert records["correctness"]["status"] == "passed"
    assert records["correctness"]["data"]["tests"]["passed"] == 1
    report = (out / "report.md").read_text()
    assert "| 1 | env | timed_out |" in report and "| 2 | correctness | passed |" in report


def test_a_failing_correctness_check_makes_the_status_non_zero(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("def test_good():\n    pass\n\ndef test_wrong():\n    assert 1 == 2\n")
    out = tmp_path / "run"
    status = main(["bench", "gpu", "--out", str(out), "--dry-run-cpu", "--steps",
                   "correctness", "--tests", str(bad)])
    assert status == 1
    record = _records(out)["correctness"]
    assert record["status"] == "failed"
    tests = record["data"]["tests"]
    assert (tests["passed"], tests["failures"]) == (1, 1)
    # JUnit names the module relative to the child's rootdir, which depends on where the
    # checkout and the temporary folder are
    assert len(tests["failed_tests"]) == 1
    assert tests["failed_tests"][0].endswith("test_bad::test_wrong")
    assert json.loads((out / "gpu.json").read_text())["exit_status"] == 1
    failed_lines = [line for line in (out / "report.md").read_text().splitlines()
                    if "FAILED `" in line]
    assert len(failed_lines) == 1 and failed_lines[0].endswith("test_bad::test_wrong`")


def test_copy_fractions_and_the_report_targets():
    rows = [{"method": "scan", "L": 4096, "fwd_ms": 2.0, "fwdbwd_ms": 5.0, "mem_mib": None,
             "error": None},
            {"method": "scan", "L": 1024, "fwd_ms": 1.0, "fwdbwd_ms": 2.0, "mem_mib": None,
             "error": None}]
    copies = [{"L": 1024, "ms": 0.5, "bytes": 10**6, "gb_per_s": 2.0},
              {"L": 4096, "ms": 1.0, "bytes": 4 * 10**6, "gb_per_s": 4.0}]
    fractions = gpu_steps.copy_fractions(rows, copies)
    assert [f["fraction"] for f in fractions] == [0.5, 0.5]
    assert fractions[1]["scan_gb_per_s"] == pytest.approx(2.0)
    data = {"scan": {"config": {"batch": 8, "dim": 1024, "dtype": "bfloat16",
                                "lengths": [1024, 4096]}, "results": rows, "targets": [],
                     "file": "scan/scan_cuda.json"}, "fractions": fractions}
    text = "\n".join(gpu_report._scan_section(data))
    assert "at L=4096: 0.50 — FAIL" in text  # the target is L >= 4K only
    assert "at L=1024" not in text


def test_the_gpu_tests_run_in_parallel_only_where_they_can(monkeypatch):
    """pytest-xdist workers: half the cores up to 8 with xdist installed, else one."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(gpu_steps.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "xdist" else real_find_spec(name, *a))
    assert gpu_steps.parallel_test_workers(dry=False) == 8
    # the interpreter's few tests: not worth it
    assert gpu_steps.parallel_test_workers(dry=True) == 1
    monkeypatch.setattr(gpu_steps.os, "cpu_count", lambda: 2)
    assert gpu_steps.parallel_test_workers(dry=False) == 1
    monkeypatch.setattr(gpu_steps.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "xdist" else real_find_spec(name, *a))
    assert gpu_steps.parallel_test_workers(dry=False) == 1


def test_a_resumed_pilot_cell_is_marked_and_left_out_of_the_extrapolation():
    """A cell resumed from an earlier process's checkpoint timed only its last process:
    the report says so, and the budget's time is extrapolated from fresh cells alone."""
    fresh = {"variant": "weird-a", "seed": 0, "status": "done", "wall_s": 120.0,
             "steps": 600, "steps_per_s": 5.0, "memory_mib": 700.0, "resumed": False,
             "test_accuracy": 0.37}
    resumed = fresh | {"variant": "weird-b", "wall_s": 15.0, "resumed": True}
    estimate = gpu_steps.budget_estimate("gpu", [fresh, resumed])
    assert estimate["pilot_cells_done"] == 1 and estimate["mean_cell_wall_s"] == 120.0
    assert gpu_steps.budget_estimate("gpu", [resumed])["mean_cell_wall_s"] is None
    text = "\n".join(gpu_report._suite_section({"budget": "gpu", "cells": [fresh, resumed],
                                         "estimate": estimate}))
    assert "| weird-b | done (resumed) |" in text and "| weird-a | done |" in text
    assert "left out of the extrapolation" in text and "120.0 s per cell" in text


def test_an_unfinished_pilot_cell_is_described_from_its_log(tmp_path):
    """A cell stopped before its record: its last logged event of its latest process."""
    log = tmp_path / "listops--weird-b--s0" / "log.jsonl"
    log.parent.mkdir()
    events = [{"event": "start", "step": 0, "time": 100.0, "resumed_from": None},
              {"event": "train", "step": 10, "time": 105.0},
              {"event": "start", "step": 10, "time": 200.0, "resumed_from": "step-00000010"},
              {"event": "train", "step": 600, "time": 260.0}]
    log.write_text("\n".join(json.dumps(e) for e in events) + '\n{"event": "ev')
    cell = gpu_steps._unfinished_cell("listops--weird-b--s0", log)
    assert cell["variant"] == "weird-b" and cell["steps"] == 600
    assert cell["wall_s"] == 60.0 and cell["resumed"] is True
    assert cell["status"] == "unfinished (last event: train)"
    assert gpu_steps.budget_estimate("gpu", [cell])["pilot_cells_done"] == 0
    text = "\n".join(gpu_report._suite_section({"budget": "gpu", "cells": [cell], "estimate": {}}))
    assert "| weird-b | unfinished (last event: train) (resumed) | 60.0 | 600 |" in text
