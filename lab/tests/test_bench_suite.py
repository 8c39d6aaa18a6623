"""weirdnet bench suite: the plan of cells, their configs, the record store, resuming,
the report and its claim checks, and a real smoke run through the command line."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest
import torch

from helpers.train import run_cli
from weirdnet.train import TrainConfig, check
from weirdnet_lab.suite import numbers
from weirdnet_lab.suite.budgets import BUDGETS, get_budget
from weirdnet_lab.suite.cells import Cell
from weirdnet_lab.suite.claims import BETTER, CLAIMS, UNDECIDED, claim_lines, compare, difference
from weirdnet_lab.suite.document import render
from weirdnet_lab.suite.plan import TABLES_BY_NAME, plan_cells
from weirdnet_lab.suite.report import Results, Score
from weirdnet_lab.suite.tasks import TASKS, configs_dir, get_task
from weirdnet_lab.sweep.intervals import Z95, wilson
from weirdnet_lab.sweep.store import CellStore, config_hash
from weirdnet_lab.variants import MECHANISMS, VARIANTS, get_variant

pytestmark = pytest.mark.slow  # suite cells train models

ALL_TABLES = list(TABLES_BY_NAME)


def test_plan_covers_every_table_once_and_leaves_out_non_causal_lms():
    cells = plan_cells(get_budget("cpu"), ALL_TABLES)
    keys = [c.key for c in cells]
    assert len(keys) == len(set(keys))
    main = len(TASKS) * len(MECHANISMS) - 2  # DBA and Linformer have no causal LM
    # W = exp(w) x 5, encoder B x 4, 5 DBA settings x 5 LRA tasks, paper-literal DBA x 8,
    # today's baselines on LM: Weird-Net A/B matched and A/B++, Transformer++ and 7
    # transformers peers
    extra = 5 + 4 + 5 * 5 + 8 + 12
    assert len(cells) == main + extra
    assert "lm--dba--s0" not in keys and "lm--linformer--s0" not in keys
    assert "listops--weird-a--s0" in keys  # shared by main, table9 and table10: once


@pytest.mark.parametrize("bad", [{"tables": ["table99"]}, {"tasks": ["cifar"]},
                                 {"variants": ["mamba3"]}])
def test_plan_names_unknown_tables_tasks_and_mechanisms(bad):
    with pytest.raises(ValueError, match="known"):
        plan_cells(get_budget("smoke"), bad.get("tables", ALL_TABLES), bad.get("tasks"),
                   bad.get("variants"))


@pytest.mark.parametrize("budget", list(BUDGETS))
def test_every_cell_of_every_budget_is_a_valid_training_config(budget, tmp_path):
    for cell in plan_cells(get_budget(budget), ALL_TABLES, seeds=[0]):
        data = cell.config_dict(tmp_path)
        config = TrainConfig.from_dict(data)
        check(config)
        for stage in cell.stage_configs(tmp_path):  # a curriculum's earlier stages
            check(TrainConfig.from_dict(stage))
        backbone = data["model"]["backbone"]
        if cell.variant.peer:  # a transformers model: widths only, always causal
            assert data["model"]["peer"] == cell.variant.peer and "pattern" not in backbone
            assert config.run.name == cell.key
            continue
        assert backbone["pattern"] == cell.variant.pattern
        assert backbone["causal"] == (cell.task.group == "lm" or cell.variant.causal)
        assert config.run.name == cell.key and config.run.seed == 0


def test_budget_overrides_apply_and_variants_keep_task_options(tmp_path):
    cell = Cell(get_task("scp1"), get_variant("dba-dp64"), 3, get_budget("cpu"))
    data = cell.config_dict(tmp_path)
    assert data["train"]["steps"] == 100 and data["run"]["seed"] == 3
    assert data["model"]["backbone"]["dim"] == 32
    assert data["model"]["backbone"]["mixer_options"]["dba"] == {"form": "authors", "d_p": 64,
                                                                 "d_in": 24}
    assert data["data"]["options"]["problem"] == "SelfRegulationSCP1"  # from the config
    paper = Cell(get_task("text"), get_variant("softmax"), 0, get_budget("paper"))
    assert paper.config_dict(tmp_path)["data"]["dataset"] == "imdb"


def test_config_hash_ignores_where_runs_live_but_not_what_they_train(tmp_path):
    cell = Cell(get_task("listops"), get_variant("weird-a"), 0, get_budget("cpu"))
    a, b = cell.config_dict(tmp_path / "a"), cell.config_dict(tmp_path / "b")
    assert config_hash(a) == config_hash(b)
    b["train"]["steps"] += 1
    assert config_hash(a) != config_hash(b)


def test_store_states(tmp_path):
    store = CellStore(tmp_path / "results", tmp_path / "work")
    cell = Cell(get_task("listops"), get_variant("local"), 0, get_budget("smoke"))
    config = cell.config_dict(store.work_dir)
    assert store.state(cell, config) == "pending"
    checkpoint = store.run_dir(cell) / "checkpoints" / "step-00000002"
    checkpoint.mkdir(parents=True)
    assert store.state(cell, config) == "stale"  # checkpoints of an unknown config
    written = TrainConfig.from_dict(config).to_dict()
    (checkpoint / "train_config.json").write_text(json.dumps(written))
    assert store.state(cell, config) == "interrupted"
    older = {**written, "train": {**written["train"], "steps": 1}}
    (checkpoint / "train_config.json").write_text(json.dumps(older))
    assert store.state(cell, config) == "stale"  # left by an older config: not resumed
    (checkpoint / "train_config.json").write_text(json.dumps(written))
    record = {"task": "listops", "variant": "local", "seed": 0, "status": "done",
              "config_hash": config_hash(config)}
    store.write(cell, record)
    assert store.state(cell, config) == "done"
    store.write(cell, {**record, "status": "failed"})
    assert store.state(cell, config) == "failed"
    store.write(cell, {**record, "config_hash": "0" * 16})
    assert store.state(cell, config) == "stale"
    store.record_path(cell).write_text("{ half-written")
    assert store.state(cell, config) == "interrupted"  # an unreadable record counts as none


def test_reports_leave_out_stale_records_but_keep_other_seeds(tmp_path):
    from weirdnet_lab.suite.command import current_records

    budget = get_budget("smoke")
    store = CellStore(tmp_path / "results", tmp_path / "work")
    fresh, old = (Cell(get_task("jv"), get_variant(v), 0, budget) for v in ("dba", "local"))
    extra = Cell(get_task("jv"), get_variant("dba"), 7, budget)  # a seed the plan lacks
    for cell, digest in ((fresh, config_hash(fresh.config_dict(store.work_dir))),
                         (old, "0" * 16), (extra, "1" * 16)):
        store.write(cell, {"task": "jv", "variant": cell.variant.name, "seed": cell.seed,
                           "status": "done", "config_hash": digest})
    kept, stale = current_records(budget, store)
    assert stale == 1 and sorted((r["variant"], r["seed"]) for r in kept) == [
        ("dba", 0), ("dba", 7)]


def test_configs_dir_error_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_CONFIGS", str(tmp_path))
    with pytest.raises(ValueError, match="no weirdnet configs in .*WEIRDNET_CONFIGS"):
        configs_dir()


def test_laptop_budget_seeds_per_variant_and_leaves_out_what_it_cannot_decide():
    budget = get_budget("laptop")
    cells = plan_cells(budget, ["main"])
    seeds = {}
    for cell in cells:
        seeds.setdefault((cell.task.name, cell.variant.name), set()).add(cell.seed)
    assert seeds[("listops", "softmax")] == {0, 1, 2} == seeds[("lm", "weird-b")]
    assert seeds[("listops", "linformer")] == {0} == seeds[("image", "local")]
    assert {c.task.name for c in cells} == {"listops", "image", "jv", "scp1", "lm"}
    assert set(budget.excluded) == {"text", "retrieval", "pathfinder", "scp2"}
    listops = next(c for c in cells if c.task.name == "listops").config_dict(Path("w"))
    assert listops["data"]["options"]["max_length"] == 2000  # LRA's lengths
    assert plan_cells(budget, ["main"], ["listops"], ["dba"], seeds=[7])[0].seed == 7
    # a budget that decides claims never picks a checkpoint on the test split
    for cell in cells:
        data = cell.config_dict(Path("w"))["data"]
        assert data.get("eval_split", "val") == "val" != data.get("test_split", "test")


def test_trivial_baselines():
    import numpy as np

    from weirdnet.data.text.lm import ByteLMDataset
    from weirdnet_lab.sweep.baselines import bar, describe, learned, trivial_baseline

    class Labelled:
        def __init__(self, labels):
            self.items = [{"label": y} for y in labels]

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i]

    base = trivial_baseline(Labelled([0, 1, 1, 2, 1, 0]), "classification")
    assert base == {"kind": "majority", "value": 50.0}
    assert trivial_baseline(Labelled([0, 1, 1, 2]), "retrieval", items=2)["value"] == 50.0
    assert bar(base) == 60.0 and learned(base, 60.0) and not learned(base, 59.9)
    assert describe(base) == "majority class 50.0%"
    split = ByteLMDataset(np.frombuffer(b"ab" * 500 + b"c" * 1000, dtype=np.uint8),
                          seq_len=10, random_crops=False)
    whole = trivial_baseline(split, "lm")
    assert whole["kind"] == "unigram" and 1.0 < whole["value"] < 1.6
    assert trivial_baseline(split, "lm", items=5)["value"] == pytest.approx(1.0, abs=0.01)
    assert learned(whole, whole["value"] - 1.0) and not learned(whole, whole["value"] - 0.9)
    assert trivial_baseline(Labelled([]), "classification") is None
    assert trivial_baseline(split, "seq2seq") is None


# --- report and claims on constructed records ---------------------------------------

def _record(task: str, variant: str, value: float, seed: int = 0, **extra) -> dict:
    metric = get_task(task).metric
    stored = value / 100 if metric == "accuracy" else value
    return {"task": task, "variant": variant, "seed": seed, "status": "done",
            "results": {"val": {metric: stored}, "test": {metric: stored}},
            "evaluated": {"val": extra.get("items", 2000), "test": extra.get("items", 2000)},
            "steps_per_s": extra.get("speed", 1.0), "memory_mib": extra.get("memory", 100.0),
            "parameters": 1000, "wall_s": 1.0, "machine": {}}


def _verdict(results: Results, source: str, words: str) -> str:
    claim = next(c for c in CLAIMS if c.source == source and words in c.text)
    return claim.check(results)[0]


def test_claims_hold_or_fail_on_the_numbers():
    lra = numbers.LRA_COLUMNS
    records = [_record(t, "dba", 60.0, speed=2.0, memory=50.0) for t in lra]
    records += [_record(t, "softmax", 50.0) for t in lra]
    results = Results(records)
    assert _verdict(results, "DBA §4.2", "all five") == "holds"
    assert _verdict(results, "DBA §4.1", "faster") == "holds"
    assert _verdict(results, "Weird-Net Table III", "every LRA task") == "not measured"
    records[0] = _record("listops", "dba", 40.0)  # DBA now loses ListOps
    results = Results(records)
    verdict, detail = next(c for c in CLAIMS if c.source == "DBA §4.2").check(results)
    assert verdict == "does not hold" and "better on 4, worse on 1" in detail
    assert "**does not hold**" in "\n".join(claim_lines(results))
    # A gap inside the test sets' binomial intervals (2,000 items: about ±2.2 points)
    close = [_record(t, "dba", 51.0) for t in lra] + [_record(t, "softmax", 50.0) for t in lra]
    assert _verdict(Results(close), "DBA §4.2", "all five") == "undecided"
    # the same gap decided with 200,000 items; and undecided with no count at all
    big = [{**r, "evaluated": {"test": 200_000}} for r in close]
    assert _verdict(Results(big), "DBA §4.2", "all five") == "holds"
    bare = [{k: v for k, v in r.items() if k != "evaluated"} for r in records]
    assert _verdict(Results(bare), "DBA §4.2", "all five") == "undecided"


def test_seeds_give_a_t_interval_and_bpc_needs_seeds():
    records = [_record("lm", "weird-b", v, seed) for seed, v in enumerate((1.50, 1.52, 1.51))]
    records += [_record("lm", "softmax", v, seed) for seed, v in enumerate((1.60, 1.62, 1.61))]
    results = Results(records)
    score = results.score("lm", "weird-b")
    assert score.low < 1.51 < score.high and score.high - score.low == pytest.approx(
        2 * 4.303 * 0.01 / 3 ** 0.5)
    assert _verdict(results, "Weird-Net Table VIII", "Transformer") == "holds"
    one_seed = Results([r for r in records if r["seed"] == 0])
    assert _verdict(one_seed, "Weird-Net Table VIII", "Transformer") == "undecided"


def test_the_data_column_states_the_sizes_the_budget_sets():
    from weirdnet_lab.suite.document import data_text

    text = data_text(get_task("listops"), {"dataset": "listops", "options": {
        "n_train": 20000, "min_length": 500, "max_length": 2000}})
    assert text == "listops (generated with LRA's generator; 20,000 training items of " \
                   "500-2000 tokens)"
    assert data_text(get_task("jv"), {"dataset": "uea"}) == "uea (the UEA archive files)"


def test_the_report_says_how_much_is_left_and_how_long_it_would_take(tmp_path):
    budget = get_budget("laptop")
    planned = plan_cells(budget, ["main"])
    jv = [c for c in planned if c.task.name == "jv"]
    records = [{**_record("jv", c.variant.name, 90.0, c.seed), "wall_s": 3600.0,
                "config": c.config_dict(tmp_path)} for c in jv[:-2]]
    text = render(budget, records, ["main"], None)
    assert f"{len(jv) - 2} of these tables' {len(planned)} cells done; the 2 left on " \
           "tasks already timed would take about 2.0 h more" in text
    assert "on tasks not timed yet (Image, ListOps, SelfRegulationSCP1, wiki-xml LM)" in text
    # a mechanism's own time on the task comes first: two slow Transformer seeds done
    left = {("softmax", 2), ("weird-a", 2)}
    records = [{**_record("jv", c.variant.name, 90.0, c.seed), "config":
                c.config_dict(tmp_path),
                "wall_s": 7200.0 if c.variant.name == "softmax" else 3600.0}
               for c in jv if (c.variant.name, c.seed) not in left]
    assert "the 2 left on tasks already timed would take about 3.0 h more" in \
        render(budget, records, ["main"], None)
    every = [{**_record(c.task.name, c.variant.name, 50.0, c.seed),
              "config": c.config_dict(tmp_path)} for c in planned]
    assert f"all {len(planned)} cells of these tables are done" in \
        render(budget, every, ["main"], None)


def test_an_accuracy_interval_is_printed_within_0_100_but_kept_unclipped():
    results = Results([_record("scp1", "softmax", v, seed) for seed, v in enumerate((99.0, 72.0))])
    score = results.score("scp1", "softmax")
    assert score.high > 100.0 and score.low < 0.0  # t with 1 degree of freedom: wide
    assert score.with_interval() == "85.5 [0.0, 100.0]"
    assert score.se == pytest.approx((score.high - score.low) / (2 * 1.959963984540054))
    bpc = Results([_record("lm", "softmax", v, seed) for seed, v in enumerate((0.1, 2.0))])
    assert bpc.score("lm", "softmax").with_interval(2).startswith("1.05 [0.00, ")


def test_seeds_that_agree_exactly_keep_the_test_sets_interval():
    same = Results([_record("jv", "ps", 98.6, seed, items=370) for seed in range(3)])
    score = same.score("jv", "ps")
    assert score.high - score.low == pytest.approx(
        100 * (lambda w: w[1] - w[0])(wilson(0.986, 370)))
    other = Results([_record("jv", "softmax", v, seed, items=370)
                     for seed, v in enumerate((96.2, 96.8, 97.3))])
    assert compare(score, other.score("jv", "softmax")) == "undecided"


def test_a_difference_has_the_interval_that_decides_it():
    """a - b with the standard errors of the two intervals added in quadrature; no
    interval when one score has none (one seed of bits per byte)."""
    a, b = Score(2.0, n=3, low=1.9, high=2.1), Score(1.0, n=3, low=0.8, high=1.2)
    half = Z95 * (a.se ** 2 + b.se ** 2) ** 0.5
    gap = difference(a, b)
    assert (gap.mean, gap.low, gap.high) == pytest.approx((1.0, 1.0 - half, 1.0 + half))
    assert compare(a, b) == BETTER and gap.low > 0
    assert difference(a, Score(1.0, n=1)).low is None
    assert compare(a, Score(1.0, n=1)) == UNDECIDED


def test_scores_average_seeds_and_mark_unsupported_and_failed_cells():
    records = [_record("text", "weird-a", 60.0, 0), _record("text", "weird-a", 70.0, 1),
               {"task": "text", "variant": "local", "seed": 0, "status": "failed"}]
    results = Results(records)
    score = results.score("text", "weird-a")
    assert score.mean == pytest.approx(65.0) and score.n == 2
    assert score.text() == "65.0 ± 5.0"
    assert results.score("text", "local").text() == "error"
    assert results.score("lm", "dba").text() == "n/a"
    assert results.score("image", "weird-a").text() == "–"


def test_report_labels_ours_and_papers_numbers():
    records = [_record(t, v, 55.0) for t in numbers.LRA_COLUMNS for v in VARIANTS
               if v != "relation"]
    for record in records:
        record.update(commit="abc", machine={"cpu_model": "cpu", "usable_cores": 2,
                                             "torch": "2", "python": "3", "weirdnet": "0",
                                             "command": "weirdnet bench suite"},
                      config={"train": {"steps": 1, "batch_size": 2, "final_eval_batches": 0},
                              "model": {"backbone": {"dim": 8}}, "data": {"dataset": "x"}})
    text = render(get_budget("cpu"), records, ALL_TABLES, "fig6.png")
    assert "ListOps (ours) | (paper)" in text
    assert "| Weird-Net A | 55.0 | 39.68 |" in text  # ours, then Weird-Net Table III
    assert "## DBA d_p and d_in (DBA Table 12)" in text and "fig6.png" in text


def test_a_task_the_transformer_did_not_learn_decides_nothing():
    lra = numbers.LRA_COLUMNS
    majority = {"kind": "majority", "value": 50.0}
    records = [_record(t, "dba", 80.0) for t in lra]
    records += [{**_record(t, "softmax", 70.0), "baseline": majority} for t in lra]
    assert Results(records).learned("text") is True
    assert _verdict(Results(records), "DBA §4.2", "all five") == "holds"
    records[len(lra)] = {**_record("listops", "softmax", 55.0), "baseline": majority}
    results = Results(records)
    assert results.learned("listops") is False
    verdict, detail = next(c for c in CLAIMS if c.source == "DBA §4.2").check(results)
    assert verdict == "undecided" and "did not learn" in detail
    assert Results([_record("text", "softmax", 70.0)]).learned("text") is None
    for record in records:
        record.update(machine={"command": "x"}, config={
            "train": {"steps": 1, "batch_size": 2}, "model": {"backbone": {}},
            "data": {"dataset": "x"}})
    text = render(get_budget("laptop"), records, ["main"], None)
    assert "## What this budget decides" in text
    assert "**no**: the Transformer did not clear the bar" in text
    assert "| Image | majority class 50.0% | 70.0" in text
    assert "Not run, not decided at this budget:" in text and "- Pathfinder:" in text


def test_a_shortcut_raises_the_bar_and_undecides_a_task():
    """ListOps' first operator alone scores more than the majority class: the bar is the
    best trivial baseline + 10 points, so a Transformer at the shortcut learned nothing."""
    lra = numbers.LRA_COLUMNS
    majority = {"kind": "majority", "value": 17.3}
    records = [{**_record(t, "softmax", 34.1), "baseline": majority} for t in lra]
    shortcut = {"kind": "first-operator", "value": 36.0, "about": "x"}
    assert Results(records).learned("listops") is True  # majority + 10 = 27.3
    results = Results(records, {"listops": [shortcut]})
    assert results.baseline("listops") == shortcut
    assert results.learned("listops") is False and results.learned("text") is True
    for record in records:
        record.update(machine={"command": "x"}, config={
            "train": {"steps": 1, "batch_size": 2}, "model": {"backbone": {}},
            "data": {"dataset": "x"}})
    text = render(get_budget("laptop"), records, ["main"], None, 0, {"listops": [shortcut]})
    assert "| ListOps | majority class 17.3%; first operator only 36.0% | 34.1" in text
    assert "| 46.0 | **no**" in text


def test_shortcut_classifiers_on_items_built_to_have_them():
    from weirdnet.data.lra.listops import VOCAB
    from weirdnet_lab.suite import shortcuts

    class Split(list):
        info = types.SimpleNamespace(vocab_size=16, input_dim=None)

    op = {name: VOCAB.index(name) for name in ("[MAX", "[MIN", "[SM")}
    # MAX -> 9 three times and 1 once, MIN -> 0 twice, SM -> 5 once: best is 6 of 7
    rows = [("[MAX", 9), ("[MAX", 9), ("[MAX", 9), ("[MAX", 1), ("[MIN", 0), ("[MIN", 0),
            ("[SM", 5)]
    split = Split({"tokens": torch.tensor([op[o], 3, 4, 15, 0]), "label": y} for o, y in rows)
    assert shortcuts.first_operator(split, 7) == pytest.approx(100 * 6 / 7)
    assert shortcuts.first_operator(split, 4) == pytest.approx(75.0)  # the items read only

    # a label that is the majority token: the bag of tokens finds it, order plays no part
    generator = torch.Generator().manual_seed(0)

    def items(n):
        out = Split()
        for _ in range(n):
            label = int(torch.randint(0, 2, (1,), generator=generator))
            tokens = torch.randint(1, 16, (40,), generator=generator)
            tokens[:25] = 3 + label  # 25 of 40 tokens say the label
            out.append({"tokens": tokens[torch.randperm(40, generator=generator)],
                        "label": label})
        return out

    train, test = items(200), items(100)
    found = shortcuts.shortcut_baselines("toy", train, test, 100)
    assert [b["kind"] for b in found] == ["bag-of-tokens"]
    assert found[0]["value"] == 100.0 and found[0]["train_items"] == 200

    series = Split({"values": torch.full((6, 2), float(y)) + 0.1 * torch.randn(6, 2,
                    generator=generator), "label": y} for y in [0, 1] * 20)
    series.info = types.SimpleNamespace(vocab_size=None, input_dim=2)
    found = shortcuts.shortcut_baselines("uea", series, series, 40)
    assert found[0]["kind"] == "channel-statistics" and found[0]["value"] == 100.0


# --- through the command line -----------------------------------------------------------

def _suite(tmp_path: Path, *extra: str):
    return run_cli("bench", "suite", "--budget", "smoke", "--tables", "main",
                   "--tasks", "listops", "--out", str(tmp_path / "results"),
                   "--work", str(tmp_path / "work"), *extra, cwd=tmp_path, timeout=600)


def test_smoke_suite_runs_records_skips_and_resumes(tmp_path):
    out = _suite(tmp_path, "--mechanisms", "weird-a,softmax")
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    cells = tmp_path / "results" / "suite-smoke" / "cells"
    record = json.loads((cells / "listops--weird-a--s0.json").read_text())
    assert record["status"] == "done" and record["seed"] == 0
    assert record["config"]["model"]["backbone"]["pattern"] == "A"
    assert record["machine"]["cpu_model"] and "commit" in record
    assert record["steps_per_s"] > 0 and record["memory_mib"] >= 0
    assert 0.0 <= record["results"]["test"]["accuracy"] <= 1.0
    report = (tmp_path / "results" / "suite-smoke" / "report.md").read_text()
    assert "| Weird-Net A |" in report and "(paper)" in report
    shortcut = json.loads((tmp_path / "results" / "suite-smoke" / "shortcuts" /
                           "listops.json").read_text())
    assert [b["kind"] for b in shortcut["baselines"]] == ["majority", "first-operator",
                                                         "bag-of-tokens"]
    assert shortcut["items"] == record["evaluated"]["test"] and shortcut["commit"]
    assert "first operator only" in report

    again = _suite(tmp_path, "--mechanisms", "weird-a,softmax")
    assert again.returncode == 0 and "2 already done, 0 to run" in again.stdout

    # An interrupted cell: its record is gone but its checkpoints are there.
    (cells / "listops--softmax--s0.json").unlink()
    listed = _suite(tmp_path, "--mechanisms", "weird-a,softmax", "--list")
    assert "interrupted  listops--softmax--s0" in listed.stdout
    assert f"records: {cells};" in listed.stdout and "1 done, 1 interrupted" in listed.stdout
    resumed = _suite(tmp_path, "--mechanisms", "weird-a,softmax")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 already done, 1 to run" in resumed.stdout
    assert json.loads((cells / "listops--softmax--s0.json").read_text())["resumed"] is True


def test_jobs_run_cells_side_by_side_and_the_report_says_so(tmp_path):
    out = _suite(tmp_path, "--mechanisms", "weird-a,softmax,local", "--jobs", "2")
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    assert "0 already done, 3 to run, 2 at once" in out.stdout
    cells = tmp_path / "results" / "suite-smoke" / "cells"
    records = [json.loads(p.read_text()) for p in sorted(cells.glob("*.json"))]
    assert [r["status"] for r in records] == ["done"] * 3
    assert all(r["cells_at_once"] == 2 and r["torch_threads"] >= 1 for r in records)
    report = (tmp_path / "results" / "suite-smoke" / "report.md").read_text()
    assert "3 of them ran beside other cells (`--jobs`)" in report


def test_cells_side_by_side_share_the_cores_unless_the_user_set_threads(monkeypatch):
    from weirdnet_lab.sweep.engine import cell_env

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert cell_env(1) is None
    assert cell_env(2)["OMP_NUM_THREADS"] == "4" and cell_env(16)["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cell_env(2) is None


def test_a_cell_that_fails_is_recorded_and_the_rest_still_run(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    shutil.copytree(configs_dir(), configs)
    listops = configs / "lra" / "listops.toml"  # its [overlay.cpu] keeps data.root
    listops.write_text(listops.read_text().replace('\nroot = ""\n',
                                                   '\nroot = "/no/such/dir"\n', 1))
    monkeypatch.setenv("WEIRDNET_CONFIGS", str(configs))
    out = _suite(tmp_path, "--mechanisms", "local,relation")
    assert out.returncode == 1
    record = json.loads((tmp_path / "results" / "suite-smoke" / "cells"
                         / "listops--local--s0.json").read_text())
    assert record["status"] == "failed" and "/no/such/dir" in record["error"]
    assert (tmp_path / "results" / "suite-smoke" / "cells" / "listops--relation--s0.json"
            ).exists()
    assert "## Cells that failed" in (tmp_path / "results" / "suite-smoke"
                                      / "report.md").read_text()


def test_a_broken_config_file_is_one_clear_line(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    shutil.copytree(configs_dir(), configs)
    (configs / "lra" / "listops.toml").write_text("[data\n")  # and so its [overlay.cpu]
    monkeypatch.setenv("WEIRDNET_CONFIGS", str(configs))
    out = _suite(tmp_path, "--mechanisms", "local")
    assert out.returncode == 2 and "not valid TOML" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_average_claim_is_judged_on_the_tasks_a_budget_ran():
    """The laptop budget runs ListOps and Image of LRA's five: Table IX's ordering of
    averages is judged on those two, and says so; with every task, on all five."""
    run = ("listops", "image")
    names = {"weird-a": 60.0, "weird-a-exp": 50.0, "ps": 40.0}
    records = [_record(t, n, v, items=5000) for t in run for n, v in names.items()]
    results = Results(records)
    verdict, detail = next(c for c in CLAIMS if "Table IX" in c.source).check(results)
    assert verdict == "holds on the tasks run"
    assert detail.startswith("ListOps, Image only (2 of 5 tasks): claimed")
    # the ordering reversed on both tasks: decided against it, printed in bold
    flipped = Results([_record(t, n, 100.0 - v, items=5000) for t in run
                       for n, v in names.items()])
    assert _verdict(flipped, "Weird-Net Table IX", "exp(w)") == \
        "does not hold on the tasks run"
    assert "| **does not hold on the tasks run** |" in "\n".join(claim_lines(flipped))
    # a task on which one of the compared mechanisms is missing is left out
    partial = Results(records + [_record("text", "weird-a", 90.0)])
    assert next(c for c in CLAIMS if "Table IX" in c.source).check(partial)[1] \
        .startswith("ListOps, Image only")
    # a task the Transformer failed to learn ranks nothing, so it is left out too
    failed = records + [_record("listops", "softmax", 10.0, items=5000)]
    failed[-1]["baseline"] = {"kind": "majority", "value": 17.0}
    verdict, detail = next(c for c in CLAIMS if "Table IX" in c.source).check(
        Results(failed))
    assert verdict == "holds on the tasks run" and detail.startswith(
        "Image only (1 of 5 tasks)")
    # every task measured: the paper's own claim, no qualifier
    full = Results([_record(t, n, v, items=5000) for t in numbers.LRA_COLUMNS
                    for n, v in names.items()])
    assert _verdict(full, "Weird-Net Table IX", "exp(w)") == "holds"
    # nothing in common: not measured
    assert _verdict(Results([_record("listops", "weird-a", 60.0)]), "Weird-Net Table IX",
                    "exp(w)") == "not measured"


def test_the_best_average_claim_compares_every_mechanism_on_the_same_tasks():
    mechanisms = ("weird-a", "weird-b", "ps", "relation", "dba", "softmax", "linear",
                  "linformer", "local")
    records = [_record(t, n, 80.0 if n == "weird-a" else 40.0, items=5000)
               for t in ("listops", "image") for n in mechanisms]
    verdict, detail = next(c for c in CLAIMS if "best LRA average" in c.text).check(
        Results(records))
    assert verdict == "holds on the tasks run" and "Weird-Net A 80.0" in detail
    # equal averages: undecided; DBA clearly below the baselines: decided against
    assert _verdict(Results(records), "DBA Table 2", "better LRA average") == \
        "undecided on the tasks run"
    lower = [_record(r["task"], "dba", 30.0, items=5000) if r["variant"] == "dba" else r
             for r in records]
    assert _verdict(Results(lower), "DBA Table 2", "better LRA average") == \
        "does not hold on the tasks run"


def test_fig6_averages_every_mechanism_over_the_same_lra_tasks(tmp_path):
    from weirdnet_lab.suite.figure import accuracy_label, draw_fig6, our_points

    speeds = {"weird-a": 5.0, "dba": 3.0, "softmax": 1.0}
    records = [_record(t, n, 50.0 + 10 * speeds[n], speed=speeds[n], memory=100.0)
               for t in ("listops", "image") for n in speeds]
    records.append(_record("text", "weird-a", 99.0))  # one mechanism only: left out
    points, tasks = our_points(Results(records), list(speeds))
    assert tasks == ("listops", "image")
    assert sorted((p[0], p[1], p[2]) for p in points) == [
        ("DBA", 3.0, 80.0), ("Transformer", 1.0, 60.0), ("Weird-Net A", 5.0, 100.0)]
    assert accuracy_label(tasks) == "accuracy (%), average of ListOps, Image"
    assert accuracy_label(numbers.LRA_COLUMNS) == "LRA average accuracy (%), 5 tasks"
    pytest.importorskip("matplotlib")
    path = draw_fig6(Results(records), list(speeds), tmp_path / "fig6.png", "laptop")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_mechanism_reads_out_and_names_its_dba_form_as_its_paper_runs_it(tmp_path):
    """Relation reads the first token; DBA a [CLS] token on LRA (mean on Pathfinder and
    UEA) with its form named; the rest keep the task config's readout; LM has none."""
    def cell(task, variant):
        cells = plan_cells(get_budget("cpu"), ALL_TABLES, [task], [variant])
        return cells[0].config_dict(tmp_path)["model"]
    assert cell("listops", "relation")["pooling"] == "first"
    assert cell("jv", "relation")["pooling"] == "first"
    assert "pooling" not in cell("lm", "relation")
    assert cell("listops", "dba")["pooling"] == "cls"
    assert cell("pathfinder", "dba")["pooling"] == "mean"
    assert "pooling" not in cell("jv", "dba") and "pooling" not in cell("listops", "softmax")
    for variant, form in [("dba", "authors"), ("dba-dp8", "authors"),
                          ("dba-literal", "paper-literal")]:
        model = cell("image", variant)
        assert model["backbone"]["mixer_options"]["dba"]["form"] == form
        assert model["pooling"] == "cls"


