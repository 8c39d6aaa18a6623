"""bench gpu's scan-timing step (issue 73, part 7): its control flow on the CPU (a dry
run: the Triton kernels under the interpreter, a wall clock, no GPU number), the time
budget that skips what is left, a new backend this checkout lacks, and the targets'
PASS/FAIL from the numbers."""

import json

import pytest

from weirdnet.cli import main
from weirdnet_lab.gpu.plan import QUICK_STEPS, SCAN_TIMING, TIME_BOXES_S
from weirdnet_lab.gpu.report import issue73_targets
from weirdnet_lab.gpu.scan_timing import job_scan_timing, read_rows


def test_quick_is_the_prepared_run_within_eight_minutes():
    assert QUICK_STEPS == ("env", "scan-timing")
    assert sum(TIME_BOXES_S["quick"][s] for s in QUICK_STEPS) <= 8 * 60
    quick = SCAN_TIMING["quick"]
    assert (quick["batch"], quick["dim"], quick["dtype"]) == (8, 1024, "bfloat16")
    assert quick["lengths"] == (1024, 4096, 16384, 65536)


def test_the_time_budget_skips_what_is_left_with_a_record(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_SCAN_SELFCHECK", "0")  # what the job sets in its child
    path = tmp_path / "rows.jsonl"
    spec = {**SCAN_TIMING["dry-run"], "device": "cpu", "records": str(path),
            "new_backend": "no-such-backend", "budget_s": 0.0}
    job_scan_timing(spec)
    rows = read_rows(path)
    assert [r["step"] for r in rows[:2]] == ["plan", "env"]
    assert rows[-1]["step"] == "done"
    later = rows[2:-1]
    assert {r["step"] for r in later} == {"selfcheck", "copy", "race", "passes", "path-a"}
    assert all(r["status"] == "skipped" and r["note"].startswith("time budget")
               for r in later), later
    races = [(r["method"], r["L"]) for r in later if r["step"] == "race"]
    assert races == [(m, n) for n in (64, 128)
                     for m in ("no-such-backend", "triton", "sdpa-causal")]


def _race(method, length, fwd, both):
    return {"step": "race", "method": method, "L": length, "status": "ok", "fwd_ms": fwd,
            "fwdbwd_ms": both}


def test_the_targets_pass_or_fail_from_the_numbers():
    def lines(fwd16, both16, both64, fwd1):
        rows = [_race("new", 16384, fwd16, both16), _race("new", 65536, 8.0, both64),
                _race("new", 1024, fwd1, 0.5), _race("sdpa-causal", 16384, 9.2, 33.0),
                _race("sdpa-causal", 65536, 150.0, 520.0), _race("sdpa-causal", 1024, 0.06, 0.3)]
        return issue73_targets([{"step": "scan-timing", "data": {
            "config": {"new_backend": "new"}, "rows": rows}}])
    good = lines(1.5, 6.0, 30.0, 0.05)
    assert [x.endswith("PASS") for x in good[1:]] == [True] * 4
    bad = lines(6.6, 40.0, 200.0, 0.5)
    assert [x.endswith("FAIL") for x in bad[1:]] == [True] * 4
    missing = issue73_targets([{"step": "scan-timing", "data": {"rows": []}}])
    assert all(x.endswith("not measured") for x in missing[1:])


@pytest.mark.slow  # the Triton interpreter and SDPA at tiny sizes: about a minute
def test_the_dry_run_writes_each_measurement_and_says_what_is_missing(tmp_path):
    out = tmp_path / "dry"
    assert main(["bench", "gpu", "--out", str(out), "--dry-run-cpu", "--steps",
                 "env,scan-timing", "--new-backend", "not-merged-yet"]) == 0
    record = json.loads((out / "records" / "10-scan-timing.json").read_text())
    assert record["status"] == "ok", record["note"]
    rows = record["data"]["rows"]
    assert rows == read_rows(out / "logs" / "scan-timing.jsonl")  # written as it went
    steps = [r["step"] for r in rows]
    order = ["plan", "env", "selfcheck", "copy", "race", "passes", "path-a", "done"]
    assert sorted(set(steps), key=steps.index) == order  # the issue's order
    by = {(r["step"], r.get("method") or r.get("backend"), r.get("L"), r.get("pass_")): r
          for r in rows}
    assert by[("selfcheck", "triton", None, None)]["status"] == "ok"
    for length in (64, 128):
        assert by[("race", "not-merged-yet", length, None)]["status"] == "skipped"
        assert "not in this checkout" in by[("race", "not-merged-yet", length, None)]["note"]
        for method in ("triton", "sdpa-causal"):
            row = by[("race", method, length, None)]
            assert row["status"] == "ok" and row["fwd_ms"] > 0 and row["fwdbwd_ms"] > 0
    passes = [r for r in rows if r["step"] == "passes" and r["status"] == "ok"]
    assert [r["pass_"] for r in passes if r["L"] == 128] == ["pass 1 of 2: levels 0-4",
                                                           "pass 2 of 2: levels 5-6"]
    assert all(r["ms"] > 0 and r["ms_no_levels"] > 0 for r in passes)
    assert by[("path-a", "not-merged-yet", 128, None)]["status"] == "missing"
    report = (out / "report.md").read_text()
    assert "## Targets of issue 73" in report and "CPU dry run: no GPU numbers" in report
    assert "Backend `not-merged-yet` against SDPA causal" in report


@pytest.mark.slow  # the Triton interpreter: about 20 s
def test_the_dry_run_measures_the_new_backend_through_its_hooks(tmp_path):
    """With ``--new-backend triton-e2`` (the default), its self-check, each forward pass
    alone and without levels (``triton_e2.bench_passes``) and its path-A rate
    (``path_counts``) are measured, not recorded as missing."""
    pytest.importorskip("triton")
    out = tmp_path / "dry"
    assert main(["bench", "gpu", "--out", str(out), "--dry-run-cpu", "--steps",
                 "env,scan-timing", "--new-backend", "triton-e2"]) == 0
    rows = json.loads((out / "records" / "10-scan-timing.json").read_text())["data"]["rows"]
    mine = [r for r in rows if r.get("backend") == "triton-e2"]
    assert {r["step"] for r in mine} == {"selfcheck", "passes", "path-a"}
    assert all(r["status"] == "ok" for r in mine), mine
    passes = [r for r in mine if r["step"] == "passes"]
    assert [r["pass_"] for r in passes] == ["pass 1 of 1: levels 0-5", "pass 1 of 1: levels 0-6"]
    assert all(r["ms"] > 0 and r["ms_no_levels"] > 0 for r in passes)
    assert 0.0 <= next(r for r in mine if r["step"] == "path-a")["rate"] <= 1.0
