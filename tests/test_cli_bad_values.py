"""Regression tests for bad values that used to end in a traceback: each is one line on
stderr starting with ``weirdnet <command>:`` and exit status 2."""

import json
import shutil
import sys

import pytest
import torch

from helpers.train import write_config
from weirdnet.cli import main
from weirdnet.train.config import load_config
from weirdnet.train.trainer import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-values")
    config_path = write_config(tmp, steps=2, eval_every=0)
    out_dir = json.dumps(str(tmp / "runs"))
    train(load_config(config_path, [f"run.out_dir={out_dir}"]), progress_bar=False)
    return config_path, tmp / "runs" / "tiny"


CASES = [
    ("train", ["--set", "data.options.seq_len=abc"], "data.options.seq_len must be int"),
    ("train", ["--set", "data.options.seqlen=64"], "did you mean 'data.options.seq_len'"),
    ("eval", ["--set", "data.options.seq_len=abc"], "data.options.seq_len must be int"),
    ("eval", ["--set", "data.dataset=listops"], "the model and the dataset do not match"),
    ("generate", ["--device", "tpu"], "is not a device name"),
    ("generate", ["--encoding", "nosuch"], "unknown text encoding 'nosuch'"),
    ("generate", ["--seed", "99999999999999999999999"],
     "--seed must be an int of at most 64 bits (-2^63 <= value < 2^63), "
     "got 99999999999999999999999"),
    ("generate", ["--seed", "-9223372036854775809"], "--seed must be an int of at most 64 bits"),
]
if not torch.cuda.is_available():
    CASES += [("train", ["--set", "run.device=cuda"], "CUDA is not available"),
              ("eval", ["--device", "cuda"], "CUDA is not available"),
              ("generate", ["--device", "cuda"], "CUDA is not available")]


@pytest.mark.parametrize("command,args,words", CASES,
                         ids=[f"{c}-{' '.join(a)}" for c, a, _ in CASES])
