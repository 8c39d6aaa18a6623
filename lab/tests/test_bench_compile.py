"""``weirdnet bench compile``: its workloads, one real measurement, and its report."""

import tomllib
from pathlib import Path

import pytest

from weirdnet.cli import main
from weirdnet.models import get_preset
from weirdnet_lab import compile as compile_bench

REPO = Path(__file__).resolve().parents[2]


def test_quickstart_workload_is_the_quickstart_config():
    config = tomllib.loads((REPO / "configs" / "quickstart.toml").read_text())
    backbone = get_preset(config["model"]["preset"]).config["backbone"]
    want = {k: backbone[k] for k in ("pattern", "dim", "depth", "d_ff", "heads")}
    want |= {"batch": config["train"]["batch_size"],
             "length": config["data"]["options"]["seq_len"]}
    assert compile_bench.QUICKSTART == want


@pytest.mark.slow  # torch.compile with inductor
@pytest.mark.parametrize("model", ["lm", "classifier"])
def test_measure_eager_and_compiled_agree(model):
    spec = {"model": model, "pattern": "B", "mechanism": "weird-a", "dim": 16, "depth": 2,
            "d_ff": 32, "heads": 2, "batch": 2, "length": 24, "steps": 1, "warmup": 0,
            "workload": "tiny"}
    eager = compile_bench.measure({**spec, "mode": "eager"})
    compiled = compile_bench.measure({**spec, "mode": "compiled"})
    assert eager["status"] == compiled["status"] == "ok"
    assert compiled["first_loss"] == pytest.approx(eager["first_loss"], rel=1e-5)
    summary = compile_bench.summarize([eager, compiled])
    assert summary[0]["speedup"] > 0


def test_report_marks_a_failed_cell():
    rows = [{"workload": "quickstart", "mode": "eager", "status": "ok", "steps_per_s": 2.0,
             "first_loss": 5.0, "first_step_s": 1.0},
            {"workload": "quickstart", "mode": "compiled", "status": "error",
             "error": "Unsupported: graph break"}]
    machine = {"cpu_model": "x", "usable_cores": 2, "torch": "t", "weirdnet": "w",
               "date": "d", "command": "weirdnet bench compile"}
    text = compile_bench.markdown({"machine": machine, "rows": rows,
                                   "summary": compile_bench.summarize(rows),
                                   "settings": {"steps": 1, "warmup": 0,
                                                "workloads": ["quickstart"]}})
    assert "| quickstart | 2.00 | error: Unsupported: graph break | – |" in text


def test_unknown_workload_is_a_one_line_error(capsys, tmp_path):
    assert main(["bench", "compile", "--workloads", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown workload nope" in capsys.readouterr().err
