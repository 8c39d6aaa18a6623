"""Regression tests for bad values that used to end in a traceback: each is one line on
stderr starting with ``weirdnet <command>:`` and exit status 2."""

import json
import shutil

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
