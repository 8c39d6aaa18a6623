"""The end of a run and what it reports, through ``weirdnet train`` (issue 72): the last
step is always evaluated (items 10), a non-finite evaluation is a failure and never
best/ (item 2), a resume refuses changed data (item 4), and the periodic validation and
the final table say what each read (item 11)."""

import json
import re

import pytest

from helpers.train import run_cli, subprocess_env, weirdnet_cmd, write_config
from weirdnet.cli import main
from weirdnet.train.config import ConfigError, load_config

pytestmark = pytest.mark.slow  # training runs


def _events(run_dir, kind):
    return [e for e in map(json.loads, (run_dir / "log.jsonl").read_text().splitlines())
            if e["event"] == kind]


def _best_of(evals):
    """The step of the lowest periodic val loss (the first of equals)."""
    return min(evals, key=lambda e: e["metrics"]["loss"])["step"]


# ---- item 10: the last step is evaluated; item 11: what each evaluation read -----------

def test_the_last_step_is_evaluated_and_can_be_best(tmp_path, monkeypatch, capsys):
    """7 steps, eval_every 3: it evaluated steps 3 and 6 only, and best/ and the results
    ignored steps 7 (and 8, 9 when continued)."""
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, steps=7, eval_every=3, checkpoint_every=0, dropout=0.0)
    assert main(["train", str(config), "--no-progress"]) == 0
    run_dir = tmp_path / "runs" / "tiny"
    evals = _events(run_dir, "eval")
    assert [e["step"] for e in evals] == [3, 6, 7]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["best_step"] == _best_of(evals)
    captured = capsys.readouterr()
    # item 11: every periodic validation on the terminal, saying what it read
    said = [line for line in captured.err.splitlines() if re.match(
        r"weirdnet train: step \d+: val loss", line)]
    assert len(said) == 3 and all("periodic validation on the first 16 of" in line
                                  and "val items (2 batches" in line for line in said), said
    assert "these results: best/ on the first 32 of" in captured.out
    assert "val items (4 batches); batches of 8" in captured.out
    assert "the periodic validation (log.jsonl, the terminal): the first 16 of" in captured.out
    assert {(e["scope"], e["items"], e["batches"]) for e in evals} == {("periodic", 16, 2)}
    end = _events(run_dir, "end")[-1]
    assert end["scope"]["val"]["items"] == 32 and end["scope"]["val"]["batches"] == 4
    assert results["scope"]["final"]["val"]["items"] == 32
    # continued to 9 steps: step 9 is evaluated and considered for best/
    assert main(["train", str(run_dir), "--set", "train.steps=9", "--no-progress"]) == 0
    evals = _events(run_dir, "eval")
    assert [e["step"] for e in evals] == [3, 6, 7, 9]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["steps"] == 9 and results["best_step"] == _best_of(evals)
    metrics = json.loads((run_dir / "best" / "metrics.json").read_text())
    assert metrics["step"] == results["best_step"]


