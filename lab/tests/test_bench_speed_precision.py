"""Fair model-level GPU rows: on CUDA every model of ``bench speed`` trains in bf16
autocast with SDPA limited to FlashAttention or cuDNN, each row records the SDPA backend
its step ran, and the report says so (flagging a row that ran another kernel).  On a CPU
the rows stay float32 and still record the backend."""

from __future__ import annotations

import pytest
import torch

from weirdnet_lab.gpu.sdpa import (
    NO_FAST_KERNEL,
    SDPARecorder,
    backends_text,
    gpu_precision,
    unfair,
)
from weirdnet_lab.speed import measure
from weirdnet_lab.speed_report import markdown, precision_lines

SPEC = {"device": "cpu", "length": 37, "dim": 16, "depth": 1, "d_ff": 32, "heads": 2,
        "batch": 2, "steps": 1, "warmup": 0}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("mechanism,backend", [("softmax", True), ("weird-a", False)])
def test_a_cpu_row_is_float32_and_records_the_sdpa_backend_it_ran(mechanism, backend):
    row = measure({**SPEC, "mechanism": mechanism})
    assert row["status"] == "ok" and row["precision"] == "fp32"
    if backend:  # the softmax layer's SDPA call: CPU flash or math
        assert row["sdpa_backend"] in ("FLASH_ATTENTION", "MATH")
    else:  # structure A calls no SDPA
        assert row["sdpa_backend"] is None


def test_the_recorder_sees_each_call_in_the_autocast_dtype():
    q = torch.randn(1, 2, 8, 4, requires_grad=True)
    with SDPARecorder() as recorder:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum(
            ).backward()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert len(recorder.backends) == 2 and backends_text(recorder.backends)
    assert backends_text([]) is None
    assert unfair("MATH") and unfair("FLASH_ATTENTION+EFFICIENT_ATTENTION")
    assert not unfair("FLASH_ATTENTION") and not unfair("CUDNN_ATTENTION") and not unfair(None)


def test_gpu_precision_leaves_a_cpu_step_alone():
    with gpu_precision(torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
        assert (torch.ones(2) @ torch.ones(2)).dtype == torch.float32


def _result(device: str, backend: str | None, precision: str) -> dict:
    row = {"mechanism": "transformerpp", "length": 4096, "status": "ok", "step_s": 0.1,
           "steps_per_s": 10.0, "tokens_per_s": 1e5, "memory_mib": 10.0, "rss_mib": None,
           "precision": precision, "sdpa_backend": backend}
    return {"settings": {"task": "lm", "reference": "transformerpp", "batch": 8, "dim": 256,
                         "depth": 4, "d_ff": 1024, "heads": 4, "steps": 2, "warmup": 1},
            "machine": {"device": device, "cpu_model": "x", "usable_cores": 1,
                        "torch": torch.__version__, "weirdnet": "0", "date": "today",
                        "command": "weirdnet bench speed"},
            "rows": [row]}


def test_the_report_names_the_precision_and_backend_and_flags_a_slow_kernel_on_cuda():
    fair = markdown(_result("cuda", "FLASH_ATTENTION", "bf16 autocast"), None)
    assert "every model trains in bf16 autocast, SDPA limited to FlashAttention or cuDNN" \
        in fair and "Transformer++ FLASH_ATTENTION" in fair
    assert "not a fair GPU comparison" not in fair
    flagged = precision_lines(_result("cuda", "MATH", "bf16 autocast"))
    assert flagged[-1].startswith("- **not a fair GPU comparison**: Transformer++ at 4K "
                                  "ran MATH")
    assert not any("not a fair" in line for line in precision_lines(
        _result("cpu", "MATH", "fp32")))  # a CPU row is what it is
    old = _result("cuda", None, "x")
    del old["rows"][0]["precision"]
    assert precision_lines(old) == []  # results recorded before the field: nothing


@cuda
def test_on_cuda_a_step_is_bf16_and_sdpa_without_a_fast_kernel_is_refused():
    with gpu_precision(torch.device("cuda")):
        x = torch.randn(8, 8, device="cuda")
        assert (x @ x).dtype == torch.bfloat16
    q = torch.randn(1, 2, 16, 8, device="cuda", dtype=torch.float64)  # only math takes it
    with pytest.raises(RuntimeError, match="neither a FlashAttention nor a cuDNN"):
        with gpu_precision(torch.device("cuda")):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert "refused" in NO_FAST_KERNEL


@cuda
def test_a_cuda_transformer_row_runs_flash_or_cudnn():
    row = measure({**SPEC, "device": "cuda", "task": "lm", "mechanism": "transformerpp",
                   "length": 256, "dim": 128, "heads": 2})
    assert row["precision"] == "bf16 autocast"
    assert row["sdpa_backend"] in ("FLASH_ATTENTION", "CUDNN_ATTENTION")
