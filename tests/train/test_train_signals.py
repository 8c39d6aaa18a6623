"""SIGINT, SIGTERM and SIGKILL at chosen points of a real ``weirdnet train`` process.

Each case runs the command in a subprocess that sends itself the real signal at a named
point (``WEIRDNET_FAULT``, see :mod:`weirdnet.run.faults`): mid-step, mid-checkpoint-write,
between the renames that replace ``best/``, mid-evaluation, mid-final-evaluation, and
twice in a row (the second signal stops at once).  Every case must end with exit status
130/143 (SIGKILL: -9), one line on stderr and no traceback, an intact checkpoint, and a
resumed run whose final weights and results equal those of an uninterrupted run.
"""

import json
import signal
import subprocess
import time

import pytest
import torch

from helpers.train import run_cli, subprocess_env, weirdnet_cmd, write_config
from weirdnet.run import checkpoint as ckpt
from weirdnet.run.safetensors_io import load_file

pytestmark = pytest.mark.slow  # real training subprocesses

STEPS = 12  # eval at 6 and 12 (2 batches each), checkpoints every 3, final eval 4 batches


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run of the tiny config: (config path, its run directory)."""
    tmp = tmp_path_factory.mktemp("signals")
    config = write_config(tmp, steps=STEPS, eval_every=6, checkpoint_every=3)
    done = run_cli("train", str(config), "--set", "run.name=full", "--no-progress", cwd=tmp)
    assert done.returncode == 0, done.stderr
    return config, tmp / "runs" / "full"


def _run(config, name, fault=None, *extra):
    env = subprocess_env()
    if fault:
        env["WEIRDNET_FAULT"] = fault
    return subprocess.run(weirdnet_cmd("train", str(config), "--set", f"run.name={name}",
                                       "--no-progress", *extra),
                          cwd=config.parent, env=env, capture_output=True, text=True,
                          timeout=300)


def _assert_one_line(result, status):
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("weirdnet train: SIG"), result.stderr
    return lines[-1]


def _assert_intact(run_dir):
    for directory in ckpt.list_checkpoints(run_dir):
        ckpt.verify_directory(directory)
    if (run_dir / "best").exists():
        ckpt.verify_directory(run_dir / "best")
    leftovers = [p for p in run_dir.rglob(".*") if p.name != ".lock"]
    return leftovers


def _assert_same_as_reference(run_dir, reference_dir):
    name = f"step-{STEPS:08d}"
    expected, _ = load_file(reference_dir / "checkpoints" / name / "model.safetensors")
    got, _ = load_file(run_dir / "checkpoints" / name / "model.safetensors")
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
    ref = json.loads((reference_dir / "results.json").read_text())
    out = json.loads((run_dir / "results.json").read_text())
    assert (out["results"], out["best_step"]) == (ref["results"], ref["best_step"])


CASES = [
    # (fault, exit status, words the last line must hold)
    ("step=SIGINT@5", 130, "SIGINT at step 5; saved"),
    ("step=SIGTERM@5", 143, "SIGTERM at step 5; saved"),
    ("checkpoint-write=SIGINT@1", 130, "SIGINT at step 3; its checkpoint"),
    ("checkpoint-write=SIGTERM@2", 143, "SIGTERM at step 6"),
    ("checkpoint-rename=SIGTERM@1", 143, "SIGTERM at step"),
    ("eval-batch=SIGINT@2", 130, "during the evaluation (redone on resume)"),
    ("eval-batch=SIGTERM@6", 143, "during the final evaluation"),
    ("step=SIGINTx2@5", 130, "during step 5 (a second signal stops at once)"),
    ("eval-batch=SIGTERMx2@1", 143, "SIGTERM at step 6 during the evaluation"),
]


@pytest.mark.parametrize("fault,status,words", CASES, ids=[c[0] for c in CASES])
def test_signal_at_a_point_keeps_a_checkpoint_and_resumes_exactly(reference, fault, status,
                                                                  words):
    config, reference_dir = reference
    name = "cut-" + fault.replace("=", "-").replace("@", "-")
    run_dir = config.parent / "runs" / name
    cut = _run(config, name, fault)
    last = _assert_one_line(cut, status)
    assert words in last, last
    assert "continue with: weirdnet train" in last or "finish with: weirdnet train" in last
    assert not (run_dir / "results.json").exists()
    assert _assert_intact(run_dir) == []
    resumed = run_cli("train", str(run_dir), "--no-progress", cwd=config.parent)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    _assert_same_as_reference(run_dir, reference_dir)


def test_sigkill_mid_checkpoint_write_leaves_temporaries_that_the_next_start_removes(
        reference):
    config, reference_dir = reference
    run_dir = config.parent / "runs" / "killed"
    cut = _run(config, "killed", "checkpoint-write=SIGKILL@3")
    assert cut.returncode == -signal.SIGKILL
    leftovers = _assert_intact(run_dir)
    assert any(p.name.startswith(".step-00000006.tmp-") for p in leftovers), leftovers
    resumed = run_cli("train", str(run_dir), "--no-progress", cwd=config.parent)
    assert resumed.returncode == 0, resumed.stderr
    assert "removed" in resumed.stderr and "resuming" in resumed.stderr
    assert _assert_intact(run_dir) == []
    _assert_same_as_reference(run_dir, reference_dir)


def test_sigkill_between_the_renames_of_best_is_repaired(reference):
    config, reference_dir = reference
    run_dir = config.parent / "runs" / "killed-best"
    cut = _run(config, "killed-best", "checkpoint-rename=SIGKILL@1")
    assert cut.returncode == -signal.SIGKILL
    assert not (run_dir / "best").exists() or not list_best(run_dir)
    resumed = run_cli("train", str(run_dir), "--no-progress", cwd=config.parent)
    assert resumed.returncode == 0, resumed.stderr
    assert "restored" in resumed.stderr or "removed" in resumed.stderr
    assert _assert_intact(run_dir) == []
    _assert_same_as_reference(run_dir, reference_dir)


def list_best(run_dir):
    return [p for p in run_dir.iterdir() if p.name.startswith(".best.")]


def test_sigterm_from_outside_like_timeout_or_slurm(reference):
    """The real thing: another process sends SIGTERM while the run trains."""
    config, reference_dir = reference
    run_dir = config.parent / "runs" / "outside"
    process = subprocess.Popen(
        weirdnet_cmd("train", str(config), "--set", "run.name=outside", "--no-progress",
                     "--set", "train.log_every=1"),
        cwd=config.parent, env=subprocess_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    log = run_dir / "log.jsonl"
    deadline = time.monotonic() + 120
    while not (log.is_file() and '"train"' in log.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, "ended too early"
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if result.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    _assert_one_line(result, 143)
    assert _assert_intact(run_dir) == []
    resumed = run_cli("train", str(run_dir), "--no-progress", cwd=config.parent)
    assert resumed.returncode == 0, resumed.stderr
    _assert_same_as_reference(run_dir, reference_dir)
