"""The run configuration: TOML, extends, --set, and the errors users see."""

import pytest

from helpers.train import write_config
from weirdnet.config.toml import parse_value
from weirdnet.config.typed import ConfigError
from weirdnet.data.registry import DatasetInfo
from weirdnet.train.config import apply_overrides, eval_due, load_config
from weirdnet.train.schedule import lr_multiplier
from weirdnet.train.tasks import best_metric, build_model_config


def test_loads_and_names_the_run_after_the_file(tmp_path):
    config = load_config(write_config(tmp_path, "mine.toml"))
    assert config.run.name == "mine"
    assert config.train.steps == 12 and config.model["backbone"]["dim"] == 32
    assert config.optim.betas == (0.9, 0.98)


@pytest.mark.parametrize("text, value", [("64", 64), ("1e-3", 1e-3), ("true", True),
                                         ("[0.9, 0.95]", [0.9, 0.95]), ('"B"', "B"),
                                         ("B", "B"), ("weird,softmax", "weird,softmax"),
                                         ("{ seq_len = 8 }", {"seq_len": 8})])
def test_set_values_are_toml_or_bare_strings(text, value):
    assert parse_value(text) == value


def test_set_overrides_nested_keys(tmp_path):
    config = load_config(write_config(tmp_path), ["train.steps=5", "model.backbone.dim=48",
                                                  "data.options.seq_len=16",
                                                  "optim.betas=[0.8, 0.9]"])
    assert config.train.steps == 5 and config.model["backbone"]["dim"] == 48
    assert config.data.options == {"seq_len": 16, "epoch_length": 512}
    assert config.optim.betas == (0.8, 0.9)


