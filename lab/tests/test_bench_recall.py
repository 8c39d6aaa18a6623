"""weirdnet bench recall: the plan, the configs, a real smoke sweep through the command
line (records, report, plot, skipping finished cells), and the intervals it prints."""

from __future__ import annotations

import json
import re

import pytest
import torch

from helpers.train import run_cli
from weirdnet.train import TrainConfig
from weirdnet_lab.recall.command import causal_mechanisms, plan
from weirdnet_lab.sweep.intervals import mean_interval, t95, wilson


def test_plan_and_configs(tmp_path):
    cells = plan(["mqar", "induction"], [64, 128], [16, 32], ["weird-a", "softmax"], 2, 10)
    assert len(cells) == 2 * 2 * 2 * 2 * 2 and len({c.key for c in cells}) == len(cells)
    for cell in cells:
        config = TrainConfig.from_dict(cell.config_dict(tmp_path))
        assert config.model["backbone"]["causal"] is True
        assert config.model["backbone"]["dim"] == cell.width
        assert config.data.options["seq_len"] == cell.length
    assert "dba" not in causal_mechanisms() and "weird-a" in causal_mechanisms()
    with pytest.raises(ValueError, match="no causal form"):
        plan(["mqar"], [64], [16], ["dba"], 1, 10)
    with pytest.raises(ValueError, match="unknown diagnostic"):
        plan(["mqr"], [64], [16], ["softmax"], 1, 10)


def test_a_learning_rate_sweep_keeps_default_keys_and_chooses_by_validation(tmp_path):
    from weirdnet_lab.recall.report import chosen, markdown

    cells = plan(["mqar"], [64], [16], ["softmax"], 2, 10, lrs=[3e-3, 1e-2])
    assert [c.key for c in cells] == [
        "mqar--L64--d16--softmax--s0", "mqar--L64--d16--softmax--s1",
        "mqar--L64--d16--softmax--lr0.01--s0", "mqar--L64--d16--softmax--lr0.01--s1"]
    assert TrainConfig.from_dict(cells[2].config_dict(tmp_path)).optim.lr == 1e-2
    with pytest.raises(ValueError, match="learning rates"):
        plan(["mqar"], [64], [16], ["softmax"], 1, 10, lrs=[0.0])

    def record(val: float, test: float) -> dict:
        return {"status": "done", "results": {"val": {"accuracy": val},
                                              "test": {"accuracy": test}},
                "evaluated": {"test": 1000}}

    # the higher rate wins on validation, although its test accuracy is lower
    done = {cells[0].key: record(0.5, 0.9), cells[1].key: record(0.6, 0.9),
            cells[2].key: record(0.9, 0.7), cells[3].key: record(0.8, 0.7)}
    records, rate, swept = chosen(cells, done)
    assert rate == 1e-2 and swept and [r["results"]["val"]["accuracy"] for r in records] \
        == [0.9, 0.8]
    # seeds that agree exactly keep the test set's binomial interval, not a zero width
    assert "70.0 [69, 71] (lr 0.01)" in markdown(cells, done, [])
    # one rate finished: no choice, no bracket; a tie goes to the default rate
    only = {k: v for k, v in done.items() if "lr0.01" not in k}
    assert chosen(cells, only)[1:] == (3e-3, False)
    tie = {**done, cells[2].key: record(0.55, 0.7), cells[3].key: record(0.55, 0.7)}
    assert chosen(cells, tie)[1] == 3e-3
    assert chosen(cells, {}) == ([], None, False)
    # a mechanism measured in one column only: the others print as not run
    other = plan(["mqar"], [64], [32], ["weird-a"], 1, 10)
    assert "| Weird-Net A | – | – |" in markdown(cells + other, done, [])


