"""What a run directory guarantees against a hostile or damaged folder, each through the
CLI as a user runs it: no symlink is followed out of the run, only weirdnet's provable
temporaries are removed, conflicting flags touch nothing, damaged ``best/`` and trainer
states are reported (and fallen back from), a torn log line, a full disk and a read-only
export target are one line."""

import errno
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess

import pytest

from helpers.train import subprocess_env, weirdnet_cmd, write_config
from weirdnet.cli import main
from weirdnet.run import checkpoint as ckpt
from weirdnet.run.signals import STOP

DEAD = 99_999_999  # above Linux's pid_max: never a running process


def _args(tmp_path, name, *extra):
    return ["train", str(write_config(tmp_path, steps=3, eval_every=0, checkpoint_every=1)),
            "--no-progress", "--set", f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}",
            "--set", f"run.name={name}", *extra]


@pytest.fixture
def run(tmp_path, capsys):
    """A finished 3-step run with a checkpoint per step (its directory)."""
    assert main(_args(tmp_path, "r")) == 0
    capsys.readouterr()
    return tmp_path / "runs" / "r"


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _snapshot(folder):
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns)
                  for p in folder.rglob("*") if not p.name == ".lock")


def _temp(parent, name, kind):
    """A leftover weirdnet temporary of a dead process, as a crash leaves it."""
    folder = parent / f".{name}.{kind}-{DEAD}-0123abcd"
    folder.mkdir()
    (folder / ".weirdnet-temp").write_text(f"weirdnet temporary {folder.name}\n")
    return folder


# ---- symlinks and temporaries ----------------------------------------------------------

def test_a_lock_symlink_is_never_written_through(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "runs" / "lk").mkdir(parents=True)
    (tmp_path / "runs" / "lk" / ".lock").symlink_to(victim)
    assert main(_args(tmp_path, "lk")) == 2
    assert "symbolic link" in _one_line(capsys)
    assert victim.read_text() == "precious\n"


def test_a_resume_keeps_the_users_files_that_merely_look_like_temporaries(run, capsys):
    (run / ".notes.v2.tmp").write_text("mine")
    for folder in (run / ".backup.old.tmp", run / ".results.tmp-2024",
                   run / "checkpoints" / ".mine.tmp-1", run / f".best.old-{DEAD}"):
        folder.mkdir()
        (folder / "keep.txt").write_text("mine")
    ours = _temp(run / "checkpoints", "step-00000009", "tmp")
    assert main(["train", str(run), "--no-progress", "--set", "train.steps=4"]) == 0
    err = capsys.readouterr().err
    assert f"removed {ours}" in err
    assert not ours.exists()
    assert (run / ".notes.v2.tmp").read_text() == "mine"
    for folder in (".backup.old.tmp", ".results.tmp-2024", "checkpoints/.mine.tmp-1",
                   f".best.old-{DEAD}"):
        assert (run / folder / "keep.txt").read_text() == "mine", folder


@pytest.mark.parametrize("name", [".best.old-12345", f".best.old-{DEAD}-0123abcd"])
def test_a_best_old_symlink_is_not_restored_as_best(run, tmp_path, name, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text("{}")
    (elsewhere / ".weirdnet-temp").write_text(f"weirdnet temporary {name}\n")
    (run / name).symlink_to(elsewhere, target_is_directory=True)
    shutil.rmtree(run / "best")  # best/ is missing, as between its two renames
    main(["train", str(run), "--no-progress", "--set", "train.steps=4"])
    assert (run / name).is_symlink()
    assert not (run / "best").is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == [".weirdnet-temp", "config.json"]


def test_a_killed_prune_leaves_no_half_deleted_checkpoint_under_its_name(run):
    env = {**subprocess_env(), "WEIRDNET_FAULT": "checkpoint-prune=SIGKILL"}
    cut = subprocess.run(weirdnet_cmd("train", str(run), "--no-progress", "--set",
                                      "train.steps=6", "--set", "train.keep_last=2"),
                         env=env, capture_output=True, text=True, timeout=300)
    assert cut.returncode == -signal.SIGKILL, cut.stderr
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert "step-00000001" not in names  # renamed away before any of it was deleted
    assert any(n.startswith(".step-00000001.del-") for n in names), names
    for directory in ckpt.list_checkpoints(run):
        ckpt.verify_directory(directory)
    again = subprocess.run(weirdnet_cmd("train", str(run), "--no-progress", "--set",
                                        "train.steps=6", "--set", "train.keep_last=2"),
                           env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "removed" in again.stderr and ".step-00000001.del-" in again.stderr
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step-00000005", "step-00000006"]


# ---- flags -----------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["config --resume --overwrite", "RUN --overwrite",
                                  "RUN --resume --overwrite"])
