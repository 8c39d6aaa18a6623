"""bench gpu's issue-62 steps (kernels, models, decode-graph): the CPU dry run writes
their records and the report's target list, and each target's PASS/FAIL is computed
from the measured numbers."""

import json

import pytest

from weirdnet.cli import main
from weirdnet_lab.gpu.plan import QUICK_STEPS, TIME_BOXES_S
from weirdnet_lab.gpu.report import issue62_targets
from weirdnet_lab.scan_cost.budgets import NEW_BACKEND


def _kernel_rows(scan_fwd_16k: float) -> list[dict]:
    rows = []
    for method, fwd, both, mib in ((NEW_BACKEND, scan_fwd_16k, 3.0, 100.0),
                                   ("sdpa-causal", 9.0, 33.0, 100.0)):
        for length, scale in ((1024, 0.05), (16384, 1.0), (65536, 4.0)):
            rows.append({"method": method, "L": length, "fwd_ms": fwd * scale,
                         "fwdbwd_ms": both * scale, "extra_mib": mib, "error": None})
    return rows


def test_the_targets_pass_or_fail_from_the_numbers():
    copy = [{"L": 16384, "ms": 0.3}]
    fast = issue62_targets([{"step": "kernels",
                             "data": {"rows": _kernel_rows(0.5), "copy": copy}}])
    assert fast[0] == "- scan fwd at 16K <= 0.6 ms (ms): 0.500 — PASS"
    assert fast[1].endswith("0.600 — PASS")  # 0.3 / 0.5 of the copy bandwidth
    slow = issue62_targets([{"step": "kernels",
                             "data": {"rows": _kernel_rows(6.6), "copy": copy}}])
    assert slow[0].endswith("6.600 — FAIL") and slow[1].endswith("— FAIL")
    models = {"step": "models", "data": {"rows": [
        {"mechanism": m, "length": n, "status": "ok", "steps_per_s": v}
        for m, n, v in (("weird-a", 4096, 3.0), ("transformerpp", 4096, 1.0),
                        ("fla-gated-deltanet", 4096, 4.0))]}}
    lines = issue62_targets([models])
    assert lines[0].endswith("3.000 — PASS") and lines[1].endswith("0.750 — FAIL")
    assert lines[2].endswith("not measured")  # 16K was not run


def test_quick_fits_eight_minutes():
    assert sum(TIME_BOXES_S["quick"][s] for s in QUICK_STEPS) <= 8 * 60


@pytest.mark.slow
def test_the_dry_run_of_the_issue62_steps_writes_records_and_targets(tmp_path):
    out = tmp_path / "dry"
    assert main(["bench", "gpu", "--out", str(out), "--dry-run-cpu", "--steps",
                 "env,kernels,models,decode-graph"]) == 0
    records = sorted(p.name for p in (out / "records").glob("*.json"))
    assert records == ["1-env.json", "4-kernels.json", "6-models.json",
                       "8-decode-graph.json"]
    kernels = json.loads((out / "records" / "4-kernels.json").read_text())
    assert kernels["status"] == "ok"
    methods = {r["method"] for r in kernels["data"]["rows"]}
    assert methods == {"triton", NEW_BACKEND, "sdpa-causal"}
    models = json.loads((out / "records" / "6-models.json").read_text())["data"]
    assert {r["mechanism"] for r in models["rows"]} >= {"weird-a", "transformerpp"}
    graph = json.loads((out / "records" / "8-decode-graph.json").read_text())["data"]
    assert [r["cuda_graph"] for r in graph["runs"]] == [False, True]
    text = (out / "report.md").read_text()
    assert "## Targets of issue 62" in text and "5,000 tokens/s" in text
    assert "CPU dry run: no GPU numbers" in text
