"""train.context_parallel under torchrun: 2 CPU processes (gloo) share every sequence and
train like one process; a resumed context-parallel run is bit-identical to an
uninterrupted one; bad settings get one line and exit status 2."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from helpers.train import relative_difference, run_cli, subprocess_env, write_config
from weirdnet.run.safetensors_io import load_file

gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                          reason="torch.distributed with gloo is not available")
STEP6 = "checkpoints/step-00000006/model.safetensors"


def _run(tmp_path, name, nproc, *overrides, dropout=0.0, resume=None):
    config = write_config(tmp_path, steps=6, eval_every=3, checkpoint_every=3,
                          dropout=dropout).read_text().replace("log_every = 5", "log_every = 1")
    (tmp_path / "tiny.toml").write_text(config)
    args = ["train", str(resume)] if resume else \
        ["train", "tiny.toml", "--set", f"run.name={name}", *overrides]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                str(nproc), "--standalone", "-m", "weirdnet"] if nproc > 1 else \
        [sys.executable, "-m", "weirdnet"]
    done = subprocess.run(launcher + args + ["--no-progress"], cwd=tmp_path,
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return tmp_path / "runs" / name


def _losses(run_dir):
    events = map(json.loads, (run_dir / "log.jsonl").read_text().splitlines())
    return [event["loss"] for event in events if event["event"] == "train"]


CP2 = ("--set", "train.context_parallel=2", "--set", "train.distributed=ddp")


@pytest.mark.slow
@gloo
@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_processes_sharing_each_sequence_train_like_one(tmp_path, mode):
    single = _run(tmp_path, "single", 1)
    sharded = _run(tmp_path, "cp", 2, *CP2[:2], "--set", f"train.distributed={mode}")
    assert _losses(sharded) == pytest.approx(_losses(single), rel=1e-5)
    assert len(_losses(sharded)) == 6
    got, _ = load_file(sharded / STEP6)
    want, _ = load_file(single / STEP6)
    assert relative_difference(got, want) < 1e-4


@pytest.mark.slow
@gloo
def test_a_resumed_context_parallel_run_is_bit_identical(tmp_path):
    run_dir = _run(tmp_path, "cp", 2, *CP2, dropout=0.1)
    uninterrupted, _ = load_file(run_dir / STEP6)
    shutil.rmtree(run_dir / "checkpoints" / "step-00000006")
    (run_dir / "results.json").unlink()
    _run(tmp_path, "cp", 2, resume=run_dir, dropout=0.1)
    resumed, _ = load_file(run_dir / STEP6)
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)


@pytest.mark.slow  # `weirdnet train` in a fresh process per case
@pytest.mark.parametrize("overrides, message", [
    (["train.context_parallel=2"], "does not divide the world size 1"),
    (["train.context_parallel=64"], "larger than the sequence length 32"),
    (["train.context_parallel=2", "model.backbone.pattern=weird,relation"],
     "Relation cannot run context-parallel: its per-sequence mean"),
])
def test_bad_context_parallel_settings_exit_2_with_one_line(tmp_path, overrides, message):
    write_config(tmp_path)
    sets = [arg for o in overrides for arg in ("--set", o)]
    done = run_cli("train", "tiny.toml", "--no-progress", *sets, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
