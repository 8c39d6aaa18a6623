"""`weirdnet train RUN_DIR` trains RUN_DIR itself (issue 35, item 2), and path options
that name a file where a folder is expected, or the reverse, are one line and status 2
(item 8)."""

import json
import shutil

import pytest

from helpers.train import write_config
from weirdnet.cli import main
from weirdnet.train.config import load_config
from weirdnet.train.trainer import train


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A finished 4-step run with checkpoints at steps 2, 3, 4 (keep_last 3)."""
    tmp = tmp_path_factory.mktemp("ref")
    config = load_config(write_config(tmp, steps=4, eval_every=2, checkpoint_every=1),
                         [f"run.out_dir={json.dumps(str(tmp / 'runs'))}", "run.name=ref"])
    train(config, progress_bar=False)
    return tmp / "runs" / "ref"


def _snapshot(folder):
    """Every file of ``folder`` with its bytes and modification time."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _starts(run_dir):
    return [e for e in map(json.loads, (run_dir / "log.jsonl").read_text().splitlines())
            if e["event"] == "start"]


def _steps(run_dir):
    return [p.name for p in sorted((run_dir / "checkpoints").iterdir())]


def _stored_run(run_dir):
    return json.loads((run_dir / "train_config.json").read_text())["run"]


def _lines(text):
    return [line for line in text.splitlines() if line.strip()]


