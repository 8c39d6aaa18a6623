"""The trainer's throughput, named for what it counts (issue 61, item 3): input tokens/s
(the positions the model reads that are not padding), samples/s and targets/s, in
log.jsonl, the progress bar and `weirdnet plot`; logs from before these names (whose
``tokens_per_s`` counted targets: one a sample for a classifier) still plot."""

import json
import re
from pathlib import Path

import pytest
import torch

from helpers.train import run_cli
from weirdnet.train import tasks

ROOT = Path(__file__).resolve().parents[2]
PIXELS = 32 * 32  # a Pathfinder-32 image: every one has all its pixels, no padding

PATHFINDER = """
[data]
dataset = "pathfinder32"
options = { n = 40, difficulty = 14 }
[model.backbone]
dim = 16
depth = 1
d_ff = 32
heads = 2
[train]
steps = 4
batch_size = 4
eval_every = 4
eval_batches = 1
final_eval_batches = 1
log_every = 2
"""


@pytest.mark.slow
def test_a_classifier_run_logs_input_tokens_and_samples(tmp_path):
    """A classifier's targets are its labels (one a sample); its input tokens are its
    pixels: input tokens/s = samples/s x 1024, named so in the log, the bar and plot."""
    (tmp_path / "pf.toml").write_text(PATHFINDER)
    done = run_cli("train", "pf.toml", "--set", 'run.out_dir="runs"', cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "pf"
    events = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    train = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train] == [2, 4]
    for event in train:
        assert "tokens_per_s" not in event
        assert event["input_tokens_per_s"] == pytest.approx(event["samples_per_s"] * PIXELS)
        assert event["targets_per_s"] == pytest.approx(event["samples_per_s"])
        assert event["cpu_samples_per_s"] > 0
    bar = done.stderr.rsplit("pf: 100%", 1)[-1]
    assert re.search(r"in_tok_s=[\d,]+", bar) and re.search(r"samples_s=[\d.,]+", bar), bar
    assert not re.search(r"(?<!in_)tok_s=", done.stderr)

    shown = run_cli("plot", str(run), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rates = re.fullmatch(r"pf: median input tokens/s ([\d,]+), samples/s ([\d.,]+), "
                         r"targets/s ([\d.,]+)", shown.stdout.splitlines()[1])
    assert rates, shown.stdout
    inputs, samples, targets = (float(g.replace(",", "")) for g in rates.groups())
    assert inputs == pytest.approx(samples * PIXELS, rel=1e-3) and targets == samples


def _mask(*lengths: int, width: int) -> torch.Tensor:
    """(B, width) True in each row's first ``lengths[b]`` positions."""
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def test_input_tokens_are_the_non_padding_positions_each_task_reads():
    assert all(task.inputs for task in tasks.TASKS.values())
    lm = {"tokens": torch.zeros(2, 9, dtype=torch.long), "tokens_mask": _mask(9, 5, width=9)}
    assert tasks.get("lm").input_tokens(lm) == 8 + 5  # the last token is only a target
    assert tasks.get("lm").input_tokens({"tokens": torch.zeros(2, 9)}) == 2 * 8
    values = {"values": torch.zeros(3, 7, 4), "values_mask": _mask(7, 2, 3, width=7),
              "label": torch.zeros(3)}
    assert tasks.get("classification").input_tokens(values) == 12  # time steps, not C
    pairs = {"tokens": torch.zeros(2, 6), "tokens2": torch.zeros(2, 4),
             "tokens2_mask": _mask(4, 1, width=4)}
    assert tasks.get("retrieval").input_tokens(pairs) == 12 + 5
    seq2seq = {"src": torch.zeros(2, 5), "src_mask": _mask(5, 3, width=5),
               "tgt": torch.zeros(2, 6), "tgt_mask": _mask(6, 4, width=6)}
    assert tasks.get("seq2seq").input_tokens(seq2seq) == 8 + 5 + 4  # of tgt[:, :-1]
    recall = {"tokens": torch.zeros(4, 10), "targets": torch.zeros(4, 10)}
    assert tasks.get("recall").input_tokens(recall) == 40


@pytest.mark.slow  # `weirdnet plot` in a fresh process per log (matplotlib)
@pytest.mark.parametrize("log", sorted(str(p.relative_to(ROOT)) for p in (
    ROOT / "lab" / "results").rglob("*.jsonl") if '"event": "train"' in p.read_text()))
def test_weirdnet_plot_reads_the_committed_run_logs(log, tmp_path):
    """The committed logs were written with ``tokens_per_s``: plot reads it as targets/s."""
    shown = run_cli("plot", str(ROOT / log), "--out", str(tmp_path / "c.png"), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    line = shown.stdout.splitlines()[1]
    assert "samples/s" in line and "targets/s" in line, line
