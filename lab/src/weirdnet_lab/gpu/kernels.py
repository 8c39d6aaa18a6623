"""The ``kernels`` job of ``weirdnet bench gpu`` (issue 62): the scan's backends side by
side with SDPA causal and a copy of the same bytes, forward and forward + backward, with
the extra memory of forward + backward, at B = 8, D = 1024, bf16.

Backends: "triton" and the new kernel, ``scan_cost.budgets.NEW_BACKEND`` ("triton-e2";
``weird_scan(..., backend=NAME)``; the "chunk" backends of issue 62 left the core in
issue 73; a name
the checkout's dispatcher does not know, or one unavailable on the device, is a row
saying so, not an error), and "sdpa-causal": ``scaled_dot_product_attention`` on (B, 16,
L, 64) with ``is_causal``, limited to FlashAttention / cuDNN on CUDA."""

from __future__ import annotations

import contextlib

import torch

from weirdnet_lab.harness.timing import median_ms, synchronize, time_step
from weirdnet_lab.scan_cost.budgets import NEW_BACKEND

SCAN_BACKENDS = ("triton", NEW_BACKEND)


def _unknown(name: str, device) -> str | None:
    """Why backend ``name`` cannot run on ``device`` (None: it can)."""
    from weirdnet.ops.weird_scan import dispatch

    if name not in dispatch.BACKENDS:
        return f"unknown backend {name!r} in this checkout"
    return dispatch.BACKENDS[name].unavailable(device)


def _inputs(name: str, batch: int, length: int, dim: int, dtype, device):
    gen = torch.Generator(device=device).manual_seed(0)
    if name == "sdpa-causal":
        shape = (batch, 16, length, dim // 16)
        return [torch.randn(shape, generator=gen, device=device, dtype=dtype,
                            requires_grad=True) for _ in range(3)]
    a, v = (torch.randn(batch, length, dim, generator=gen, device=device, dtype=dtype,
                        requires_grad=True) for _ in range(2))
    levels = max(1, (length - 1).bit_length())
    log_w = (-torch.rand(levels, dim, generator=gen, device=device)).requires_grad_()
    return [a, v, log_w]


def _forward(name: str):
    from weirdnet.ops.weird_scan import weird_scan

    if name == "sdpa-causal":
        return lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True)
    return lambda a, v, log_w: weird_scan(a, v, log_w, backend=name)


def measure(name: str, spec: dict) -> dict:
    """One (backend, L) row: fwd and fwd+bwd median ms, the extra MiB of fwd+bwd."""
    from weirdnet_lab.gpu.sdpa import gpu_precision

    device, dtype = torch.device(spec["device"]), getattr(torch, spec["dtype"])
    row = {"method": name, "L": spec["L"], "fwd_ms": None, "fwdbwd_ms": None,
           "extra_mib": None, "error": None}
    if name != "sdpa-causal":
        why = _unknown(name, device)
        if why:
            return {**row, "error": f"skipped: {why}"}
    inputs = _inputs(name, spec["batch"], spec["L"], spec["dim"], dtype, device)
    forward, repeats = _forward(name), spec.get("repeats", 10)
    with gpu_precision(device) if name == "sdpa-causal" else contextlib.nullcontext():
        with torch.no_grad():
            row["fwd_ms"] = median_ms(time_step(lambda: forward(*inputs), device, repeats))
        grad = torch.randn_like(forward(*inputs))

        def both() -> None:
            forward(*inputs).backward(grad)

        row["fwdbwd_ms"] = median_ms(time_step(both, device, repeats))
        row["extra_mib"] = _extra_mib(both, device)
    return row


def _extra_mib(step, device) -> float | None:
    """Peak allocated MiB of ``step`` above what was allocated before it (CUDA only)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def job_kernels(spec: dict) -> dict:
    """Every backend at every length (a failing row keeps its error; the rest run)."""
    rows = []
    for length in spec["lengths"]:
        for name in (*SCAN_BACKENDS, "sdpa-causal"):
            try:
                rows.append(measure(name, {**spec, "L": length}))
            except Exception as error:  # noqa: BLE001 - one row's failure is its record
                rows.append({"method": name, "L": length, "fwd_ms": None,
                             "fwdbwd_ms": None, "extra_mib": None,
                             "error": f"{type(error).__name__}: {error}"[:300]})
            if spec["device"].startswith("cuda"):
                torch.cuda.empty_cache()
    return {"rows": rows}