def test_the_report_says_which_dba_form_and_readout_each_record_used():
    from weirdnet_lab.suite.report import dba_form, form_table, readout

    def model(pattern, **extra):
        return {"config": {"model": {"backbone": {"pattern": pattern, **extra}}}}
    old = model("dba", mixer_options={"dba": {"d_p": 16}})  # before the form was named
    assert dba_form(old) == "paper-literal"
    assert dba_form(model("dba", mixer_options={"dba": {"form": "authors"}})) == "authors"
    assert dba_form(model("weird")) is None and dba_form({}) is None
    assert readout(model("B", causal=True)) == "last" and readout(old) == "mean"
    old["config"]["model"]["pooling"] = "cls"
    assert readout(old) == "cls"
    records = [_record("listops", "dba", 40.0 + s, seed=s, **{}) for s in range(3)]
    records += [_record("listops", "dba-literal", 17.0, seed=s) for s in range(3)]
    for r in records:
        form = "authors" if r["variant"] == "dba" else "paper-literal"
        r["config"] = {"model": {"backbone": {"pattern": "dba", "mixer_options": {
            "dba": {"form": form}}}}}
    table = "\n".join(form_table(Results(records), ("dba", "dba-literal"),
                                  ("listops", "image")))
    assert "| DBA | authors | 41.0 [" in table and "(3 seeds)" in table
    assert "| DBA, paper-literal | paper-literal | 17.0 [" in table
    assert "Image" not in table  # a task neither ran is left out
    assert _verdict(Results(records), "issue 29 (ours)", "authors") == "holds"


