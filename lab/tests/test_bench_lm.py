"""weirdnet bench lm: equal-compute language modelling (smoke size), its evaluation
interval and its report's comparisons."""

from __future__ import annotations

import dataclasses
import json

import pytest

from helpers.train import run_cli
from weirdnet.cli import main
from weirdnet.data import DataMissingError


def _corpus_or_skip() -> None:
    """Skip (with the reason and how to get it) where the wiki-xml corpus is missing: it
    comes from the gensim wheel, which the dev install does not bring."""
    from weirdnet_lab.lm.command import require_corpus

    try:
        require_corpus()
    except DataMissingError as error:
        pytest.skip(f"bench lm trains on the wiki-xml corpus: {error}")


@pytest.mark.slow
def test_equal_compute_lm_smoke(tmp_path):
    """weirdnet bench lm: calibration, timed runs with a common evaluation interval, the
    report from records, and a rerun that trains nothing."""
    _corpus_or_skip()
    args = ["bench", "lm", "--contexts", "64", "--mechanisms", "weird-a,softmax",
            "--minutes", "0.01", "--quick", "--out", str(tmp_path / "results"),
            "--work", str(tmp_path / "runs")]
    out = run_cli(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    cells = tmp_path / "results" / "lm-quick" / "cells"
    calibration = json.loads((cells / "calibrate--weird-a--L64.json").read_text())
    timed = json.loads((cells / "weird-a--L64--m0.01--s0.json").read_text())
    assert calibration["steps_per_s"] > 0 and timed["steps"] == 20
    assert calibration["cpu_steps_per_s"] > 0
    assert timed["evaluations"] and timed["evaluations"][0]["step"] == 2
    assert timed["config"]["train"]["batch_size"] == 1024 // 64
    report = (tmp_path / "results" / "lm-quick" / "lm.md").read_text()
    # 0.01 minutes fit fewer than 20 steps: each run trains 20 and is marked
    assert "| Weird-Net A ² | 0.795M (+0.2%) | 1 | 20 |" in report
    assert "² fewer than 20 steps fit in 0.01 minutes" in report
    assert "val bits/byte at step 20" in report
    # the minutes are the calibrations' clock, and the report names its machine
    assert "Steps/s, bytes/s and minutes are the calibrations'" in report
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "2 already done, 0 to run" in again.stdout
    # --recalibrate measures the rates again from scratch; the timed runs keep their
    # records while their step counts stay the same (here the 20-step floor)
    one = [a if a != "weird-a,softmax" else "weird-a" for a in args]
    redo = run_cli(*one, "--recalibrate", cwd=tmp_path)
    assert redo.returncode == 0, redo.stderr[-3000:]
    assert "calibration: 1 cells, 0 already done, 1 to run" in redo.stdout
    assert "lm: 1 cells, 1 already done, 0 to run" in redo.stdout
    again = json.loads((cells / "calibrate--weird-a--L64.json").read_text())
    assert again["resumed"] is False and again["wall_s"] != calibration["wall_s"]
    # a CPU calibration recorded before its CPU-time rate existed is measured again
    path = cells / "calibrate--weird-a--L64.json"
    older = json.loads(path.read_text())
    del older["cpu_steps_per_s"]
    path.write_text(json.dumps(older))
    redo = run_cli(*one, cwd=tmp_path)
    assert redo.returncode == 0, redo.stderr[-3000:]
    assert "calibration: 1 cells, 0 already done, 1 to run" in redo.stdout
    assert json.loads(path.read_text())["cpu_steps_per_s"] > 0
    # a command naming fewer models still reports every stored run
    report = (tmp_path / "results" / "lm-quick" / "lm.md").read_text()
    assert "| Weird-Net A ² |" in report and "| Transformer ² |" in report
    # --report-only names a model never calibrated: the stored runs are still reported
    more = [a if a != "weird-a,softmax" else "weird-a,softmax,linear" for a in args]
    shown = run_cli(*more, "--report-only", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "| Weird-Net A ² |" in (tmp_path / "results" / "lm-quick" / "lm.md").read_text()
    refused = run_cli(*args, "--recalibrate", "--report-only", cwd=tmp_path)
    assert refused.returncode == 2 and "--recalibrate" in refused.stderr


def test_a_run_held_to_the_step_floor_is_marked_as_trained_longer():
    """A model too slow for MIN_STEPS steps in its minutes trains MIN_STEPS (more minutes
    than the others), and the report marks it."""
    from weirdnet_lab.lm.command import MIN_STEPS, calibration_cells, timed_cells
    from weirdnet_lab.lm.report import _over_budget

    calibrated = calibration_cells(["weird-a", "rwkv"], [4096])
    rates = {calibrated[0].key: 1.0, calibrated[1].key: 0.014}  # 600 and 8.4 steps
    fast, slow = timed_cells(calibrated, rates, 10.0, 1)
    assert (fast.steps, slow.steps) == (600, MIN_STEPS)
    assert _over_budget(slow, slow.steps, 0.014)
    assert not _over_budget(fast, fast.steps, 1.0)


def test_equal_minutes_are_counted_on_the_calibrations_clock():
    """A timed run's minutes are its calibration's (that rate set its steps), wherever
    it trained; calibrations from two machines are flagged under the table."""
    from weirdnet_lab.lm.command import calibration_cells, timed_cells
    from weirdnet_lab.lm.report import _clock_note, budget_rate

    def run(rate, clock):
        return {"steps": 600, "steps_per_s": 0.3, "calibrated_rate": rate,
                "calibrated_on": clock, "machine": {"cpu_model": "B", "usable_cores": 2}}

    assert budget_rate(run(1.0, "A, 2 cores")) == 1.0
    assert budget_rate({"steps_per_s": 0.3}) == 0.3  # no calibration joined: its own
    calibrated = calibration_cells(["weird-a", "softmax"], [1024])
    cells = timed_cells(calibrated, {c.key: 1.0 for c in calibrated}, 10.0, 1)
    one = _clock_note(cells, {c.key: run(1.0, "A, 2 cores") for c in cells})
    assert "measured on: A, 2 cores. The runs trained on: B, 2 cores." in one[1]
    assert len(one) == 2
    two = _clock_note(cells, {cells[0].key: run(1.0, "A, 2 cores"),
                              cells[1].key: run(1.0, "C, 2 cores")})
    assert "more than one machine" in two[-1]
    steps = calibration_cells(["weird-a", "softmax"], [1024])
    steps = [dataclasses.replace(c, seed=0, steps=100, minutes=None, equal_steps=True)
             for c in steps]
    assert _clock_note(steps, {c.key: run(None, None) for c in steps}) == []
    mixed = {steps[0].key: run(None, None),
             steps[1].key: {**run(None, None), "machine": {"cpu_model": "D"}}}
    assert "B, 2 cores: Weird-Net A; D, ? cores: Transformer." in _clock_note(steps, mixed)[1]


def test_equal_compute_lm_evaluation_interval_does_not_depend_on_the_models_named():
    """E (the common evaluation interval) comes from every model calibrated at that
    context, so naming fewer models keeps the stored runs' configs."""
    from weirdnet_lab.lm.command import calibration_cells, timed_cells

    every = calibration_cells(["weird-a", "softmax"], [1024])
    rates = {every[0].key: 0.8, every[1].key: 0.2}  # 480 and 120 steps in 10 minutes
    alone = timed_cells(every[:1], rates, 10.0, 2, peers=every)
    assert [(c.steps, c.eval_every, c.seed) for c in alone] == [(480, 15, 0), (480, 15, 1)]
    assert timed_cells(every[:1], rates, 10.0, 1)[0].eval_every == 60


def test_timed_runs_evaluate_on_a_doubling_grid_unless_their_context_has_even_runs(
        tmp_path):
    """A context's timed runs take the evaluation spacing of the runs stored there (those
    made before ``train.eval_spacing`` are even, and keep their config hashes), else the
    doubling grid; the report compares them at the last step every run evaluated."""
    from weirdnet.train import eval_due
    from weirdnet_lab.lm.command import calibration_cells, stored_spacing, timed_cells
    from weirdnet_lab.lm.report import last_common_step
    from weirdnet_lab.sweep.store import CellStore

    store = CellStore(tmp_path, tmp_path / "runs")
    assert stored_spacing(store, {1024, 4096}, 10.0) == {1024: "doubling", 4096: "doubling"}
    every = calibration_cells(["weird-a", "softmax"], [1024, 4096])
    rates = {c.key: 0.8 if c.variant.name == "weird-a" else 0.2 for c in every}
    cells = timed_cells(every, rates, 10.0, 1, every, {1024: "even", 4096: "doubling"})
    by_context = {c.context: c for c in cells if c.variant.name == "weird-a"}
    even = by_context[1024].config_dict(tmp_path)["train"]
    doubling = by_context[4096].config_dict(tmp_path)["train"]
    assert "eval_spacing" not in even and (even["eval_every"], even["steps"]) == (15, 480)
    assert doubling["eval_spacing"] == "doubling" and doubling["eval_every"] == 15
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "x.json").write_text(json.dumps(
        {"kind": "minutes", "minutes": 10.0, "context": 1024, "config": {"train": even}}))
    assert stored_spacing(store, {1024, 4096}, 10.0) == {1024: "even", 4096: "doubling"}
    assert stored_spacing(store, {1024}, 5.0) == {1024: "doubling"}  # other minutes

    def record(steps):  # a run's evaluations on the doubling grid of E = 15
        return {"cpu_steps_per_s": 1.0, "evaluations": [
            {"step": s, "metrics": {"bpc": 1.0}} for s in range(1, steps + 1)
            if eval_due(s, steps, 15, "doubling")]}

    # 121 steps (its last, 121, evaluated by it alone) and 480: compared at step 120
    assert last_common_step([record(121), record(480)]) == 120
    assert last_common_step([]) == 0


def test_equal_compute_lm_report_decides_only_outside_the_intervals():
    """The lm report's comparisons: decided with seeds whose spread is small against
    the gap, undecided with one seed."""
    from weirdnet_lab.lm.command import LMCell
    from weirdnet_lab.lm.report import comparisons
    from weirdnet_lab.variants import get_variant

    cells = [LMCell(get_variant(name), 1024, seed, 100, 10, 10.0)
             for name in ("weird-a", "softmax", "linear") for seed in range(3)]
    bpc = {"weird-a": [2.50, 2.52, 2.55], "softmax": [3.80, 3.85, 3.90], "linear": [3.0]}
    done = {c.key: {"results": {"test": {"bpc": bpc[c.variant.name][c.seed]}}}
            for c in cells if c.seed < len(bpc[c.variant.name])}
    table = "\n".join(comparisons(cells, done))
    assert "| Weird-Net A vs Transformer | 2.523 [" in table and "| **lower** |" in table
    assert "| Linear Trans. vs Transformer | 3.000 vs 3.850 [" in table
    assert "undecided (one seed)" in table


def test_missing_corpus_is_one_line_with_the_install_command_and_status_2(tmp_path,
                                                                          monkeypatch,
                                                                          capsys):
    """Without gensim (the wiki-xml corpus) nothing trains: the reason and the command
    that installs it, on one line, exit status 2 (it was exit 1 with no message, the
    reason only in a failed cell's record)."""
    from weirdnet.data.sources import packages

    monkeypatch.setenv("WEIRDNET_DATA", str(tmp_path / "data"))  # no cached corpus
    monkeypatch.setattr(packages, "_installed", lambda name: None)  # gensim not installed
    status = main(["bench", "lm", "--contexts", "64", "--mechanisms", "weird-a",
                   "--minutes", "0.01", "--quick", "--out", str(tmp_path / "results"),
                   "--work", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("weirdnet bench lm: gensim==4.4.0 ")
    assert "pip install --no-deps gensim==4.4.0" in lines[0]
    assert not (tmp_path / "results" / "lm-quick" / "cells").exists()  # no failed record


def test_every_model_is_matched_to_the_reference_within_five_percent():
    """bench lm's models have the reference's non-embedding parameters within 5%, by
    their feed-forward width (Mamba and Mamba-2: their number of layers); the count
    leaves out the embedding tables, whose size follows the context."""
    from weirdnet_lab import matching
    from weirdnet_lab.lm.command import MECHANISMS
    from weirdnet_lab.lm.models import REFERENCE_MODEL, model_table, reference_parameters

    target = reference_parameters()
    assert target == matching.count(REFERENCE_MODEL)
    for name in MECHANISMS:
        table, count = model_table(name)
        assert abs(count - target) <= 0.05 * target, name
        assert count == matching.count(table)
    assert model_table("softmax")[0]["backbone"]["d_ff"] == 512  # the reference itself
    assert model_table("mamba2")[0]["backbone"]["depth"] != 8  # layers are its knob
    assert model_table("transformerpp")[0]["backbone"]["d_ff"] < 512  # SwiGLU: 3 matrices
    # where its knob cannot reach the count, the width is searched too
    table, count = matching.matched({"peer": "mamba2", "backbone": {"dim": 32, "depth": 2}},
                                    17_152)
    assert abs(count - 17_152) <= 0.05 * 17_152 and table["backbone"]["dim"] != 32
    with pytest.raises(ValueError, match="more than 5%"):  # one layer is more than it takes
        matching.matched({"peer": "mamba2", "backbone": {"dim": 16, "depth": 1}}, 100)


def test_embedding_tables_are_left_out_of_the_matched_count():
    from weirdnet.models import WeirdNetLM

    model = WeirdNetLM({"backbone": {"dim": 16, "depth": 1, "heads": 2, "vocab_size": 50,
                                     "max_len": 30, "causal": True}})
    tables = 50 * 16 + 30 * 16  # tokens and learned positions (the head is tied)
    assert model.num_parameters() - model.num_parameters(embeddings=False) == tables


@pytest.mark.slow
def test_equal_steps_lm_smoke(tmp_path):
    """bench lm --steps: no calibration, every model the same steps (a transformers peer
    among them), evaluated every steps / 8, its parameters in the record and report."""
    _corpus_or_skip()
    pytest.importorskip("transformers")
    args = ["bench", "lm", "--contexts", "64", "--mechanisms", "weird-a,llama",
            "--steps", "8", "--quick", "--out", str(tmp_path / "results"),
            "--work", str(tmp_path / "runs"), "--no-plot"]
    out = run_cli(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    assert "calibration:" not in out.stdout and out.stdout.startswith("lm: 2 cells")
    cells = tmp_path / "results" / "lm-quick" / "cells"
    record = json.loads((cells / "llama--L64--n8--s0.json").read_text())
    assert record["kind"] == "steps" and record["steps"] == 8
    assert [e["step"] for e in record["evaluations"]][:2] == [1, 2]
    assert record["config"]["model"]["peer"] == "llama"
    assert record["non_embedding_parameters"] > 0 and record["machine"]["transformers"]
    report = (tmp_path / "results" / "lm-quick" / "lm.md").read_text()
    assert "## Equal steps (8 steps), context 64 bytes" in report
    assert "| Llama (transformers) |" in report and "Weird-Net A vs Llama" in report
    refused = run_cli(*args, "--recalibrate", cwd=tmp_path)
    assert refused.returncode == 2 and "--recalibrate" in refused.stderr
