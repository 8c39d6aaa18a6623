"""The ``weirdnet`` command line and the ``bench scan`` benchmark (a --quick run)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from weirdnet import __version__
from weirdnet.cli import main
from weirdnet.run import write_atomic
from weirdnet_lab.opbench import analysis
from weirdnet_lab.opbench.scan import DEFAULT_METHODS, LOG_W

pytestmark = pytest.mark.slow  # benchmark child processes


def _help_text(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_help_texts(capsys):
    assert "bench" in _help_text(["--help"], capsys)
    assert "scan" in _help_text(["bench", "--help"], capsys)
    text = _help_text(["bench", "scan", "--help"], capsys)
    for option in ("--lengths", "--methods", "--dtype", "--device", "--quick", "--out"):
        assert option in text
    assert __version__ in _help_text(["--version"], capsys)


def test_missing_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_python_m_weirdnet():
    out = subprocess.run([sys.executable, "-m", "weirdnet", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"weirdnet {__version__}"


def test_unknown_method_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "scan", "--methods", "scan,nope"])
    assert exc.value.code == 2
    assert "nope" in capsys.readouterr().err


def test_quick_run_writes_report(tmp_path, capsys):
    assert main(["bench", "scan", "--quick", "--out", str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    md, js = tmp_path / "scan_cpu.md", tmp_path / "scan_cpu.json"
    assert md.read_text() == stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "scan_cpu.json",
                                                          "scan_cpu.md"]

    doc = json.loads(js.read_text())
    assert doc["quick"] is True  # so no later --quick run mistakes it for full results
    rows = doc["results"]
    assert {(r["method"], r["L"]) for r in rows} == {
        (m + sfx, L) for m in DEFAULT_METHODS for L in (64, 128)
        for sfx in (LOG_W.classes.values() if m.startswith("scan") else [""])}
    for r in rows:
        assert r["error"] is None, r
        assert r["fwd_ms"] > 0 and r["fwdbwd_ms"] > 0
        assert len(r["fwd_times_ms"]) == len(r["fwdbwd_times_ms"]) == r["repeats"] == 1
        assert r["memory"]["baseline_is_high_water"], r["memory"]
        assert r["mem_mib"] is not None
    assert [e["L"] for e in doc["ratios"]] == [64, 128]
    assert doc["targets"] == []  # targets are at L = 1024 and 16384 only
    for key in ("cpu_model", "usable_cores", "torch", "python", "torch_threads", "date",
                "allocator", "command"):
        assert doc["machine"][key] not in (None, "")
    assert doc["machine"]["command"] == f"weirdnet bench scan --quick --out {tmp_path}"
    assert doc["config"]["dtype"] == "float32" and doc["config"]["batch"] == 1

    text = md.read_text()
    assert "| 64 | weird_scan causal, wide log_w |" in text
    assert "| 64 | weird_scan causal, typical log_w |" in text
    assert "| 128 | SDPA non-causal |" in text
    assert "## Ratios" in text and "## Targets" not in text


@pytest.mark.parametrize("choice,methods", [
    ("typical", ["scan-typical", "scan-rev-typical", "sdpa-causal"]),
    ("wide", ["scan", "scan-rev", "sdpa-causal"]),
    ("both", ["scan-typical", "scan", "scan-rev-typical", "scan-rev", "sdpa-causal"]),
])
def test_log_w_option_runs_each_input_class(tmp_path, capsys, choice, methods):
    """``--log-w`` as ``--help`` shows it: each weird_scan method runs once per chosen
    class, on its own log_w (the wide class is WeirdAttention's default initialisation)."""
    assert "--log-w {typical,wide,both}" in _help_text(["bench", "scan", "--help"], capsys)
    argv = ["bench", "scan", "--quick", "--lengths", "64", "--no-memory", "--log-w", choice,
            "--methods", "scan,scan-rev,sdpa-causal", "--out", str(tmp_path)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    doc = json.loads((tmp_path / "scan_cpu.json").read_text())
    assert [r["method"] for r in doc["results"]] == methods
    assert all(r["error"] is None and r["fwdbwd_ms"] > 0 for r in doc["results"])
    assert doc["config"]["variant"] == choice
    assert f"log_w classes (--log-w {choice})" in text
    for cls in ("typical", "wide"):
        assert (f"| 64 | weird_scan causal, {cls} log_w |" in text) == (choice in (cls, "both"))


def test_log_w_option_refuses_an_unknown_class(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "scan", "--log-w", "steep"])
    assert exc.value.code == 2
    assert "--log-w: invalid choice: 'steep'" in capsys.readouterr().err


def test_log_w_classes_draw_different_log_w():
    """typical: cumsum(0.1 N(0, 1)); wide: cumsum(N(0, 1)), ten times the steps."""
    from weirdnet_lab.opbench.methods import Shape
    from weirdnet_lab.opbench.scan import methods

    shape = Shape(1, 64, 8)
    typical = methods()["scan-typical"].build(shape, torch.float64, torch.device("cpu"), 0)
    wide = methods()["scan"].build(shape, torch.float64, torch.device("cpu"), 0)
    assert torch.allclose(wide.inputs[2].diff(dim=0), 10 * typical.inputs[2].diff(dim=0))


def _row(method: str, L: int, ms: float, mib: float) -> dict:
    return {"method": method, "L": L, "fwd_ms": ms / 3, "fwdbwd_ms": ms, "mem_mib": mib}


def test_targets_pass_fail_and_unmeasured():
    rows = [
        _row("scan", 1024, 50.0, 40.0), _row("sdpa-causal", 1024, 40.0, 20.0),
        _row("scan", 16384, 1000.0, 500.0), _row("sdpa-causal", 16384, 14000.0, 200.0),
    ]
    ratios = analysis.compute_ratios(rows)
    assert ratios[1]["fwdbwd_speedup_causal"] == pytest.approx(14.0)
    assert ratios[1]["fwdbwd_speedup_reverse"] is None  # no scan-rev rows
    verdicts = {t["key"]: t["passed"] for t in analysis.evaluate_targets(ratios)}
    assert verdicts == {"speed_16k": True, "parity_1k": False, "memory_16k": True,
                        "backward_cost_16k": True}  # fwd+bwd 3x its forward
    slow_backward = [*rows[:2], _row("scan", 16384, 1000.0, 500.0) | {"fwd_ms": 100.0},
                     rows[3]]
    costs = analysis.compute_ratios(slow_backward[1:])
    assert costs[-1]["backward_cost_wide"] == pytest.approx(10.0)
    assert costs[-1]["backward_cost_typical"] is None  # no scan-typical rows
    assert not {t["key"]: t["passed"] for t in analysis.evaluate_targets(costs)}[
        "backward_cost_16k"]
    only_1k = analysis.evaluate_targets(analysis.compute_ratios(rows[:2]))
    assert [t["key"] for t in only_1k] == ["parity_1k"]


def test_write_atomic_replaces_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "x.md"
    write_atomic(path, "one")
    write_atomic(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["x.md"]