def test_a_copied_run_is_trained_where_it_is_and_the_original_is_untouched(
        reference, tmp_path, monkeypatch, capsys):
    before = _snapshot(reference)
    copy = tmp_path / "elsewhere" / "c1"
    shutil.copytree(reference, copy)
    monkeypatch.chdir(tmp_path)  # neither the original's nor the copy's parent
    assert main(["train", str(copy), "--set", "train.steps=6", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert _snapshot(reference) == before, "the original run was changed"
    notes = [line for line in _lines(err) if "'ref'" in line]
    assert len(notes) == 1 and str(copy) in notes[0], err
    assert f"resuming {copy} from step 4" in err
    assert _starts(copy)[-1]["resumed_from"] == str(copy / "checkpoints" / "step-00000004")
    assert _steps(copy) == ["step-00000004", "step-00000005", "step-00000006"]
    assert _stored_run(copy)["name"] == "c1"
    assert _stored_run(copy)["out_dir"] == str(copy.parent)
    assert json.loads((copy / "results.json").read_text())["run_dir"] == str(copy)
    assert not (tmp_path / "runs").exists()


def test_a_renamed_run_resumes(reference, tmp_path, monkeypatch, capsys):
    moved = tmp_path / "runs" / "renamed"
    shutil.copytree(reference, moved)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "runs/renamed", "--set", "train.steps=5", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "resuming runs/renamed from step 4" in err
    assert _starts(moved)[-1]["resumed_from"] is not None
    assert json.loads((moved / "results.json").read_text())["steps"] == 5
    assert (_stored_run(moved)["name"], _stored_run(moved)["out_dir"]) == ("renamed", "runs")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["renamed"]


def test_a_run_given_from_another_directory_or_as_dot(reference, tmp_path, monkeypatch,
                                                      capsys):
    copy = tmp_path / "deep" / "runs" / "ref"
    shutil.copytree(reference, copy)
    monkeypatch.chdir(copy)
    assert main(["train", ".", "--set", "train.steps=5", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "from step 4" in err
    assert json.loads((copy / "results.json").read_text())["steps"] == 5
    assert sorted(p.name for p in copy.parent.iterdir()) == ["ref"]
    assert not (copy / "runs").exists()
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(copy), "--no-progress"]) == 0  # complete: nothing to do
    assert "nothing to do" in capsys.readouterr().err


def test_the_same_place_says_nothing_about_the_name(reference, tmp_path, monkeypatch,
                                                    capsys):
    copy = tmp_path / "runs" / "ref"
    shutil.copytree(reference, copy)
    config = json.loads((copy / "train_config.json").read_text())
    config["run"]["out_dir"] = "runs"
    (copy / "train_config.json").write_text(json.dumps(config))
    monkeypatch.chdir(tmp_path)
    assert main(["train", "runs/ref", "--set", "train.steps=5", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "stored" not in err and "resuming runs/ref from step 4" in err


@pytest.mark.parametrize("key", ["run.name=other", "run.out_dir=elsewhere"])
def test_moving_a_run_with_set_is_refused(reference, tmp_path, key, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "c"
    shutil.copytree(reference, copy)
    before = _snapshot(copy)
    assert main(["train", str(copy), "--set", key, "--no-progress"]) == 2
    err = _lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("weirdnet train: ") and "--set" in err[0]
    assert _snapshot(copy) == before
    assert not (tmp_path / "elsewhere").exists()


# ---- files where folders are expected, and the reverse (issue 35, item 8) -----------

@pytest.fixture
def places(tmp_path):
    """A file, a folder and a PNG-named folder to point options at."""
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.png").mkdir()
    return tmp_path


def _fails_in_one_line(args, capsys, *words):
    status = main(args)
    err = capsys.readouterr().err
    lines = _lines(err)
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"weirdnet {args[0]}: "), err
    assert "Traceback" not in err and all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize("out_dir, words", [
    ("afile", ["run.out_dir='{tmp}/afile' is a file, not a folder"]),
    ("afile/sub", ["afile, which is a file"]),
])
def test_train_out_dir_that_is_a_file(places, out_dir, words, capsys):
    config = write_config(places, steps=1, eval_every=0)
    _fails_in_one_line(["train", str(config), "--set",
                        f"run.out_dir={json.dumps(str(places / out_dir))}", "--no-progress"],
                       capsys, *[w.format(tmp=places) for w in words])
    assert (places / "afile").read_text() == "not a folder"


def test_train_data_root_that_is_a_file(places, capsys):
    config = write_config(places, steps=1, eval_every=0)
    _fails_in_one_line(["train", str(config), "--set",
                        f"data.root={json.dumps(str(places / 'afile'))}", "--set",
                        f"run.out_dir={json.dumps(str(places / 'runs'))}"],
                       capsys, "data.root=", "is a file")
    assert not (places / "runs").exists()


def test_train_config_that_is_a_plain_folder(places, capsys):
    _fails_in_one_line(["train", str(places / "adir")], capsys,
                       "directory without train_config.json")


def test_train_run_dir_whose_checkpoints_is_a_file(reference, places, capsys):
    copy = places / "r"
    shutil.copytree(reference, copy)
    shutil.rmtree(copy / "checkpoints")
    (copy / "checkpoints").write_text("oops")
    _fails_in_one_line(["train", str(copy), "--set", "train.steps=5", "--no-progress"],
                       capsys, "checkpoints is not the folder weirdnet writes")
    assert (copy / "checkpoints").read_text() == "oops"


@pytest.mark.parametrize("command", ["eval", "generate"])
def test_model_commands_given_a_file(reference, command, capsys):
    _fails_in_one_line([command, str(reference / "train_config.json")], capsys,
                       "is a file", f"such as {reference}")
    _fails_in_one_line([command, str(reference / "best" / "model.safetensors")], capsys,
                       "is a file", f"such as {reference / 'best'}")


def test_eval_data_root_that_is_a_file(reference, places, capsys):
    _fails_in_one_line(["eval", str(reference), "--set",
                        f"data.root={json.dumps(str(places / 'afile'))}"], capsys,
                       "data.root=", "is a file")


@pytest.mark.parametrize("out, words", [
    ("adir.png", ["--out", "adir.png is a folder"]),
    ("adir", ["--out", "is a folder"]),
    ("afile/x.png", ["--out", "afile is a file, not a folder"]),
])
def test_plot_out_that_cannot_be_a_file(reference, places, out, words, capsys):
    pytest.importorskip("matplotlib")
    _fails_in_one_line(["plot", str(reference), "--out", str(places / out)], capsys, *words)
    assert (places / "afile").read_text() == "not a folder"


def test_plot_default_out_that_is_a_folder(reference, places, capsys):
    pytest.importorskip("matplotlib")
    copy = places / "r"
    shutil.copytree(reference, copy)
    (copy / "curves.png").mkdir()
    _fails_in_one_line(["plot", str(copy)], capsys, "curves.png is a folder")


def test_plot_run_that_is_a_file(places, capsys):
    _fails_in_one_line(["plot", str(places / "afile")], capsys, "afile")
