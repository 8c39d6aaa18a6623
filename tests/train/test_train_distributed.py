"""torchrun: 2 CPU processes (gloo) train like 1 process with the same global batch."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from helpers.train import relative_difference, subprocess_env, write_config
from weirdnet.run.safetensors_io import load_file

pytestmark = [
    pytest.mark.slow,  # torchrun subprocesses
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
]


def _run(tmp_path, name, nproc, *overrides):
    config = write_config(tmp_path, steps=6, eval_every=3, checkpoint_every=3, dropout=0.0)
    args = ["train", str(config), "--no-progress", "--set", f"run.name={name}", *overrides]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                str(nproc), "--standalone", "-m", "weirdnet"] if nproc > 1 else \
        [sys.executable, "-m", "weirdnet"]
    done = subprocess.run(launcher + args, cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return tmp_path / "runs" / name, done.stdout


def _losses(run_dir):
    events = map(json.loads, (run_dir / "log.jsonl").read_text().splitlines())
    return [event["loss"] for event in events if event["event"] == "train"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("single"), "single", 1)


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_processes_equal_one_with_the_same_global_batch(tmp_path, single, mode):
    run_dir, stdout = _run(tmp_path, mode, 2, "--set", f"train.distributed={mode}")
    assert stdout.count("Results of") == 1, "only rank 0 prints the results"
    start = json.loads((run_dir / "log.jsonl").read_text().splitlines()[0])
    assert start["world_size"] == 2
    expected, _ = load_file(single[0] / "checkpoints/step-00000006/model.safetensors")
    got, _ = load_file(run_dir / "checkpoints/step-00000006/model.safetensors")
    assert got.keys() == expected.keys()
    assert relative_difference(got, expected) < 1e-4
    assert _losses(run_dir) == pytest.approx(_losses(single[0]), rel=1e-5)
    results = json.loads((run_dir / "results.json").read_text())["results"]
    reference = json.loads((single[0] / "results.json").read_text())["results"]
    assert results["val"]["loss"] == pytest.approx(reference["val"]["loss"], rel=1e-4)


def test_a_two_process_checkpoint_resumes_in_one_process(tmp_path, single):
    run_dir, _ = _run(tmp_path, "ddp", 2, "--set", "train.distributed=ddp")
    shutil.rmtree(run_dir / "checkpoints" / "step-00000006")
    (run_dir / "results.json").unlink()
    done = subprocess.run([sys.executable, "-m", "weirdnet", "train", str(run_dir),
                           "--no-progress"], cwd=tmp_path, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    expected, _ = load_file(single[0] / "checkpoints/step-00000006/model.safetensors")
    got, _ = load_file(run_dir / "checkpoints/step-00000006/model.safetensors")
    assert relative_difference(got, expected) < 1e-4
    assert torch.isfinite(torch.tensor(_losses(run_dir))).all()


def test_sigterm_to_torchrun_saves_one_checkpoint_from_all_ranks(tmp_path):
    """torchrun forwards SIGTERM to its workers; they agree on a step (all-reduced stop
    flag), save one checkpoint together, and only rank 0 says so.  The launcher's own
    exit (status 1 and torch.distributed.elastic's SignalException) is torchrun's."""
    import signal
    import time

    config = write_config(tmp_path, steps=2000, eval_every=0, checkpoint_every=1000,
                          dropout=0.0)
    process = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--standalone", "-m", "weirdnet", "train", str(config), "--no-progress",
         "--set", "train.log_every=1"],
        cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    log = tmp_path / "runs" / "tiny" / "log.jsonl"
    deadline = time.monotonic() + 120
    while not (log.is_file() and '"train"' in log.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, "ended too early"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    said = [line for line in stderr.splitlines() if line.startswith("weirdnet train:")]
    notice = [line for line in said if "SIGTERM received: stopping after" in line]
    said = [line for line in said if line not in notice]
    assert len(notice) == 1, stderr[-3000:]  # said at once, by the main rank only
    assert len(said) == 1 and "SIGTERM at step" in said[0], stderr[-3000:]
    step = int(said[0].split("SIGTERM at step ")[1].split(";")[0])
    checkpoint = tmp_path / "runs" / "tiny" / "checkpoints" / f"step-{step:08d}"
    from weirdnet.run.checkpoint import verify_directory

    verify_directory(checkpoint)
