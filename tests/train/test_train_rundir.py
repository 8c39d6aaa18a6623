"""Run directories: --overwrite removes only runs, plain run names, one writer per run,
stale temporaries, continuing a run (schedule, fewer steps, complete runs), and the
message when a checkpoint does not fit."""

import json
import math
import os
import subprocess
import time

import pytest

from helpers.train import run_cli, subprocess_env, weirdnet_cmd, write_config
from weirdnet.cli import main
from weirdnet.config.typed import ConfigError
from weirdnet.models.base import CheckpointError
from weirdnet.run.files import DirectoryBusyError, DirectoryLock
from weirdnet.run.rundir import clean_stale, foreign_entries
from weirdnet.train.config import load_config
from weirdnet.train.schedule import extend_phases, phased_multiplier
from weirdnet.train.trainer import RunError, train


def _config(tmp_path, *overrides, **kwargs):
    return load_config(write_config(tmp_path, **kwargs),
                       [f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}", *overrides])


def _train(tmp_path, *overrides, resume=False, overwrite=False, **kwargs):
    return train(_config(tmp_path, *overrides, **kwargs), resume=resume, overwrite=overwrite,
                 progress_bar=False)


@pytest.fixture
def victim(tmp_path):
    """A directory of someone else's files, where a run might be pointed."""
    folder = tmp_path / "runs" / "victim"
    folder.mkdir(parents=True)
    (folder / "important.txt").write_text("precious")
    return folder


# ---- --overwrite and run.name --------------------------------------------------------

def test_overwrite_refuses_a_directory_that_is_not_a_run(tmp_path, victim, capsys):
    config = write_config(tmp_path)
    status = main(["train", str(config), "--set", f"run.out_dir={str(tmp_path / 'runs')!r}",
                   "--set", "run.name=victim", "--overwrite", "--set", "train.steps=1"])
    assert status == 2
    err = capsys.readouterr().err
    assert "is not a weirdnet run" in err and "important.txt" in err
    assert len(err.strip().splitlines()) == 1
    assert (victim / "important.txt").read_text() == "precious"
    assert sorted(p.name for p in victim.iterdir()) == ["important.txt"]  # no lock file


@pytest.mark.parametrize("flag", ["--resume", None])
def test_resume_or_plain_start_refuses_a_directory_that_is_not_a_run(tmp_path, victim,
                                                                     flag, capsys):
    args = ["train", str(write_config(tmp_path)), "--set",
            f"run.out_dir={str(tmp_path / 'runs')!r}", "--set", "run.name=victim"]
    assert main(args + ([flag] if flag else [])) == 2
    assert "is not a weirdnet run" in capsys.readouterr().err
    assert (victim / "important.txt").read_text() == "precious"


def test_overwrite_refuses_a_run_that_holds_foreign_files(tmp_path):
    _train(tmp_path, "run.name=r", steps=2, eval_every=0)
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "notes.md").write_text("mine")
    (run_dir / "checkpoints" / "my-backup").mkdir()
    assert foreign_entries(run_dir) == ["checkpoints/my-backup", "notes.md"]
    with pytest.raises(RunError, match="--overwrite refused.*checkpoints/my-backup, notes.md"):
        _train(tmp_path, "run.name=r", overwrite=True, steps=2, eval_every=0)
    assert (run_dir / "notes.md").read_text() == "mine"
    assert (run_dir / "results.json").is_file()


def test_overwrite_replaces_a_run(tmp_path):
    _train(tmp_path, "run.name=r", steps=3, eval_every=0, checkpoint_every=1)
    run_dir = tmp_path / "runs" / "r"
    summary = _train(tmp_path, "run.name=r", overwrite=True, steps=2, eval_every=0,
                     checkpoint_every=1)
    assert summary["steps"] == 2
    assert [p.name for p in sorted((run_dir / "checkpoints").iterdir())] == [
        "step-00000001", "step-00000002"]
    starts = [line for line in (run_dir / "log.jsonl").read_text().splitlines()
              if '"start"' in line]
    assert len(starts) == 1


@pytest.mark.parametrize("name", ["..", ".", "../escape", "/tmp/abs", "a/b", ".hidden", " x"])
def test_run_name_must_be_a_plain_name(tmp_path, name, capsys):
    config = write_config(tmp_path)
    status = main(["train", str(config), "--set", f"run.name={json.dumps(name)}",
                   "--set", f"run.out_dir={str(tmp_path / 'runs')!r}", "--overwrite"])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "plain name" in err, err
    assert not (tmp_path / "escape").exists()
    assert tmp_path.is_dir() and (tmp_path / "tiny.toml").is_file()