def test_a_run_stopped_by_ctrl_c_and_resumed_evaluates_its_last_step(tmp_path):
    """SIGINT at step 5 of 7 (eval_every 3), resume: the end (step 7) is evaluated, and the
    resumed run's log and results equal an uninterrupted run's."""
    config = write_config(tmp_path, steps=7, eval_every=3, checkpoint_every=0)
    full = run_cli("train", str(config), "--set", "run.name=full", "--no-progress",
                   cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    import subprocess

    env = {**subprocess_env(), "WEIRDNET_FAULT": "step=SIGINT@5"}
    cut = subprocess.run(weirdnet_cmd("train", str(config), "--set", "run.name=cut",
                                      "--no-progress"), cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert cut.returncode == 130, cut.stderr
    resumed = run_cli("train", str(tmp_path / "runs" / "cut"), "--no-progress", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    runs = {name: tmp_path / "runs" / name for name in ("full", "cut")}
    evals = {name: [(e["step"], e["metrics"]) for e in _events(run_dir, "eval")]
             for name, run_dir in runs.items()}
    assert [step for step, _ in evals["cut"]] == [3, 6, 7]
    assert evals["cut"] == evals["full"]
    results = {name: json.loads((run_dir / "results.json").read_text())
               for name, run_dir in runs.items()}
    assert results["cut"]["results"] == results["full"]["results"]
    assert results["cut"]["best_step"] == results["full"]["best_step"]


# ---- item 2: a non-finite evaluation is never a success, never best/ --------------------

VALUES = """
[data]
dataset = "test-values"
options = {{ infinite = "{infinite}" }}
[model.backbone]
dim = 16
depth = 1
d_ff = 32
heads = 2
[train]
steps = 3
batch_size = 8
eval_every = 2
eval_batches = 2
log_every = 1
"""


def _one_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and lines, err
    return lines[-1]


def test_a_non_finite_periodic_evaluation_fails_and_is_never_best(tmp_path, monkeypatch, capsys):
    """It said "best model from step 1", a table of nan, and exit status 0."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "values.toml"
    config.write_text(VALUES.format(infinite="val"))
    assert main(["train", str(config), "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == ("weirdnet train: the val loss is nan at the evaluation of step 2; the "
                    "weights are finite, so some of the split's items give non-finite "
                    "outputs: check the data"), line
    run_dir = tmp_path / "runs" / "values"
    assert not (run_dir / "best").exists() and not (run_dir / "results.json").exists()
    assert [e["step"] for e in _events(run_dir, "eval")] == [2]  # logged as it was


def test_a_non_finite_final_evaluation_is_not_a_result(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "values.toml"
    config.write_text(VALUES.format(infinite="test"))
    assert main(["train", str(config), "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("weirdnet train: the test loss is nan in the final evaluation "
                           "of best/ (step 2); no results are written"), line
    run_dir = tmp_path / "runs" / "values"
    assert not (run_dir / "results.json").exists()
    assert main(["train", str(run_dir), "--no-progress"]) == 2  # and not done on resume
    assert "the test loss is nan" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("assignments, message", [
    (["optim.lr=1e30"], "optim.lr must be a finite number > 0 and <= 1, got 1e+30"),
    (["optim.weight_decay=1e30"],
     "optim.weight_decay must be a finite number >= 0 and <= 10, got 1e+30"),
    (["optim.eps=2.0"], "optim.eps must be a finite number > 0 and <= 1, got 2.0"),
    (["optim.lr=0.5", "optim.weight_decay=2"],
     "optim.lr x optim.weight_decay must be < 1 for adamw"),
    (["optim.weight_decay=-0.1"], "optim.weight_decay must be a finite number >= 0"),
])
def test_optimizer_settings_out_of_range_are_refused(tmp_path, assignments, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write_config(tmp_path), assignments)


def test_optimizer_ranges_keep_usable_settings(tmp_path):
    config = load_config(write_config(tmp_path), ["optim.lr=1.0", "optim.weight_decay=0.5",
                                                  "optim.eps=1.0", 'optim.name="adam"',
                                                  "optim.weight_decay=10"])
    assert config.optim.lr == 1.0 and config.optim.weight_decay == 10


def test_a_huge_learning_rate_is_one_line_before_anything_is_written(tmp_path, capsys):
    config = write_config(tmp_path)
    assert main(["train", str(config), "--set", "optim.lr=1e30", "--set", "train.steps=1",
                 "--set", f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}"]) == 2
    assert _one_line(capsys.readouterr().err).startswith(
        "weirdnet train: optim.lr must be a finite number > 0 and <= 1")
    assert not (tmp_path / "runs").exists()


# ---- item 4: a resume refuses changed data ----------------------------------------------

TEXT = """
[data]
dataset = "text-file"
root = "corpus.txt"
options = {{ seq_len = 32 }}
test_split = ""
[model.backbone]
dim = 16
depth = 1
d_ff = 32
heads = 2
[train]
steps = {steps}
batch_size = 4
eval_every = 2
eval_batches = 1
final_eval_batches = 2
log_every = 1
"""


def _corpus(seed):
    import random

    rng = random.Random(seed)
    return "".join(rng.choice("abcdefgh \n") for _ in range(20000))


def test_a_resume_refuses_changed_data_unless_allowed(tmp_path):
    """Replacing a text-file root's content and resuming trained on the new text without
    a word."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(_corpus(0))
    (tmp_path / "text.toml").write_text(TEXT.format(steps=2))

    def train(*args):
        return run_cli("train", *args, "--no-progress", cwd=tmp_path)

    assert train("text.toml").returncode == 0
    run_dir = tmp_path / "runs" / "text"
    recorded = json.loads((run_dir / "data_fingerprint.json").read_text())
    assert recorded["root"] == str(corpus.resolve())
    corpus.write_text(_corpus(0))  # the same bytes again (a new mtime): still the data
    assert train("runs/text", "--set", "train.steps=4").returncode == 0
    corpus.write_text(_corpus(1))  # same size, other text
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    refused = train("runs/text", "--set", "train.steps=6")
    assert refused.returncode == 2
    line = _one_line(refused.stderr)
    assert line.startswith(f"weirdnet train: the data changed since runs/text started: "
                           f"{corpus.resolve()} changed (20,000 bytes, sha256 "), line
    assert line.endswith("restore the data, or continue on the new data with "
                         "--allow-data-change"), line
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    allowed = train("runs/text", "--set", "train.steps=6", "--allow-data-change")
    assert allowed.returncode == 0, allowed.stderr
    assert "continuing on the new data (--allow-data-change)" in allowed.stderr
    assert json.loads((run_dir / "data_fingerprint.json").read_text()) != recorded
    assert train("runs/text", "--set", "train.steps=8").returncode == 0


def test_allow_data_change_is_for_a_resume_and_is_in_the_help(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path)
    assert main(["train", str(config), "--allow-data-change"]) == 2
    assert _one_line(capsys.readouterr().err) == (
        "weirdnet train: --allow-data-change is for continuing a run: add --resume, or give "
        "the run directory as CONFIG")
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--allow-data-change" in capsys.readouterr().out


def test_a_changed_folder_root_names_the_file(tmp_path):
    from weirdnet.train.data_fingerprint import data_change, record

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.tsv").write_text("1\n")
    (tmp_path / "d" / "sub" / "b.tsv").write_text("2\n")
    first = record("listops", str(tmp_path / "d"))
    assert data_change(first, record("listops", str(tmp_path / "d"))) is None
    (tmp_path / "d" / "sub" / "b.tsv").write_text("3\n")
    assert data_change(first, record("listops", str(tmp_path / "d"))).startswith(
        f"{tmp_path / 'd' / 'sub' / 'b.tsv'} changed (2 bytes")
    (tmp_path / "d" / "a.tsv").unlink()
    assert data_change(first, record("listops", str(tmp_path / "d"))) == \
        f"{tmp_path / 'd' / 'a.tsv'} was removed"
    assert data_change(record("python-stdlib", ""), record("python-stdlib", "")) is None


def test_the_evaluation_of_the_last_step_does_not_stop_the_run_early(tmp_path, monkeypatch):
    """Patience 1 runs out at the evaluation of the last step: the run ended, it did not
    stop early (the table said ", stopped early")."""
    monkeypatch.chdir(tmp_path)
    config = load_config(write_config(tmp_path, steps=5, eval_every=4, checkpoint_every=0,
                                      dropout=0.0),
                         ["optim.lr=1e-12", "train.early_stop_patience=1"])
    from weirdnet.train.trainer import train

    summary = train(config, progress_bar=False)
    assert summary["steps"] == 5 and summary["stopped_early"] is False


def test_eval_of_a_model_giving_non_finite_metrics_is_not_a_success(tmp_path, monkeypatch,
                                                                     capsys):
    """``weirdnet eval`` printed a table of nan and exited 0 (issue 72 item 2, the same
    mistake outside the trainer): the table is printed, then one line and status 2."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "values.toml"
    config.write_text(VALUES.format(infinite=""))
    assert main(["train", str(config), "--no-progress"]) == 0
    capsys.readouterr()
    run_dir = tmp_path / "runs" / "values"
    assert main(["eval", str(run_dir), "--split", "test",
                 "--set", 'data.options={infinite = "test"}']) == 2
    captured = capsys.readouterr()
    assert "nan" in captured.out  # the table is still shown
    assert _one_line(captured.err) == (f"weirdnet eval: the test loss is nan for {run_dir}/"
                                       "best: its weights or the split's items hold "
                                       "non-finite values"), captured.err
    assert main(["eval", str(run_dir), "--split", "test"]) == 0  # finite data: a success
