"""What the independent probe found in config handling (issues 61 §4 and 65), each driven
through ``weirdnet`` as a user runs it: one line on stderr and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.train import run_cli, write_config

pytestmark = pytest.mark.slow  # each test starts `weirdnet` in a fresh process (torch import)

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "quickstart.toml")


def _one_line_refusal(result, *needles: str) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_long_extends_chain_is_one_line(tmp_path):
    """1,000 files deep gave a RecursionError traceback."""
    (tmp_path / "c0.toml").write_text(Path(QUICKSTART).read_text())
    for i in range(1, 1001):
        (tmp_path / f"c{i}.toml").write_text(f'extends = "c{i - 1}.toml"\n')
    result = run_cli("train", str(tmp_path / "c1000.toml"), "--no-progress", cwd=tmp_path)
    _one_line_refusal(result, "'extends' is more than 32 files deep", "c1000.toml")


def test_an_extends_cycle_is_one_line(tmp_path):
    (tmp_path / "a.toml").write_text('extends = "b.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "a.toml"\n')
    result = run_cli("train", str(tmp_path / "a.toml"), "--no-progress", cwd=tmp_path)
    _one_line_refusal(result, "loops back to itself")


def test_a_peer_beside_a_preset_says_they_exclude_each_other(tmp_path):
    """It said "unknown key model.peer (known: backbone, tie_embeddings)"."""
    result = run_cli("train", QUICKSTART, "--set", 'model.peer="llama"', "--no-progress",
                     cwd=tmp_path)
    _one_line_refusal(result, "model.peer and model.preset exclude each other")


@pytest.mark.parametrize("assignment, needles", [
    ("model.backbone.dim=99999999999999999999", ("model.backbone.dim", "64 bits")),
    ("run.seed=100000000000000000000000", ("run.seed", "64 bits")),
    ("run.seed=1e23", ("run.seed", "must be int")),
    ("train.early_stop_at=nan", ("train.early_stop_at", "finite")),
    ("train.early_stop_at=inf", ("train.early_stop_at", "finite")),
    ("train.steps=100000000000000000000", ("train.steps", "64 bits")),
    ("optim.lr=-inf", ("optim.lr", "finite")),
    ("model.backbone.dim=1000000000000", ("model:", "do not fit")),
    ("model.backbone.depth=1000000000", ("model:", "parameters do not fit")),
    ("model.backbone.norm_eps=-1", ("model.backbone.norm_eps must be a positive number",)),
    ("model.backbone.norm_eps=0", ("model.backbone.norm_eps must be a positive number",)),
    ("model.backbone.mixer_options.weird.n_layers=-1",
     ("mixer_options.weird.n_layers must be a positive int",)),
], ids=["dim-1e20", "seed-1e23-int", "seed-1e23-float", "early-stop-nan", "early-stop-inf",
        "steps-1e20", "lr-minus-inf", "dim-1e12", "depth-1e9", "norm-eps-negative",
        "norm-eps-zero", "mixer-option"])
def test_out_of_range_numbers_are_one_line_naming_the_key(tmp_path, assignment, needles):
    """A TypeError from torch.empty, an unnamed "Overflow when unpacking long long", or
    silently accepted (NaN/inf early stopping, 1e20 steps); issue 72: norm_eps = -1 was
    "the loss is nan at step 1; lower optim.lr", depth = 10^9 built blocks for minutes."""
    config = write_config(tmp_path)
    result = run_cli("train", str(config), "--set", assignment, "--no-progress",
                     "--set", f'run.out_dir="{tmp_path / "runs"}"', cwd=tmp_path)
    _one_line_refusal(result, *needles)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.pt"))


@pytest.mark.slow
def test_info_takes_a_run_directory(tmp_path):
    """eval, generate and export-hf took a run directory; info did not."""
    config = write_config(tmp_path, steps=2, eval_every=2, checkpoint_every=2)
    trained = run_cli("train", str(config), "--no-progress",
                      "--set", f'run.out_dir="{tmp_path / "runs"}"', cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    run_dir = next((tmp_path / "runs").iterdir())
    result = run_cli("info", str(run_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "WeirdNetLM" in result.stdout and "parameters" in result.stdout
    assert run_cli("info", str(run_dir / "best"), cwd=tmp_path).stdout == result.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    _one_line_refusal(run_cli("info", str(empty), cwd=tmp_path), "not a saved weirdnet model")