def test_empty_existing_directory_is_used(tmp_path):
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    assert _train(tmp_path, "run.name=empty", steps=1, eval_every=0)["steps"] == 1


# ---- one writer per run --------------------------------------------------------------

def test_lock_names_the_holder():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        with DirectoryLock(folder, "first"):
            with pytest.raises(DirectoryBusyError, match=f"process {os.getpid()} \\(first"):
                DirectoryLock(folder, "second").acquire()
        DirectoryLock(folder, "third").acquire().release()  # free again


@pytest.mark.slow  # two `weirdnet train` processes
@pytest.mark.parametrize("flags", [("--resume",), ("--overwrite",)])
def test_a_second_writer_fails_at_once_naming_the_first(tmp_path, flags):
    # far more steps than the test lasts: the first writer must still be training when
    # it is stopped, however slow the second one's start is on this machine
    config = write_config(tmp_path, steps=1_000_000, eval_every=0, checkpoint_every=50)
    first = subprocess.Popen(weirdnet_cmd("train", str(config), "--set", "run.name=busy",
                                          "--no-progress"),
                             cwd=tmp_path, env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "runs" / "busy"
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "log.jsonl").is_file():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        before = {p.name for p in run_dir.iterdir() if not p.name.startswith(".")}
        second = run_cli("train", str(config), "--set", "run.name=busy", *flags,
                         "--no-progress", cwd=tmp_path, timeout=60)
        assert second.returncode == 2
        err = second.stderr.strip()
        assert len(err.splitlines()) == 1, err
        assert f"in use by process {first.pid}" in err
        assert first.poll() is None, "the first writer must be untouched"
        assert before <= {p.name for p in run_dir.iterdir()}  # nothing removed
    finally:
        first.terminate()
        first.communicate(timeout=120)
    assert first.returncode == 143
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert [e["event"] for e in log].count("start") == 1


def _leftover(parent, name, kind, marked=True):
    """A temporary of weirdnet's that a killed process (PID above pid_max) left."""
    folder = parent / f".{name}.{kind}-99999999-0123abcd"
    folder.mkdir(parents=True)
    if marked:
        (folder / ".weirdnet-temp").write_text(f"weirdnet temporary {folder.name}\n")
    return folder


def test_stale_temporaries_are_cleaned_and_a_half_replaced_best_is_restored(tmp_path):
    run_dir = tmp_path / "run"
    half = _leftover(run_dir / "checkpoints", "step-00000004", "tmp")
    (half / "model.safetensors").write_bytes(b"x" * 100)
    old = _leftover(run_dir, "best", "old")
    (old / "config.json").write_text("{}")
    _leftover(run_dir, "best", "tmp")
    _leftover(run_dir, "results.json", "tmp")
    _leftover(run_dir, "log.jsonl", "tmp", marked=False)  # killed before its marker
    step = run_dir / "checkpoints" / "step-00000002"
    step.mkdir()
    (step / ".weirdnet-temp").write_text("weirdnet temporary .step-00000002.del-1-0123abcd\n")
    done = clean_stale(run_dir)
    assert len(done) == 5, done
    assert sorted(p.name for p in run_dir.iterdir()) == ["best", "checkpoints"]
    assert sorted(p.name for p in (run_dir / "best").iterdir()) == ["config.json"]
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-00000002"]
    assert list(step.iterdir()) == []  # the stale marker went, the checkpoint stayed


# ---- continuing a run ----------------------------------------------------------------

def _lrs(run_dir):
    return {e["step"]: e["lr"] for e in map(json.loads,
                                             (run_dir / "log.jsonl").read_text().splitlines())
            if e["event"] == "train"}