def test_bad_value_is_one_line_and_status_2(run, command, args, words, capsys):
    config_path, run_dir = run
    target = [str(config_path), "--set",
              f"run.out_dir={json.dumps(str(run_dir.parent))}", "--set", "run.name=other"] \
        if command == "train" else [str(run_dir)]
    assert main([command, *target, *args]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"weirdnet {command}: "), err
    assert words in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("command", [
    ["data", "build", "listops", "--n", "1", "--n-val", "0", "--n-test", "0"],
    ["harness-tasks"],
], ids=["data-build", "harness-tasks"])
def test_every_seed_of_the_cli_is_checked_as_train_checks_run_seed(command, tmp_path, capsys):
    """Issue 72 item 6: `generate --seed 99999999999999999999999` said "Overflow when
    unpacking long long"; every --seed gets the line train gives for run.seed."""
    out = tmp_path / "out"
    assert main([*command, *(["--out", str(out)] if command[0] == "data" else [str(out)]),
                 "--seed", "99999999999999999999999"]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (f"weirdnet {' '.join(command[:2]) if command[0] == 'data' else command[0]}"
                        ": --seed must be an int of at most 64 bits (-2^63 <= value < 2^63), got "
                        "99999999999999999999999")
    assert not out.exists()


def test_info_on_corrupted_weights_is_one_line(run, tmp_path, capsys):
    _, run_dir = run
    model_dir = tmp_path / "bad"
    shutil.copytree(run_dir / "best", model_dir)
    weights = model_dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[100:120] = b"x" * 20
    weights.write_bytes(bytes(data))
    assert main(["info", str(model_dir)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("weirdnet info: ")


# ---- every config value is checked before the run directory is made (issue 35, item 6)

BEFORE_THE_RUN = [
    ("train.clip=nan", "train.clip must be a finite number"),
    ("train.clip=inf", "train.clip must be a finite number"),
    ("optim.lr=inf", "optim.lr must be a finite number"),
    ("optim.lr=nan", "optim.lr must be a finite number"),
    ("optim.weight_decay=nan", "optim.weight_decay must be a finite number"),
    ("optim.eps=0", "optim.eps must be a finite number > 0"),
    ("train.early_stop_at=nan", "train.early_stop_at must be a finite number"),
    ("train.best_metric=acc", "train.best_metric='acc' is not a metric of the lm task"),
    ("train.best_metric=-accuracy", "is not a metric of the lm task"),
    ("model.backbone.max_len=16", "model.backbone.max_len=16 is too short for the 'train'"),
    ("data.eval_options={ seq_len = 64 }", "too short for the 'val' split, whose items have 65"),
]
if not torch.cuda.is_available():
    BEFORE_THE_RUN.append(("train.precision=fp16", "needs a CUDA device"))


def _train_args(config_path, out_dir, *extra):
    return ["train", str(config_path), "--set", f"run.out_dir={json.dumps(str(out_dir))}",
            "--set", "run.name=fresh", "--no-progress", *extra]


def _one_line(capsys, command="train"):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"weirdnet {command}: "), err
    return lines[0]


@pytest.mark.parametrize("assignment,words", BEFORE_THE_RUN,
                         ids=[a for a, _ in BEFORE_THE_RUN])
def test_bad_value_fails_before_the_run_directory_exists(run, tmp_path, assignment, words,
                                                         capsys):
    config_path, _ = run
    assert main(_train_args(config_path, tmp_path / "runs", "--set", assignment)) == 2
    assert words in _one_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_tensorboard_without_the_package_fails_before_the_run(run, tmp_path, monkeypatch,
                                                              capsys):
    config_path, _ = run
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    assert main(_train_args(config_path, tmp_path / "runs", "--set",
                            "run.tensorboard=true")) == 2
    assert "pip install tensorboard" in _one_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_a_bad_value_leaves_an_existing_run_untouched(run, tmp_path, capsys):
    _, run_dir = run
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    before = {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in copy.rglob("*")
              if p.is_file()}
    for assignments in (["train.best_metric=accuracy"], ["model.backbone.max_len=8"],
                        ["train.steps=4", "train.clip=nan"]):
        extra = [arg for a in assignments for arg in ("--set", a)]
        assert main(["train", str(copy), "--no-progress", *extra]) == 2
        _one_line(capsys)
    assert {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in copy.rglob("*")
            if p.is_file()} == before


# ---- generate fits its output into the model's max_len (issue 35, item 11) ------------

def _generated(capsys, *args):
    assert main(["generate", *args]) == 0
    captured = capsys.readouterr()
    return captured.out, [line for line in captured.err.splitlines() if line.strip()]


@pytest.mark.parametrize("asked", [None, 400])
def test_generate_clamps_to_the_room_left_with_one_note(run, asked, capsys):
    _, run_dir = run  # max_len 32
    extra = [] if asked is None else ["--max-new-tokens", str(asked)]
    out, err = _generated(capsys, str(run_dir), "--prompt", "def ", "--temperature", "0",
                          "--encoding", "latin-1", *extra)
    assert len(err) == 1 and err[0].startswith("weirdnet generate: "), err
    assert f"{asked or 200} new tokens" in err[0] and "generating 28" in err[0], err[0]
    assert len(out.rstrip("\n").encode("latin-1")) == 32  # prompt 4 + 28 new tokens
    assert out.startswith("def ")


def test_generate_that_fits_says_nothing(run, capsys):
    _, run_dir = run
    out, err = _generated(capsys, str(run_dir), "--prompt", "def ", "--max-new-tokens", "28",
                          "--temperature", "0", "--encoding", "latin-1")
    assert err == [] and len(out.rstrip("\n").encode("latin-1")) == 32


def test_generate_with_a_prompt_that_fills_max_len(run, capsys):
    _, run_dir = run
    assert main(["generate", str(run_dir), "--prompt", "x" * 32]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "max_len 32" in err and "--prompt" in err, err


def _help_examples():
    """(prompt, max_new_tokens) of every `weirdnet generate runs/quickstart` example of
    the help text (max_new_tokens: the default when not given)."""
    import shlex

    from weirdnet.cli.commands.generate import DESCRIPTION

    text = DESCRIPTION.replace("\\\n", " ")
    for line in text.splitlines():
        if not line.strip().startswith("weirdnet generate runs/quickstart"):
            continue
        words = shlex.split(line.strip())
        if words[:3] == ["weirdnet", "generate", "runs/quickstart"]:
            options = dict(zip(words[3::2], words[4::2], strict=False))
            yield words[3:], options["--prompt"], int(options.get("--max-new-tokens", 200))


def test_generate_help_examples_fit_the_quickstart_model(run, capsys):
    """The README's quickstart model has max_len 256 (seq_len 256): every example of the
    help fits it without clamping, and runs (clamped) on a small model."""
    import tomllib
    from pathlib import Path

    quickstart = Path(__file__).parents[1] / "configs" / "quickstart.toml"
    max_len = tomllib.loads(quickstart.read_text())["data"]["options"]["seq_len"]
    examples = list(_help_examples())
    assert len(examples) >= 2
    for args, prompt, new_tokens in examples:
        assert len(prompt.encode()) + new_tokens <= max_len, args
        _, run_dir = run
        assert main(["generate", str(run_dir), *args]) == 0, args
        capsys.readouterr()
