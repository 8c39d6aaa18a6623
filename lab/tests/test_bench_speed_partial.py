"""``weirdnet bench speed`` stopped part-way: the cells measured before the stop signal
are kept as a partial report beside (never over) the full one, a later full run removes
it, and ``bench gpu``'s speed step keeps them when its time box runs out.  The cells are
faked (each is a child process in real runs; lab/tests/test_bench_signals.py sends real
signals to real ones)."""

from __future__ import annotations

import json
import signal

import pytest

from weirdnet import cli
from weirdnet.run import Interrupted
from weirdnet_lab import speed

ARGS = ["bench", "speed", "--lengths", "64", "128", "--mechanisms", "weird-a,dba",
        "--dim", "16", "--depth", "1", "--d-ff", "32", "--heads", "2", "--batch", "2",
        "--steps", "1", "--warmup", "0"]


class FakeCells:
    """Stands in for :func:`speed._run_child`: each call is one measured cell, in order;
    call number ``stop_at`` is cut by SIGTERM instead."""

    def __init__(self, stop_at: int | None = None):
        self.calls: list[tuple[str, int]] = []
        self.stop_at = stop_at

    def __call__(self, spec: dict, timeout: float) -> dict:
        self.calls.append((spec["mechanism"], spec["length"]))
        if len(self.calls) == self.stop_at:
            raise Interrupted(signal.SIGTERM)
        step_s = 0.001 * spec["length"] * (2 if spec["mechanism"] == "softmax" else 1)
        return {"mechanism": spec["mechanism"], "length": spec["length"], "status": "ok",
                "step_s": step_s, "steps_per_s": 1 / step_s, "memory_mib": 1.0 + len(
                    self.calls), "parameters": 1000}


def test_cells_run_by_length_with_the_reference_first(monkeypatch, tmp_path):
    cells = FakeCells()
    monkeypatch.setattr(speed, "_run_child", cells)
    assert cli.main([*ARGS, "--out", str(tmp_path)]) == 0
    assert cells.calls == [("softmax", 64), ("weird-a", 64), ("dba", 64),
                           ("softmax", 128), ("weird-a", 128), ("dba", 128)]
    rows = json.loads((tmp_path / "speed_cpu.json").read_text())["rows"]
    # the report keeps the models in the order asked, the reference last
    assert [(r["mechanism"], r["length"]) for r in rows] == [
        ("weird-a", 64), ("weird-a", 128), ("dba", 64), ("dba", 128), ("softmax", 64),
        ("softmax", 128)]
    assert not list(tmp_path.glob("*.partial.*"))


def test_a_stopped_run_keeps_its_cells_beside_the_full_report(monkeypatch, tmp_path,
                                                              capsys):
    full = {"speed_cpu.json": '{"an": "earlier full report"}\n',
            "speed_cpu.md": "# an earlier full report\n"}
    for name, text in full.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(speed, "_run_child", FakeCells(stop_at=4))
    assert cli.main([*ARGS, "--out", str(tmp_path)]) == 143
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("weirdnet bench: interrupted by SIGTERM; the 3 cell(s) measured before "
                           "it were written to"), line
    for name, text in full.items():  # never replaced by a partial one
        assert (tmp_path / name).read_text() == text
    result = json.loads((tmp_path / "speed_cpu.partial.json").read_text())
    assert result["partial"] is True
    status = {(r["mechanism"], r["length"]): r["status"] for r in result["rows"]}
    assert status == {("weird-a", 64): "ok", ("weird-a", 128): "not run (stopped by SIGTERM)",
                      ("dba", 64): "ok", ("dba", 128): "not run (stopped by SIGTERM)",
                      ("softmax", 64): "ok", ("softmax", 128): "not run (stopped by SIGTERM)"}
    text = (tmp_path / "speed_cpu.partial.md").read_text()
    assert "**Partial report: the run was stopped; 3 of its 6 cells were measured**" in text
    assert "| Weird-Net A | 2.00 | not run |" in text  # the ratio at 64 is whole
    assert "![speed and memory]" not in text
    assert not (tmp_path / "speed_cpu.png").exists()
    assert [p.name for p in tmp_path.glob(".*") if p.name != ".lock"] == []

    # a full run replaces the partial report
    monkeypatch.setattr(speed, "_run_child", FakeCells())
    assert cli.main([*ARGS, "--out", str(tmp_path)]) == 0
    assert not list(tmp_path.glob("*.partial.*"))
    assert len(json.loads((tmp_path / "speed_cpu.json").read_text())["rows"]) == 6


def test_a_stop_before_any_cell_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(speed, "_run_child", FakeCells(stop_at=1))
    assert cli.main([*ARGS, "--out", str(tmp_path)]) == 143
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]


def test_only_a_partial_report_of_ours_is_removed(monkeypatch, tmp_path):
    """A ``*.partial.json`` without the mark is someone else's: the full run leaves it."""
    (tmp_path / "speed_cpu.partial.json").write_text('{"mine": true}\n')
    (tmp_path / "speed_cpu.partial.md").write_text("my notes\n")
    monkeypatch.setattr(speed, "_run_child", FakeCells())
    assert cli.main([*ARGS, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "speed_cpu.partial.json").read_text() == '{"mine": true}\n'
    assert (tmp_path / "speed_cpu.partial.md").read_text() == "my notes\n"


@pytest.mark.parametrize("partial", [True, False])
def test_gpu_speed_step_keeps_a_partial_report_when_its_box_runs_out(tmp_path, partial):
    from weirdnet_lab.gpu import plan as gpu_plan
    from weirdnet_lab.gpu import steps as gpu_steps

    plan = gpu_plan.Plan(out=tmp_path, mode="quick", device="cuda", steps=list(gpu_plan.STEPS),
                    boxes=dict(gpu_plan.TIME_BOXES_S["quick"]))
    step = gpu_plan.Step(plan, "speed")
    rows = [{"mechanism": "softmax", "length": 1024, "status": "ok", "steps_per_s": 9.0,
             "memory_mib": 5.0},
            {"mechanism": "weird-a", "length": 1024, "status": "not run (stopped by "
             "SIGTERM)"}]

    def child(command, what, env=None):
        if partial:
            (tmp_path / "speed").mkdir()
            (tmp_path / "speed" / "speed_cuda.partial.json").write_text(json.dumps(
                {"settings": {"dim": 256}, "rows": rows, "partial": True}))
        raise gpu_plan.StepTimeout("speed was still running at the end of the 90 s time box")

    step.child = child
    if not partial:
        with pytest.raises(gpu_plan.StepTimeout):
            gpu_steps._step_speed(step)
        return
    status, note = gpu_steps._step_speed(step)
    assert status == "timed_out" and "the 1 cell(s) measured before it are kept" in note
    assert step.data["rows"] == rows and step.data["partial"] is True
    assert step.data["file"] == "speed/speed_cuda.partial.json"
