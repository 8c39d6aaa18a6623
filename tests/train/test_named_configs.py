"""Configs shipped inside the package and reachable by name from any directory."""

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from weirdnet.cli import main
from weirdnet.config.typed import ConfigError
from weirdnet.train.config import load_config
from weirdnet.train.named_configs import config_dir, names, resolve, summaries

REPO = Path(__file__).resolve().parents[2]


def test_the_package_configs_are_the_repository_configs():
    """One copy: the package's folder is the repository's configs/ (a link)."""
    assert config_dir().resolve() == (REPO / "configs").resolve()
    files = list((REPO / "configs").rglob("*.toml"))
    found = names()
    assert {"lra/listops", "lra/listops-cpu", "quickstart"} <= set(found)
    assert len(found) == len(set(found)) == len(files) + sum("-cpu" in n for n in found)
    assert not [p for p in files if p.stem.endswith("-cpu")]  # those are overlays


def test_an_overlay_is_reached_by_name_and_by_path(tmp_path, monkeypatch):
    """``X-cpu`` (or the path ``X-cpu.toml``) is ``X.toml`` with its [overlay.cpu] table;
    a file of that name, where one exists, wins."""
    (tmp_path / "base.toml").write_text(
        '# Base.\n[data]\ndataset = "listops"\n[train]\nsteps = 50\n\n'
        '# Small.  More words.\n[overlay.cpu]\n[overlay.cpu.train]\nsteps = 5\n'
        '[overlay.cpu.data.options]\nmax_len = 100\n')
    monkeypatch.chdir(tmp_path)
    assert resolve("base-cpu.toml") == Path("base-cpu.toml")
    config = load_config(resolve("base-cpu.toml"))
    assert (config.run.name, config.train.steps, config.data.options) == \
        ("base-cpu", 5, {"max_len": 100})
    assert load_config("base.toml").train.steps == 50  # the overlay applies only by name
    with pytest.raises(ConfigError, match="base-gpu.toml does not exist"):
        load_config("base-gpu.toml")
    monkeypatch.setenv("WEIRDNET_CONFIGS", str(tmp_path))
    (tmp_path / "quickstart.toml").write_text("# Quick.\n")
    assert names() == ["base", "base-cpu", "quickstart"]
    assert [(c.name, c.summary) for c in summaries()] == [
        ("base", "Base."), ("base-cpu", "Small."), ("quickstart", "Quick.")]
    (tmp_path / "base-cpu.toml").write_text('[data]\ndataset = "listops"\n')
    assert load_config("base-cpu.toml").train.steps == 1000  # the file, not the overlay


@pytest.mark.parametrize("bad,message", [
    ('[overlay]\ncpu = 3\n', "must hold config tables"),
    ('[overlay.CPU.train]\nsteps = 1\n', "lowercase letters and digits"),
    ('overlay = 3\n', "must be tables"),
])
def test_a_bad_overlay_is_a_clear_error(tmp_path, bad, message):
    (tmp_path / "x.toml").write_text(bad + '[data]\ndataset = "listops"\n')
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "x.toml")


def test_resolve_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    want = (REPO / "configs" / "lra" / "listops-cpu.toml").resolve()
    for spelling in ("lra/listops-cpu", "lra/listops-cpu.toml", "configs/lra/listops-cpu"):
        assert resolve(spelling).resolve() == want
    mine = tmp_path / "lra" / "listops-cpu.toml"
    mine.parent.mkdir()
    mine.write_text("")
    assert resolve("lra/listops-cpu.toml") == Path("lra/listops-cpu.toml")  # a path wins
    with pytest.raises(ConfigError, match="did you mean lra/listops-cpu"):
        resolve("lra/lisops-cpu")


def test_every_config_names_what_it_follows():
    found = summaries()
    assert {c.name for c in found} >= {"quickstart", "lra/listops", "lm/enwik8-weirdnet-small"}
    assert all(c.summary for c in found)
    listops = next(c for c in found if c.name == "lra/listops")
    assert "Table II" in listops.summary