@pytest.mark.parametrize("how", ["keep", "rewarm", "stretch"])
def test_continuing_with_more_steps_follows_schedule_extend(tmp_path, how, capfd):
    overrides = ["run.name=r", "train.log_every=1", "optim.lr=0.01",
                 "schedule.min_lr_ratio=0.1"]
    _train(tmp_path, *overrides, steps=10, eval_every=0)
    run_dir = tmp_path / "runs" / "r"
    capfd.readouterr()
    config = load_config(run_dir / "train_config.json",
                         ["train.steps=20", f"schedule.extend={how!r}"])
    train(config, resume=True, progress_bar=False)
    err = capfd.readouterr().err
    assert "resuming" in err and "from step 10" in err
    assert "train.steps 10 -> 20" in err and f"schedule.extend={how!r}" in err
    assert "betas" not in err  # a list read back from JSON is not a change
    lr = _lrs(run_dir)
    if how == "keep":  # no jump: the rate stays at the end of the cosine
        assert all(math.isclose(lr[s], 0.001, rel_tol=1e-6) for s in range(10, 21))
    elif how == "rewarm":  # warmup (4 steps) back to 0.01, then down to 0.001 at step 20
        assert lr[10] < lr[11] < lr[12] < lr[13]  # lr[s]: the rate of step s + 1
        assert math.isclose(lr[13], 0.01, rel_tol=1e-6)
        assert math.isclose(lr[20], 0.001, rel_tol=1e-6)
    else:  # stretch: the 20-step schedule from the start; the rate jumps up at step 10
        expected = phased_multiplier("cosine", 4, [[0, 20]], 0.1)
        assert math.isclose(lr[15], 0.01 * expected(15), rel_tol=1e-6)
        assert lr[11] > 0.005


def test_schedule_phases():
    phases = [[0, 10]]
    assert extend_phases(phases, 10, 20, "keep") == [[0, 10]]
    assert extend_phases(phases, 10, 20, "stretch") == [[0, 20]]
    assert extend_phases(phases, 10, 20, "rewarm") == [[0, 10], [10, 20]]
    assert extend_phases(phases, 10, 10, "rewarm") == [[0, 10]]
    factor = phased_multiplier("cosine", 2, [[0, 10], [10, 20]], 0.0)
    assert factor(9) == pytest.approx(0.0) and factor(10) == pytest.approx(0.5)
    assert factor(11) == pytest.approx(1.0) and factor(19) == pytest.approx(0.0)


def test_fewer_steps_than_done_is_an_error_and_changes_nothing(tmp_path):
    _train(tmp_path, "run.name=r", steps=6, eval_every=0)
    run_dir = tmp_path / "runs" / "r"
    saved = (run_dir / "train_config.json").read_text()
    config = load_config(run_dir / "train_config.json", ["train.steps=3"])
    with pytest.raises(RunError, match="train.steps=3 is fewer than the 6 steps"):
        train(config, resume=True, progress_bar=False)
    assert (run_dir / "train_config.json").read_text() == saved


def test_a_complete_run_is_not_retrained_or_rewritten(tmp_path, capfd):
    first = _train(tmp_path, "run.name=r", steps=4, eval_every=0)
    run_dir = tmp_path / "runs" / "r"
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()
              and p.name != ".lock"}
    capfd.readouterr()
    again = train(load_config(run_dir / "train_config.json"), resume=True, progress_bar=False)
    assert "nothing to do" in capfd.readouterr().err
    assert again["results"] == first["results"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_resume_without_a_checkpoint_says_it_starts_from_step_0(tmp_path, capfd):
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "train_config.json").write_text(
        json.dumps(_config(tmp_path, "run.name=r", steps=2, eval_every=0).to_dict()))
    _train(tmp_path, "run.name=r", resume=True, steps=2, eval_every=0)
    assert "has no checkpoint yet; starting from step 0" in capfd.readouterr().err


def test_a_checkpoint_that_does_not_fit_names_the_tensors(tmp_path):
    _train(tmp_path, "run.name=r", steps=2, eval_every=0)
    run_dir = tmp_path / "runs" / "r"
    config = load_config(run_dir / "train_config.json", ["model.backbone.d_ff=48"])
    with pytest.raises(CheckpointError, match=r"does not fit the model.*ffn.*\(48, 32\)"):
        train(config, resume=True, progress_bar=False)


def test_bad_schedule_extend_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'rewarm'"):
        _config(tmp_path, "schedule.extend='rewarn'")


def test_a_run_that_cannot_start_leaves_no_directory_behind(tmp_path, capsys):
    config = write_config(tmp_path)
    status = main(["train", str(config), "--set", f"run.out_dir={str(tmp_path / 'runs')!r}",
                   "--set", "model.backbone.dpeth=2"])
    assert status == 2 and "did you mean 'depth'" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "tiny").exists()


