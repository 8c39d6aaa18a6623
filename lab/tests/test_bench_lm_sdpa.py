"""bench lm on CUDA: the Transformer++'s SDPA backend is recorded before training and
the report names the precision and the backend, flagging one that is not FlashAttention
or cuDNN.  The probe itself runs on a CPU too (its autocast there is CPU bf16)."""

import json

import pytest
import torch

from weirdnet_lab.lm import sdpa
from weirdnet_lab.lm.report import markdown


def test_the_probe_records_each_contexts_backend():
    table = {"backbone": {"dim": 16, "depth": 1, "d_ff": 32, "heads": 2, "pattern": "softmax",
                          "positions": "rope", "causal": True}}
    found = sdpa.probe(table, [8, 16], torch.device("cpu"))
    assert found["precision"] == "bf16 autocast" and set(found["backends"]) == {"8", "16"}
    assert all(b in ("FLASH_ATTENTION", "MATH") for b in found["backends"].values())


def test_nothing_is_probed_without_cuda_or_without_the_transformerpp(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    sdpa.record_if_cuda(tmp_path, ["transformerpp"], [1024])
    assert not (tmp_path / sdpa.FILE).exists()
    sdpa.record_if_cuda(tmp_path, ["weird-a"], [1024])
    assert not (tmp_path / sdpa.FILE).exists()


@pytest.mark.parametrize("backends,flagged", [
    ({"1024": "FLASH_ATTENTION", "4096": "CUDNN_ATTENTION"}, None),
    ({"1024": "FLASH_ATTENTION", "4096": "EFFICIENT_ATTENTION"}, "4096")])
def test_the_report_names_precision_and_backend_and_flags_a_slow_one(tmp_path, backends,
                                                                     flagged):
    (tmp_path / sdpa.FILE).write_text(json.dumps(
        {"device": "NVIDIA H200", "precision": "bf16 autocast", "backends": backends}))
    lines = sdpa.report_lines(tmp_path)
    assert lines[0].startswith("Precision: on CUDA every model trains in bf16 autocast")
    assert "SDPA backend of the Transformer++ on NVIDIA H200" in lines[1]
    assert all(f"{b} at L = {c}" in lines[1] for c, b in backends.items())
    if flagged:
        assert lines[2] == (f"**Not a fair GPU comparison at L = {flagged}**: the "
                            "Transformer++ ran neither FlashAttention nor cuDNN there.")
    else:
        assert len(lines) == 2
    text = markdown([], {}, lines)
    assert all(line in text for line in lines)
    assert sdpa.report_lines(tmp_path / "none") == lines[:1]  # no probe: precision only