def test_intervals():
    low, high = wilson(0.5, 1000)
    assert low == pytest.approx(0.469, abs=1e-3) and high == pytest.approx(0.531, abs=1e-3)
    assert wilson(0.0, 10)[0] == pytest.approx(0.0) and wilson(1.0, 10)[1] == pytest.approx(1.0)
    mean, low, high = mean_interval([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6) and high - mean == pytest.approx(4.303 * 0.1 / 3 ** 0.5)
    assert mean_interval([0.4]) == (0.4, 0.4, 0.4)
    assert t95(17) == pytest.approx(2.110) and t95(30) == pytest.approx(2.042)
    assert t95(60) == pytest.approx(2.000, abs=2e-3)
    assert t95(10 ** 6) == pytest.approx(1.95996, abs=1e-4)
    assert t95(31) < t95(30)  # the expansion continues the table


@pytest.mark.slow
def test_smoke_sweep_records_reports_and_skips(tmp_path):
    args = ["bench", "recall", "--diagnostics", "mqar,selective-copy", "--lengths", "32",
            "--widths", "16", "--mechanisms", "weird-a,softmax", "--steps", "3",
            "--out", str(tmp_path / "results"), "--work", str(tmp_path / "runs")]
    out = run_cli(*args, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    cells = tmp_path / "results" / "recall" / "cells"
    record = json.loads((cells / "mqar--L32--d16--weird-a--s0.json").read_text())
    assert record["status"] == "done" and record["diagnostic"] == "mqar"
    assert 0.0 <= record["results"]["test"]["accuracy"] <= 1.0 and "commit" in record
    report = (tmp_path / "results" / "recall" / "recall.md").read_text()
    assert "## selective-copy (chance 7.1%)" in report and "| Weird-Net A |" in report
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "4 already done, 0 to run" in again.stdout
    listed = run_cli(*args, "--list", cwd=tmp_path)
    assert listed.returncode == 0 and f"records: {cells};" in listed.stdout
    assert "done         mqar--L32--d16--weird-a--s0" in listed.stdout and "4 done" in listed.stdout
    # a narrower command's report still shows every cell measured
    narrow = [a if a != "mqar,selective-copy" else "mqar" for a in args]
    rebuilt = run_cli(*narrow, "--report-only", "--no-plot", cwd=tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    report = (tmp_path / "results" / "recall" / "recall.md").read_text()
    assert "## selective-copy (chance 7.1%)" in report and "4 of 4 cells done" in report


def test_the_zoology_recipe_is_zoologys(tmp_path):
    """--recipe zoology: Zoology's Figure 2 settings in every cell's config."""
    from weirdnet_lab.recall import zoology
    from weirdnet_lab.variants import get_variant

    variants = [get_variant(n) for n in ("transformerpp", "softmax", "weird-a")]
    cells = zoology.plan([64, 128, 256], [64], variants, [0, 4], zoology.LRS, 1, 64)
    assert len(cells) == 3 * 3 * 2 * 4 and len({c.key for c in cells}) == len(cells)
    for cell in cells:
        config = TrainConfig.from_dict(cell.config_dict(tmp_path))
        backbone, options = config.model["backbone"], config.data.options
        assert (backbone["heads"], backbone["d_ff"], backbone["dropout"],
                backbone["init_std"]) == (1, 0, 0.1, 0.02)
        assert backbone["depth"] == (2 if cell.variant.name in zoology.ATTENTION else 4)
        assert backbone["short_conv"] == cell.short_conv
        assert (options["vocab_size"], options["placement"], options["distinct_values"],
                options["num_samples"]) == (8192, "power-law", True, 100_000)
        assert options["num_pairs"] == {64: 4, 128: 8, 256: 16}[cell.length]
        assert config.train.batch_size == (256 if cell.length == 256 else 512)
        assert config.train.early_stop_at == 0.99
        assert config.train.steps == 64 * config.train.eval_every
        if cell.variant.name == "weird-a":
            assert backbone["positions"] == "none"
    with pytest.raises(ValueError, match="cannot hold"):
        zoology.plan([3], [64], variants, [0], [1e-3], 1, 1)
    short = zoology.plan([64], [64], variants[:1], [0], [1e-2], 1, 16)[0]
    assert short.key == "zoology--mqar--L64--d64--transformerpp--lr0.01--e16--s0"
    assert short.key.replace("--e16", "") == cells[3].key  # a budget apart: its own record


@pytest.mark.parametrize("peer", ["mamba", "mamba2", "rwkv"])
def test_the_zoology_recipe_runs_transformers_peers_with_their_own_blocks(tmp_path, peer):
    """A peer (Zoology's Figure 2 runs Mamba and RWKV): 4 of its own blocks at the cell's
    width, no + conv cell (its blocks convolve or shift already), and the deviation
    named; a grid of peers with convolutions only is refused."""
    from weirdnet_lab.recall import zoology
    from weirdnet_lab.variants import get_variant

    variants = [get_variant(n) for n in ("weird-a", peer)]
    cells = zoology.plan([64], [64], variants, [0, 4], [1e-2], 1, 8)
    assert [(c.variant.name, c.short_conv) for c in cells] == [
        ("weird-a", 0), ("weird-a", 4), (peer, 0)]
    config = TrainConfig.from_dict(cells[-1].config_dict(tmp_path))
    assert config.model == {"peer": peer, "backbone": {"dim": 64, "depth": 4}}
    assert config.data.options["placement"] == "power-law"
    assert any("their own blocks" in line and get_variant(peer).label in line
               for line in zoology.deviations(cells))
    assert not any("their own blocks" in line for line in zoology.deviations(cells[:2]))
    with pytest.raises(ValueError, match="peers run without a short convolution"):
        zoology.plan([64], [64], variants[1:], [4], [1e-2], 1, 8)


def test_the_quick_recipe_runs_a_peer_at_its_matched_depth(tmp_path):
    """The quick recipe's widths for a transformers peer: Mamba-2 gets twice the layers
    (one block stands for attention and feed-forward), RWKV the feed-forward width."""
    from weirdnet_lab.variants import get_variant

    (mamba2,) = plan(["mqar"], [64], [32], ["mamba2"], 1, 10)
    (rwkv,) = plan(["mqar"], [64], [32], ["rwkv"], 1, 10)
    assert TrainConfig.from_dict(mamba2.config_dict(tmp_path)).model == {
        "peer": "mamba2", "backbone": {"dim": 32, "depth": 4}}
    assert TrainConfig.from_dict(rwkv.config_dict(tmp_path)).model == {
        "peer": "rwkv", "backbone": {"dim": 32, "depth": 2, "d_ff": 64}}
    assert get_variant("mamba2").depth_factor == 2


def test_a_rate_is_not_run_for_a_model_another_rate_already_settled(tmp_path):
    """settled_at_another_rate: a cell without a record is left out when the same model
    reached 99% validation accuracy at another rate, in a record of its current config;
    not when that record is under 99%, failed, of another config, or of another model;
    and a cell with a record of its own is always kept."""
    from weirdnet_lab.recall import zoology
    from weirdnet_lab.sweep.store import CellStore, config_hash
    from weirdnet_lab.variants import get_variant

    store = CellStore(tmp_path / "results", tmp_path / "runs")
    store.cells_dir.mkdir(parents=True)

    def record(cell, accuracy, status="done", config=None):
        config = config or cell.config_dict(store.work_dir)
        store.record_path(cell).write_text(json.dumps({
            "status": status, "config_hash": config_hash(config),
            "results": {"val": {"accuracy": accuracy}, "test": {"accuracy": accuracy}}}))

    a, b, c, d = (get_variant(n) for n in ("weird-a", "weird-b", "softmax", "ps"))
    cells = zoology.plan([64], [16], [a, b, c, d], [0], [1e-2, 2.2e-3], 1, 2)
    fast = {cell.variant.name: cell for cell in cells if cell.lr == 1e-2}
    record(fast["weird-a"], 0.995)  # settles weird-a at 2.2e-3
    record(fast["weird-b"], 0.985)  # below the bar: its other rate still runs
    record(fast["softmax"], 0.999, status="failed")
    other = zoology.plan([64], [16], [d], [0], [1e-2], 1, 3)[0]  # 3 epochs, not 2
    record(fast["ps"], 0.999, config=other.config_dict(store.work_dir))
    keep, left_out = zoology.settled_at_another_rate(cells, store)
    assert [(c.variant.name, c.lr) for c in left_out] == [("weird-a", 2.2e-3)]
    assert len(keep) == len(cells) - 1 and fast["weird-a"] in keep
    slow_a = next(c for c in cells if c.variant.name == "weird-a" and c.lr == 2.2e-3)
    record(slow_a, 0.5)  # now it has a record of its own: reported, kept
    assert zoology.settled_at_another_rate(cells, store)[1] == []
    assert "1 cells not run" in "\n".join(zoology.deviations(cells, left_out=1))


@pytest.mark.slow  # benchmark children train
def test_zoology_smoke_sweep_gates_its_columns(tmp_path):
    """A tiny sweep through the command line: records, and a report whose column the
    Transformer++ does not solve at this budget says so and ranks nothing."""
    args = ["bench", "recall", "--recipe", "zoology", "--lengths", "64", "--widths", "16",
            "--mechanisms", "transformerpp,weird-a", "--short-convs", "0", "--lrs", "1e-3",
            "--epochs", "1", "--train-sequences", "1024", "--vocab-size", "64",
            "--out", str(tmp_path / "results"), "--work", str(tmp_path / "runs")]
    out = run_cli(*args, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    folder = tmp_path / "results" / "recall-zoology"
    cells = sorted((folder / "cells").glob("*.json"))
    assert len(cells) == 2
    record = json.loads(cells[0].read_text())
    assert 0 < record["cpu_s"] and 0 < record["wall_s"]  # CPU time beside wall time
    assert len(record["commits"]) == 1 and record["commits"][0].startswith(
        str(record["commit"]))
    report = (folder / "recall-zoology.md").read_text()
    assert "budget too small: attention reaches" in report
    assert "1,024 training sequences instead of 100,000" in report
    assert "vocabulary 64 instead of 8,192" in report
    assert "of Zoology's 64, 128, 256" in report  # the lengths not run are named
    assert "widest at 50% (±1.8 points" in report  # 3,000 test sequences
    assert re.search(r"\| Transformer\+\+ \| \d+\.\d \[\d+\.\d, \d+\.\d\]", report)


def test_zoology_sampling_error_is_the_worst_case_binomial_half_width():
    """sampling_error: z_0.975 sqrt(1/4 / n), in points; halves when n grows 4x."""
    from weirdnet_lab.recall.zoology_report import sampling_error
    from weirdnet_lab.sweep.intervals import Z95

    assert abs(sampling_error(3000) - 100 * Z95 * 0.5 / 3000 ** 0.5) < 1e-12
    assert abs(sampling_error(12000) - sampling_error(3000) / 2) < 1e-12


def test_zoology_cell_interval_is_wilson_over_sequences():
    """One record: the Wilson interval over its test sequences, narrow near 100%, as wide
    as the worst case at 50%; several seeds: never narrower than that."""
    from weirdnet_lab.recall.zoology_report import cell_interval, sampling_error

    def record(accuracy: float) -> dict:
        return {"results": {"test": {"accuracy": accuracy}}, "evaluated": {"test": 3000}}

    mean, low, high = cell_interval([record(1.0)])
    assert mean == 1.0 and high == 1.0 and 0.998 < low < 1.0
    mean, low, high = cell_interval([record(0.5)])
    assert abs(100 * (high - low) / 2 - sampling_error(3000)) < 0.01
    _, low2, high2 = cell_interval([record(0.45), record(0.55)])
    assert low2 < low and high2 > high


def test_a_sequence_mean_accuracy_varies_no_more_than_a_bernoulli_draw():
    """Bhatia-Davis, which the Zoology report's intervals rest on: per-sequence mean
    accuracies over dependent queries (whole sequences right or wrong together, or
    queries independent) have variance at most mu (1 - mu)."""
    generator = torch.Generator().manual_seed(0)
    for together in (0.0, 0.5, 1.0):
        skill = torch.rand(20000, 1, generator=generator)  # how hard each sequence is
        shared = torch.rand(20000, 1, generator=generator) < skill
        own = torch.rand(20000, 16, generator=generator) < skill
        pick = torch.rand(20000, 16, generator=generator) < together
        right = torch.where(pick, shared.expand(-1, 16), own).double().mean(dim=1)
        mu = right.mean().item()
        assert right.var().item() <= mu * (1 - mu) + 1e-3


def test_a_cells_running_time_leaves_out_pauses():
    """busy_seconds: the smaller of wall and CPU time; wall time for older records."""
    from weirdnet_lab.sweep.cell import busy_seconds

    assert busy_seconds({"wall_s": 3960.0, "cpu_s": 2220.0}) == 2220.0  # paused 29 min
    assert busy_seconds({"wall_s": 100.0, "cpu_s": 190.0}) == 100.0  # two threads
    assert busy_seconds({"wall_s": 100.0}) == 100.0
    assert busy_seconds({}) is None


def test_a_cells_training_time_survives_pauses_and_resumes():
    """training_seconds: steps at the median steps/s; busy_seconds without them."""
    from weirdnet_lab.sweep.cell import training_seconds

    record = {"steps": 1568, "steps_per_s": 1.09, "wall_s": 822.0, "resumed": True}
    assert training_seconds(record) == 1568 / 1.09
    assert training_seconds({"wall_s": 100.0, "cpu_s": 90.0}) == 90.0


def test_a_cells_training_rate_counts_cpu_time_on_a_cpu():
    """training_rate: steps per CPU-second times threads on a CPU, so another job on the
    machine does not change it; wall-clock steps/s on a GPU and in older records."""
    from weirdnet_lab.sweep.cell import training_rate, training_seconds

    shared = {"steps": 100, "steps_per_s": 0.7, "cpu_steps_per_s": 1.0, "torch_threads": 1,
              "machine": {"device": "cpu"}}  # ran beside another job: 70% of a core
    assert training_rate(shared) == 1.0 and training_seconds(shared) == 100.0
    assert training_rate({**shared, "torch_threads": 2, "cpu_steps_per_s": 0.45}) == 0.9
    assert training_rate({**shared, "machine": {"device": "cuda:0"}}) == 0.7
    assert training_rate({"steps_per_s": 0.7, "machine": {"device": "cpu"}}) == 0.7
    assert training_rate({}) is None


def test_a_resumed_cell_lists_every_commit_it_trained_with(tmp_path):
    """note_code_version: a fresh run starts the log, a resume appends to it; the
    distinct commits come back in order, a dirty checkout marked."""
    from weirdnet_lab.sweep.cell import note_code_version

    log = str(tmp_path / "cell.code.jsonl")
    assert note_code_version(log, {"commit": "aaa", "dirty": False}, resume=False) == ["aaa"]
    assert note_code_version(log, {"commit": "aaa", "dirty": False}, resume=True) == ["aaa"]
    assert note_code_version(log, {"commit": "bbb", "dirty": True}, resume=True) == \
        ["aaa", "bbb+dirty"]
    assert note_code_version(log, {"commit": "ccc", "dirty": False}, resume=False) == ["ccc"]
    assert note_code_version(None, {"commit": "ddd", "dirty": False}, resume=True) == ["ddd"]


def _finished_zoology_records(cells, accuracy_of) -> dict[str, dict]:
    """Finished records, keyed by cell, for the cells whose ``accuracy_of(cell)`` (the
    same on validation and test) is not None."""
    return {c.key: {"status": "done", "steps": 10, "evaluated": {"test": 3000},
                    "results": {"val": {"accuracy": a}, "test": {"accuracy": a}}}
            for c in cells if (a := accuracy_of(c)) is not None}


def test_the_zoology_report_keeps_the_rates_validation_did_not_choose():
    """A model run at several rates: the entry is the rate validation chose, and each other
    rate's test accuracy follows it, so a rate that failed stays in the report; a rate of
    the grid not run yet is named."""
    from weirdnet_lab.recall import zoology
    from weirdnet_lab.recall.zoology_report import markdown
    from weirdnet_lab.variants import get_variant

    cells = zoology.plan([64], [16], [get_variant("weird-b"), get_variant("softmax")], [0],
                         [1e-2, 2.2e-3], 1, 2)
    accuracy = {("weird-b", 1e-2): 0.031, ("weird-b", 2.2e-3): 0.996,
                ("softmax", 1e-2): 0.70}
    done = _finished_zoology_records(cells, lambda c: accuracy.get((c.variant.name, c.lr)))
    report = markdown(cells, done, [])
    assert re.search(r"\| Weird-Net B \| 99\.6 \[[\d.]+, [\d.]+\] \(lr 0\.0022; 0\.01: 3\.1\)",
                     report)
    # one rate finished of the grid's two: the row says which has not run
    assert re.search(r"\| Transformer \| 70\.0 \[[\d.]+, [\d.]+\] "
                     r"\(lr 0\.01; 0\.0022 not run yet\), ", report)


def test_a_zoology_row_of_a_one_rate_grid_names_no_rate():
    from weirdnet_lab.recall import zoology
    from weirdnet_lab.recall.zoology_report import markdown
    from weirdnet_lab.variants import get_variant

    cells = zoology.plan([64], [16], [get_variant("softmax")], [0], [1e-2], 1, 2)
    done = _finished_zoology_records(cells, lambda c: 0.7)
    assert re.search(r"\| Transformer \| 70\.0 \[[\d.]+, [\d.]+\], ", markdown(cells, done, []))


def test_the_zoology_report_says_what_a_second_rate_changed():
    """Per length, over the models that ran at several rates: how many rates' accuracies
    differ beyond both intervals, and the models whose reaching 99% depends on the rate."""
    from weirdnet_lab.recall import zoology
    from weirdnet_lab.recall.zoology_report import markdown
    from weirdnet_lab.variants import get_variant

    variants = [get_variant(name) for name in ("weird-b", "softmax", "linear")]
    cells = zoology.plan([64, 128], [16], variants, [0], [1e-2, 2.2e-3], 1, 2)
    accuracy = {("weird-b", 1e-2, 64): 0.031, ("weird-b", 2.2e-3, 64): 0.996,
                ("softmax", 1e-2, 64): 0.700, ("softmax", 2.2e-3, 64): 0.705,
                ("linear", 1e-2, 64): 0.20, ("linear", 2.2e-3, 64): 0.40,
                ("softmax", 1e-2, 128): 0.5}
    done = _finished_zoology_records(
        cells, lambda c: accuracy.get((c.variant.name, c.lr, c.length)))
    report = markdown(cells, done, [])
    section = report.split("## What a second learning rate changed")[1]
    assert ("L = 64: 3 models ran at more than one rate; the rates' test accuracies "
            "differ beyond both 95% intervals in 2 (Linear Trans., Weird-Net B), and whether "
            "the model reaches 99% depends on the rate in 1 (Weird-Net B: 99.6% at 0.0022, "
            "3.1% at 0.01).") in section
    assert "L = 128" not in section  # no model there ran at two rates
    one_rate = _finished_zoology_records(cells, lambda c: 0.5 if c.lr == 1e-2 else None)
    assert "second learning rate" not in markdown(cells, one_rate, [])