@pytest.mark.parametrize("assignment, message", [
    ("train.step=5", "did you mean 'train.steps'"),
    ("trian.steps=5", "did you mean 'train'"),
    ("train.steps=abc", "train.steps must be int, got 'abc'"),
    ("train.steps=2.5", "train.steps must be int"),
    ("optim.lr=fast", "optim.lr must be float"),
    ("schedule.name=cosin", "did you mean 'cosine'"),
    ("train.batch_size=0", "train.batch_size must be >= 1"),
    ("data.pad_multiple=0", "data.pad_multiple must be >= 1"),
    ("data.pad_multiple=8.0", "data.pad_multiple must be int"),
    ("steps", "expected section.key=value"),
    ("train.grad_accum=3", "not a multiple of train.grad_accum"),
    ("train.eval_spacing=log", "train.eval_spacing"),
])
def test_bad_overrides_name_the_key(tmp_path, assignment, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_config(write_config(tmp_path), [assignment])


def test_unknown_key_in_file_suggests_the_closest(tmp_path):
    path = write_config(tmp_path, extra="[optim]\nlearning_rate = 0.1\n")
    with pytest.raises(ConfigError, match="unknown key config.optim.learning_rate"):
        load_config(path)


def test_extends_merges_tables_and_detects_loops(tmp_path):
    base = write_config(tmp_path, "base.toml")
    child = tmp_path / "child.toml"
    child.write_text('extends = "base.toml"\n[train]\nsteps = 99\n')
    config = load_config(child)
    assert config.train.steps == 99 and config.train.batch_size == 8
    assert config.data.dataset == "python-stdlib" and config.run.name == "child"
    base.write_text('extends = "child.toml"\n')
    with pytest.raises(ConfigError, match="loops back"):
        load_config(child)


def test_invalid_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nsteps = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_dataset_is_required(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text("[train]\nsteps = 3\n")
    with pytest.raises(ConfigError, match="data.dataset is not set"):
        load_config(path)


def test_model_config_takes_sizes_from_the_data():
    info = DatasetInfo(task="classification", vocab_size=16, num_classes=10, max_len=2000)
    name, config = build_model_config({"preset": "lra-listops-cpu"}, info)
    assert name == "WeirdNetClassifier"
    assert config["backbone"]["vocab_size"] == 16 and config["num_classes"] == 10
    lm = DatasetInfo(task="lm", vocab_size=256, max_len=257)
    name, config = build_model_config({"backbone": {"dim": 64}}, lm)
    assert name == "WeirdNetLM" and config["backbone"]["causal"] is True
    assert config["backbone"]["pattern"] == "B" and config["backbone"]["max_len"] == 256


def test_model_config_rejects_contradictions():
    info = DatasetInfo(task="classification", vocab_size=16, num_classes=10)
    with pytest.raises(ConfigError, match="vocab_size=300 contradicts the dataset"):
        build_model_config({"backbone": {"vocab_size": 300}}, info)
    with pytest.raises(ConfigError, match="does not fit the classification task"):
        build_model_config({"preset": "weirdnet-small-cpu"}, info)
    with pytest.raises(ConfigError, match="model.preset: unknown preset"):
        build_model_config({"preset": "lra-listop"}, info)


def test_apply_overrides_does_not_touch_the_input():
    data = {"train": {"steps": 1}}
    out = apply_overrides(data, ["train.steps=2"])
    assert data == {"train": {"steps": 1}} and out == {"train": {"steps": 2}}


def test_schedules():
    cosine = lr_multiplier("cosine", 10, 111, 0.1)
    assert cosine(0) == pytest.approx(0.1) and cosine(9) == 1.0 and cosine(10) == 1.0
    assert cosine(60) == pytest.approx(0.55) and cosine(110) == pytest.approx(0.1)
    rsqrt = lr_multiplier("rsqrt", 100, 1000)
    assert rsqrt(99) == 1.0 and rsqrt(400) == pytest.approx(0.5)
    assert lr_multiplier("constant", 0, 10)(5) == 1.0
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_multiplier("linear", 0, 10)


def test_best_metric_direction():
    assert best_metric("lm", "auto") == ("loss", True)
    assert best_metric("classification", "auto") == ("accuracy", False)
    assert best_metric("seq2seq", "auto") == ("exact_match", False)
    assert best_metric("lm", "bpc") == ("bpc", True)
    assert best_metric("classification", "-accuracy") == ("accuracy", True)


# ---- values checked before a run starts (issue 35, item 6) ---------------------------

@pytest.mark.parametrize("assignment, message", [
    ("train.clip=nan", "train.clip must be a finite number, got nan"),  # every float key
    ("train.clip=-1.0", "train.clip must be a finite number >= 0"),
    ("optim.lr=inf", "optim.lr must be a finite number, got inf"),
    ("optim.lr=0", "optim.lr must be a finite number > 0"),
    ("optim.weight_decay=nan", "optim.weight_decay must be a finite number, got nan"),
    ("optim.eps=-1e-8", "optim.eps must be a finite number > 0"),
    ("schedule.min_lr_ratio=nan", "schedule.min_lr_ratio must be a finite number"),
    ("train.early_stop_at=inf", "train.early_stop_at must be a finite number, got inf"),
    ("optim.betas=[nan, 0.9]", "optim.betas must be two numbers in [0, 1)"),
])
def test_non_finite_numbers_are_refused(tmp_path, assignment, message):
    import re

    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write_config(tmp_path), [assignment])


def test_each_task_names_the_metrics_it_reports():
    from weirdnet.train.tasks import TASKS

    sums = {"nll": 2.0, "targets": 4.0, "correct": 1.0, "sequences": 2.0, "exact": 1.0}
    for info in (DatasetInfo(task="lm", vocab_size=256), DatasetInfo(task="lm", vocab_size=50),
                 *(DatasetInfo(task=t, vocab_size=10) for t in TASKS if t != "lm")):
        task = TASKS[info.task]
        assert sorted(task.metric_names(info)) == sorted(task.metrics(sums, info)), info


@pytest.mark.parametrize("task, configured, ok", [
    ("lm", "acc", False), ("lm", "accuracy", False), ("lm", "bpc", True),
    ("lm", "-perplexity", True), ("classification", "loss", True),
    ("classification", "exact_match", False), ("seq2seq", "token_accuracy", True),
    ("recall", "auto", True), ("retrieval", "bpc", False),
])
def test_best_metric_must_be_a_metric_of_the_task(task, configured, ok):
    from weirdnet.train.tasks import check_best_metric

    info = DatasetInfo(task=task, vocab_size=256)
    if ok:
        check_best_metric(configured, info)
    else:
        with pytest.raises(ConfigError, match=f"train.best_metric={configured!r} is not a "
                                              f"metric of the {task} task"):
            check_best_metric(configured, info)


def test_items_longer_than_max_len_are_refused():
    from types import SimpleNamespace

    from weirdnet.train.tasks import check_lengths

    def backbone(n):
        return SimpleNamespace(max_len=n)

    lm = SimpleNamespace(backbone=backbone(32))
    check_lengths(lm, DatasetInfo(task="lm", max_len=33), "'train'")  # reads 32 of 33
    with pytest.raises(ConfigError, match="max_len=32 is too short for the 'val' split"):
        check_lengths(lm, DatasetInfo(task="lm", max_len=34), "'val'")
    check_lengths(lm, DatasetInfo(task="classification", max_len=32), "'train'")
    with pytest.raises(ConfigError, match="too short"):
        check_lengths(lm, DatasetInfo(task="classification", max_len=33), "'train'")
    check_lengths(lm, DatasetInfo(task="lm"), "'train'")  # no fixed length: nothing known
    s2s = SimpleNamespace(encoder=backbone(8), decoder=backbone(11))
    check_lengths(s2s, DatasetInfo(task="seq2seq", max_len=12), "'train'")
    with pytest.raises(ConfigError, match="model.encoder.max_len=8 / model.decoder.max_len=11"):
        check_lengths(s2s, DatasetInfo(task="seq2seq", max_len=13), "'train'")


@pytest.mark.parametrize("steps,every,spacing,due", [
    (20, 5, "even", [5, 10, 15, 20]),
    (23, 5, "even", [5, 10, 15, 20, 23]),  # the last step too, though not a multiple
    (20, 0, "doubling", []),
    (100, 2, "doubling", [2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80,
                          96, 100]),
    (7, 3, "doubling", [3, 6, 7]),
])
def test_eval_due(steps, every, spacing, due):
    assert [s for s in range(1, steps + 1) if eval_due(s, steps, every, spacing)] == due


def test_eval_spacing_doubling_costs_log_steps_and_shares_its_grid():
    """4 evaluations per doubling; two runs of one ``eval_every`` evaluate at the same
    steps up to the shorter one's end (equal-step comparisons)."""
    def grid(steps):
        return [s for s in range(1, steps + 1) if eval_due(s, steps, 3, "doubling")]

    assert len(grid(3 * 8 * 2 ** 10)) == 8 + 4 * 10
    short, long = grid(200), grid(5000)
    assert short[:-1] == [s for s in long if s < 200]


def test_eval_due_refuses_an_unknown_spacing():
    with pytest.raises(ValueError, match=r"eval spacing must be one of \('even', 'doubling'\), "
                                         "got 'log'"):
        eval_due(1, 10, 2, "log")