def test_eval_shows_progress(tmp_path, capsys):
    _train(tmp_path, "run.name=r", steps=1, eval_every=0)
    assert main(["eval", str(tmp_path / "runs" / "r"), "--limit", "8",
                 "--batch-size", "4"]) == 0
    assert "eval val" in capsys.readouterr().err


# ---- --overwrite looks at every level (issue 35, item 1) ------------------------------

def _user_file(run_dir, where):
    """Put a user's file at ``where`` (a path relative to ``run_dir``)."""
    path = run_dir / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("mine")
    return path


@pytest.mark.parametrize("where", [
    "best/NOTES.md",
    "checkpoints/step-00000002/analysis/data.csv",
    "checkpoints/step-00000002/notes.txt",
    "tensorboard/my-plot.png",
    "tensorboard/sub/events.out.tfevents.1",
    "results.json.d/mine.txt",
])
def test_overwrite_refuses_foreign_files_at_every_level(tmp_path, where, capsys):
    _train(tmp_path, "run.name=r", steps=2, eval_every=0, checkpoint_every=2)
    capsys.readouterr()  # what the training said (its evaluation)
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "tensorboard").mkdir(exist_ok=True)
    (run_dir / "tensorboard" / "events.out.tfevents.1.host.1.0").write_bytes(b"tb")
    assert foreign_entries(run_dir) == []
    mine = _user_file(run_dir, where)
    assert foreign_entries(run_dir), where
    before = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    status = main(["train", str(write_config(tmp_path, steps=2, eval_every=0)), "--set",
                   f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}", "--set", "run.name=r",
                   "--overwrite", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "--overwrite refused" in err, err
    assert where.split("/")[0] in err
    assert mine.read_text() == "mine"
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == before


def test_a_weirdnet_name_of_the_wrong_kind_is_foreign(tmp_path):
    _train(tmp_path, "run.name=r", steps=1, eval_every=0)
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "curves.png").mkdir()  # weirdnet writes a file there, never a folder
    (run_dir / "curves.png" / "keep.txt").write_text("mine")
    (run_dir / "checkpoints" / "step-00000009").write_text("a file, not a checkpoint")
    os.symlink(tmp_path, run_dir / "best" / "link")
    assert foreign_entries(run_dir) == ["best/link", "checkpoints/step-00000009",
                                        "curves.png"]


def test_overwrite_removes_a_run_with_its_tensorboard_events_and_temporaries(tmp_path):
    _train(tmp_path, "run.name=r", steps=2, eval_every=0, checkpoint_every=1)
    run_dir = tmp_path / "runs" / "r"
    (run_dir / "tensorboard").mkdir()
    (run_dir / "tensorboard" / "events.out.tfevents.1700000000.host.42.0").write_bytes(b"x")
    (_leftover(run_dir / "best", "metrics.json", "tmp") / "metrics.json").write_text("half")
    _leftover(run_dir / "checkpoints" / "step-00000002", "trainer.pt", "tmp")
    assert foreign_entries(run_dir) == []
    (run_dir / "best" / ".metrics.json.abc123.tmp").write_text("a user's")
    assert foreign_entries(run_dir) == ["best/.metrics.json.abc123.tmp"]
    (run_dir / "best" / ".metrics.json.abc123.tmp").unlink()
    _train(tmp_path, "run.name=r", overwrite=True, steps=1, eval_every=0)
    assert not (run_dir / "tensorboard").exists()
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-00000001"]


def test_keep_says_the_rate_still_rises_when_the_warmup_outlasts_the_old_steps(tmp_path,
                                                                               capfd):
    """warmup_steps=4 > train.steps=2: continued with extend='keep', the rate keeps
    rising to optim.lr and then falls; the message must say so (issue 35, item 6)."""
    _train(tmp_path, "run.name=r", "train.log_every=1", steps=2, eval_every=0)
    run_dir = tmp_path / "runs" / "r"
    capfd.readouterr()
    train(load_config(run_dir / "train_config.json", ["train.steps=8"]), resume=True,
          progress_bar=False)
    err = capfd.readouterr().err
    note = next(line for line in err.splitlines() if "schedule.extend='keep'" in line)
    lr = _lrs(run_dir)
    assert lr[2] < lr[3] and lr[8] < lr[3]  # lr[s]: the rate of step s + 1
    assert "stays at its last value" not in note and "rising" in note, note
    assert "0.001 at step 4" in note and "0.0001" in note, note