def test_conflicting_flags_are_refused_and_touch_nothing(run, tmp_path, form, capsys):
    before = _snapshot(run)
    if form.startswith("config"):
        args = _args(tmp_path, "r", "--resume", "--overwrite")
    else:
        args = ["train", str(run), "--no-progress", *form.split()[1:]]
    assert main(args) == 2
    assert "--overwrite" in _one_line(capsys)
    assert _snapshot(run) == before


# ---- damaged files ---------------------------------------------------------------------

def test_a_damaged_best_is_said_and_written_again(run, capsys):
    config = run / "best" / "config.json"
    config.write_text(config.read_text()[:20])
    assert main(["train", str(run), "--no-progress", "--set", "train.steps=5"]) == 0
    assert f"{run / 'best'} is damaged" in capsys.readouterr().err
    ckpt.verify_directory(run / "best")
    assert main(["eval", str(run)]) == 0


def _replace_trainer_state(directory, data: bytes) -> None:
    """Put ``data`` in ``trainer.pt`` with a manifest that matches it."""
    (directory / "trainer.pt").write_bytes(data)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["files"]["trainer.pt"] = hashlib.sha256(data).hexdigest()
    (directory / "manifest.json").write_text(json.dumps(manifest))


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


@pytest.mark.parametrize("data", [b"garbage" * 10, pickle.dumps(_Evil())],
                         ids=["garbage", "malicious"])
def test_an_unreadable_trainer_state_falls_back_to_the_previous_checkpoint(run, data,
                                                                          capsys):
    _replace_trainer_state(run / "checkpoints" / "step-00000003", data)
    with pytest.warns(ckpt.DamagedCheckpointWarning,
                      match="step-00000003 is damaged and is skipped.*trainer.pt"):
        assert main(["train", str(run), "--no-progress", "--set", "train.steps=4"]) == 0
    assert "from step 2" in capsys.readouterr().err
    assert not (run.parent.parent / "PWNED").exists() and not os.path.exists("PWNED")


def test_every_trainer_state_unreadable_is_one_line_naming_the_file(run, capsys):
    for directory in ckpt.list_checkpoints(run):
        _replace_trainer_state(directory, pickle.dumps(_Evil()))
    capsys.readouterr()
    with pytest.warns(ckpt.DamagedCheckpointWarning):
        assert main(["train", str(run), "--no-progress", "--set", "train.steps=4"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "every checkpoint" in last and "trainer.pt" in last


def test_a_torn_log_line_does_not_swallow_the_next_start_event(run):
    with open(run / "log.jsonl", "a") as log:
        log.write('{"event": "tr')
    assert main(["train", str(run), "--no-progress", "--set", "train.steps=4"]) == 0
    lines = (run / "log.jsonl").read_text().splitlines()
    events = []
    for line in lines:
        try:
            events.append(json.loads(line)["event"])
        except ValueError:
            assert line == '{"event": "tr'
    assert events.count("start") == 2


# ---- full disk, read-only target -------------------------------------------------------

def _fill_disk_at(monkeypatch, nth: int):
    """From the ``nth`` trainer.pt written on, the disk is full (as ENOSPC says)."""
    real, calls = ckpt.write_atomic, []

    def write(path, data):
        if path.name == "trainer.pt":
            calls.append(path)
            if len(calls) >= nth:
                real(path, b"")  # part of it made it to the disk
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(ckpt, "write_atomic", write)


def test_a_full_disk_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                                    capsys):
    _fill_disk_at(monkeypatch, 2)
    assert main(_args(tmp_path, "full")) == 2
    line = _one_line(capsys)
    run = tmp_path / "runs" / "full"
    assert "no space left" in line and str(run / "checkpoints") in line
    assert "needs about" in line
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-00000001"]
    directory, _, state = ckpt.load_latest(run)
    assert directory.name == "step-00000001" and state["progress"]["step"] == 1
    assert main(["train", str(run), "--no-progress"]) == 2  # resuming: the same
    assert "no space left" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.fixture
def read_only(tmp_path):
    """A read-only folder: a read-only tmpfs where mounting is allowed (root ignores
    modes), else a folder without write permission (skipped as root)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs",
                              str(folder)], capture_output=True).returncode == 0
    if not mounted:
        if os.geteuid() == 0:
            pytest.skip("cannot mount a read-only tmpfs, and root writes anywhere")
        folder.chmod(0o555)
    yield folder
    if mounted:
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o755)


def test_export_hf_into_a_read_only_folder_is_one_line(run, read_only, capsys):
    pytest.importorskip("transformers")
    assert main(["export-hf", str(run), str(read_only / "hf")]) == 2
    line = _one_line(capsys)
    assert "not writable" in line and str(read_only) in line


# ---- signals ---------------------------------------------------------------------------

def test_the_first_deferred_signal_is_announced_at_once(capfd):
    with STOP.deferred("weirdnet train: {signal} received: stopping after the step"):
        os.kill(os.getpid(), signal.SIGINT)
        assert STOP.requested
        assert capfd.readouterr().err == "weirdnet train: SIGINT received: stopping after " \
                                         "the step\n"
    STOP.reset()