def test_configs_command(capsys):
    assert main(["configs", "uea/heartbeat"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["uea/heartbeat", "uea/heartbeat-cpu"]
    assert main(["configs", "--path"]) == 0
    assert Path(capsys.readouterr().out.strip()).resolve() == (REPO / "configs").resolve()
    assert main(["configs", "no-such"]) == 2
    assert "no config name contains 'no-such'" in capsys.readouterr().err


def test_a_missing_config_folder_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIRDNET_CONFIGS", str(tmp_path))
    with pytest.raises(ConfigError, match="WEIRDNET_CONFIGS"):
        resolve("quickstart")


@pytest.mark.slow  # builds a wheel
def test_the_wheel_ships_every_config(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = next(tmp_path.glob("weirdnet-*.whl"))
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("weirdnet/configs/")}
    want = {"weirdnet/configs/" + p.relative_to(REPO / "configs").as_posix()
            for p in (REPO / "configs").rglob("*") if p.suffix in (".toml", ".md")}
    assert want <= shipped


def test_configs_show_resolves_a_file_by_its_path(tmp_path, capsys, monkeypatch):
    """A path works as a name does: its ``extends``, its overlay (by the overlay's path)
    and its preset are resolved; ``--set`` applies as it does to ``weirdnet train``."""
    (tmp_path / "base.toml").write_text(
        '[data]\ndataset = "listops"\n[train]\nsteps = 50\n[optim]\nlr = 0.5\n')
    (tmp_path / "x.toml").write_text(
        '# X.\nextends = "base.toml"\n[model]\npreset = "lra-listops-cpu"\n'
        '[model.backbone]\ndim = 32\n# Small.\n[overlay.cpu]\n[overlay.cpu.train]\nsteps = 5\n')
    monkeypatch.chdir(tmp_path)
    assert main(["configs", "show", "x-cpu.toml", "--set", "train.batch_size=4"]) == 0
    shown = tomllib.loads(capsys.readouterr().out)
    assert (shown["train"]["steps"], shown["train"]["batch_size"], shown["optim"]["lr"]) == \
        (5, 4, 0.5)
    assert shown["run"]["name"] == "x-cpu" and shown["train"]["keep_last"] == 2  # defaults
    assert shown["model"]["class"] == "WeirdNetClassifier"
    assert {k: shown["model"]["backbone"][k] for k in ("dim", "depth", "d_ff", "pattern")} \
        == {"dim": 32, "depth": 2, "d_ff": 128, "pattern": "A"}
    assert "vocab_size" not in shown["model"]["backbone"]  # the dataset's, at the run


@pytest.mark.parametrize("argv,message", [
    (["show", "lra/lisops-cpu"], "did you mean lra/listops-cpu"),
    (["show", "no-such.toml"], "`weirdnet configs list` lists them"),
    (["show"], "show takes one config name or path"),
    (["show", "a", "b"], "show takes one config name or path"),
    (["list", "a", "b"], "list takes one PATTERN"),
    (["list", "--set", "train.steps=1"], "--set goes with show"),
    (["show", "quickstart", "--set", "train.stepz=1"], "did you mean 'train.steps'"),
])
def test_configs_show_and_list_refuse_bad_input_in_one_line(argv, message, capsys):
    assert main(["configs", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("weirdnet configs: ") and message in err


def test_configs_show_refuses_a_folder(tmp_path, capsys):
    assert main(["configs", "show", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_configs_list_is_the_default(capsys):
    assert main(["configs", "list", "uea/heartbeat"]) == 0
    listed = capsys.readouterr().out
    assert main(["configs", "uea/heartbeat"]) == 0
    assert capsys.readouterr().out == listed
    assert main(["configs", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(names())


def test_the_toml_writer_reads_back_as_written():
    from weirdnet.config.toml_write import dumps

    table = {"a": 1, "b": {"c": [1, 2.5, True], "d": {}, "e": {"f": 'x\ny"\x7fé'},
                           "g": None},
             "h": {"i": {"j": 1e-9, "k": float("inf")}}, "l": [{"x": 1}], "odd key": "s"}
    text = dumps(table, "a header\nof two lines")
    assert text.startswith("# a header\n# of two lines\n")
    back = tomllib.loads(text)
    del table["b"]["g"]  # TOML has no null: None is left out (the default)
    assert back == table