def test_speed_ratios_compare_only_cells_run_on_the_transformers_machine():
    records = [_record("text", "softmax", 50.0, speed=1.0),
               _record("text", "dba", 50.0, speed=4.0),
               _record("text", "relation", 50.0, speed=9.0)]
    for record, cpu in zip(records, ("AMD", "AMD", "Intel")):
        record["machine"] = {"cpu_model": cpu}
    results = Results(records)
    assert results.relative_speed("dba")[0] == 4.0
    assert results.relative_speed("relation") == (None, None)


def test_todays_baselines_table_trains_a_transformers_peer_in_a_suite_cell(tmp_path):
    """--tables today: a transformers peer in place of the task's model, matched to the
    task's widths, trained and reported beside the Transformer++ (LM task only)."""
    pytest.importorskip("transformers")
    from weirdnet.data import DataMissingError
    from weirdnet_lab.lm.command import require_corpus

    try:
        require_corpus()
    except DataMissingError as error:
        pytest.skip(f"the LM task trains on the wiki-xml corpus: {error}")
    out = run_cli("bench", "suite", "--budget", "smoke", "--tables", "today", "--tasks", "lm",
                  "--mechanisms", "llama,transformerpp", "--out", str(tmp_path / "results"),
                  "--work", str(tmp_path / "work"), "--no-plot", cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    cells = tmp_path / "results" / "suite-smoke" / "cells"
    record = json.loads((cells / "lm--llama--s0.json").read_text())
    assert record["status"] == "done" and record["config"]["model"]["peer"] == "llama"
    report = (tmp_path / "results" / "suite-smoke" / "report.md").read_text()
    assert "## The baselines the field uses today (byte-level LM)" in report
    assert "| Llama (transformers) |" in report and "| Transformer++ |" in report


def test_lm_table_states_each_models_non_embedding_parameters_against_the_transformer(
        tmp_path):
    """The LM tables count parameters as the peers are matched (no embedding tables), so
    a reader sees how far each model is from the GPT-2-style Transformer: the today
    table's new rows are matched to it; the papers' own rows keep the papers' widths."""
    from weirdnet_lab.matching import count
    from weirdnet_lab.suite.report import lm_table, non_embedding_parameters

    budget, lm = get_budget("laptop"), get_task("lm")
    records = []
    for name in ("softmax", "transformerpp", "weird-a"):
        record = _record("lm", name, 3.0)
        record["config"] = Cell(lm, get_variant(name), 0, budget).config_dict(tmp_path)
        records.append(record)
    transformer, transformerpp, weird_a = (non_embedding_parameters(r) for r in records)
    assert "preset" in records[0]["config"]["model"]  # resolved under the stored table
    assert weird_a == count({"backbone": {"dim": 64, "depth": 2, "d_ff": 128, "heads": 4,
                                          "pattern": "A"}})
    table = "\n".join(lm_table(Results(records), ("softmax", "transformerpp", "weird-a",
                                                  "weird-b")))
    assert f"| Transformer | 3.000 | 1.16 | 0.00M; {transformer / 1e6:.3f}M (+0.0%) |" in table
    assert f"{transformerpp / 1e6:.3f}M ({transformerpp / transformer - 1:+.1%})" in table
    assert f"{weird_a / 1e6:.3f}M ({weird_a / transformer - 1:+.1%})" in table
    assert "| Weird-Net B | – | 1.02 | – |" in table  # not run: no count


@pytest.mark.parametrize("budget", ["smoke", "cpu", "laptop"])
def test_todays_weirdnet_rows_are_matched_to_the_transformer_as_the_peers_are(
        budget, tmp_path):
    """The Transformer++, A++, B++ and the matched A and B of the today table get the
    non-embedding parameters of the GPT-2-style Transformer with the task's widths within
    5% (their feed-forward width turned), as the peers do; the papers' rows keep the
    task's widths, and the matched A and B differ from them only in that width."""
    from weirdnet_lab.suite.report import non_embedding_parameters

    def cell_config(name: str) -> dict:
        return Cell(get_task("lm"), get_variant(name), 0, get_budget(budget)
                    ).config_dict(tmp_path)

    reference = non_embedding_parameters({"config": cell_config("softmax")})
    for name in ("transformerpp", "weird-a-pp", "weird-b-pp", "weird-a-matched",
                 "weird-b-matched"):
        config = cell_config(name)
        assert abs(non_embedding_parameters({"config": config}) / reference - 1) <= 0.05
        papers = cell_config(name.replace("-matched", "")) if "matched" in name else None
        if papers is None:
            assert config["model"]["backbone"]["positions"] == "rope"  # its options kept
        else:  # the papers' model, only its feed-forward width changed
            ours, theirs = config["model"]["backbone"], papers["model"]["backbone"]
            assert {k: v for k, v in ours.items() if k != "d_ff"} == \
                {k: v for k, v in theirs.items() if k != "d_ff"}
    task_d_ff = cell_config("softmax")["model"]["backbone"].get("d_ff")
    assert cell_config("weird-a")["model"]["backbone"].get("d_ff") == task_d_ff


def test_a_curriculum_cell_trains_its_stages_first_and_starts_from_their_weights(tmp_path):
    """budget.stages: each stage is the cell's config with the stage's tables over it,
    trained first; the cell starts from the last stage's weights; the record keeps the
    stages, and the config hash does not depend on where the runs live."""
    import dataclasses

    from weirdnet_lab.sweep.cell import run_cell
    from weirdnet_lab.sweep.engine import cell_spec

    stage = {"data": {"options": {"min_length": 5, "max_length": 20}}, "train": {"steps": 2}}
    budget = dataclasses.replace(get_budget("smoke"), name="smoke-curriculum",
                                 stages={"listops": (stage,)})
    cell = Cell(get_task("listops"), get_variant("softmax"), 0, budget)
    store = CellStore(tmp_path / "results", tmp_path / "work")
    config = cell.config_dict(store.work_dir)
    [first] = cell.stage_configs(store.work_dir)
    assert first["run"]["name"].startswith("listops--softmax--s0--stage1-")
    assert first["data"]["options"]["max_length"] == 20
    assert first["data"]["options"]["max_len"] == config["data"]["options"]["max_len"]
    assert config["train"]["init_from"] == str(store.work_dir / first["run"]["name"])
    assert config_hash(config) == config_hash(cell.config_dict(tmp_path / "elsewhere"))
    changed = dataclasses.replace(budget, stages={"listops": ({**stage, "train": {
        "steps": 3}},)})
    assert config_hash(Cell(cell.task, cell.variant, 0, changed).config_dict(
        store.work_dir)) != config_hash(config)

    spec, _, _ = cell_spec(cell, config, store, ["weirdnet", "bench", "suite"])
    record = run_cell(spec)
    [kept] = record["stages"]
    assert kept["steps"] == 2 and kept["name"] == first["run"]["name"]
    assert 0.0 <= kept["results"]["test"]["accuracy"] <= 1.0
    assert record["steps"] == config["train"]["steps"] and record["wall_s"] > kept["wall_s"]
    start = json.loads((store.run_dir(cell) / "log.jsonl").read_text().splitlines()[0])
    assert start["initialised_from"] == str(store.work_dir / first["run"]["name"] / "best")
    assert Cell(cell.task, cell.variant, 0, get_budget("smoke")).stage_configs(tmp_path) == []

    report = render(budget, [record], ["main"], None)
    section = report.split("## Curriculum stages")[1].split("## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| listops--"))
    stage_test = f"{100 * kept['results']['test']['accuracy']:.1f}%"
    assert f"| 2 × {config['train']['batch_size']} | {stage_test} |" in row
    assert "of 5-20 tokens" in row and row.startswith("| listops--softmax--s0 | stage1-")
    assert "## Curriculum stages" not in render(budget, [{**record, "stages": []}],
                                                ["main"], None)
