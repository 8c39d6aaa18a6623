"""The jobs ``weirdnet bench gpu`` runs in child processes
(``python -m weirdnet_lab.gpu JOB SPEC``): the environment, the Triton self-check and the
copy bandwidth, each writing its JSON result to the spec's ``result`` path."""

from __future__ import annotations

import json
import sys


def job_env(spec: dict) -> dict:
    """Device, driver, CUDA, torch, triton, weirdnet versions, the git commit."""
    import subprocess

    import torch

    from weirdnet_lab.harness.machine import machine_info

    device = torch.device(spec["device"])
    info = machine_info(device, sys.argv, "not tuned (environment record)")
    info.update({"cuda": torch.version.cuda, "triton": None, "driver": None})
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update({"device_name": props.name, "capability": f"{props.major}.{props.minor}",
                     "memory_gib": round(props.total_memory / 2**30, 1),
                     "multiprocessors": props.multi_processor_count})
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    else:
        from weirdnet_lab.harness.machine import cpu_model

        info["device_name"] = f"CPU: {cpu_model()}"
    info["cudnn"] = torch.backends.cudnn.version() if device.type == "cuda" else None
    info["sdpa_backends"] = sdpa_backends(device)
    return info  # machine_info holds the commit


def sdpa_backends(device) -> dict[str, str]:
    """The backend PyTorch's SDPA picks on ``device`` for a training call shaped like a
    query block of the ``gpu`` budget's ListOps softmax layer: q, k, v (32, 4, 256 |
    1984, 32) that need gradients, with a boolean mask (32, 1, 256, 1984) in float32 and
    bfloat16, and causal without a mask.  Names of ``torch.nn.attention.SDPBackend``;
    "unknown: ..." where the private chooser is missing or fails."""
    import torch
    from torch.nn.attention import SDPBackend

    choices = {}
    for label, dtype, masked in (("masked float32", torch.float32, True),
                                 ("masked bfloat16", torch.bfloat16, True),
                                 ("causal bfloat16", torch.bfloat16, False)):
        try:
            q = torch.zeros(32, 4, 256, 32, dtype=dtype, device=device, requires_grad=True)
            k = torch.zeros(32, 4, 1984 if masked else 256, 32, dtype=dtype, device=device,
                            requires_grad=True)
            mask = (torch.ones(32, 1, 256, 1984, dtype=torch.bool, device=device)
                    if masked else None)
            index = torch._fused_sdp_choice(q, k, k, mask, 0.0, not masked)
            choices[label] = SDPBackend(index).name
        except Exception as error:  # noqa: BLE001 - a record, not a check: said, not raised
            choices[label] = f"unknown: {type(error).__name__}: {error}"[:200]
    return choices


def job_selfcheck(spec: dict) -> dict:
    """The Triton scan backend's self-check on the device (None: agreed with PyTorch)."""
    import torch

    device = torch.device(spec["device"])
    try:
        from weirdnet.ops.weird_scan import dispatch

        backend = dispatch.BACKENDS["triton"]
        reason = backend.unavailable(device)
    except Exception as error:  # noqa: BLE001 - triton missing or broken: said, not raised
        reason = f"{type(error).__name__}: {error}"
    if reason is not None:
        if device.type == "cuda":
            return {"device": str(device), "error": f"the Triton backend is unavailable: "
                                                   f"{reason}"}
        return {"device": str(device), "skipped": reason}
    return {"device": str(device), "error": dispatch.selfcheck_error(backend, device)}


def job_copy(spec: dict) -> dict:
    """Median ms of ``dst.copy_(src)`` over 1.5·B·L·D elements (the 3·B·L·D elements the
    scan forward reads and writes) for each L."""
    import torch

    from weirdnet_lab.harness.timing import median_ms, synchronize, time_step

    device, dtype = torch.device(spec["device"]), getattr(torch, spec["dtype"])
    def copy_ms(n: int) -> float:
        src = torch.randn(n, device=device).to(dtype)
        dst = torch.empty_like(src)
        times = time_step(lambda: dst.copy_(src), device, repeats=spec.get("repeats", 20),
                          warmup=3)
        synchronize(device)
        return median_ms(times)

    rows = []
    for L in spec["lengths"]:
        n = 3 * spec["batch"] * L * spec["dim"] // 2
        ms = copy_ms(n)
        moved = 2 * n * torch.empty((), dtype=dtype).element_size()
        rows.append({"L": L, "elements": n, "bytes": moved, "ms": ms,
                     "gb_per_s": moved / ms / 1e6})
    return {"rows": rows}


def job_kernels(spec: dict) -> dict:
    """:func:`weirdnet_lab.gpu.kernels.job_kernels`, then the copy of the same bytes."""
    from .kernels import job_kernels as kernels

    return {**kernels(spec), "copy": job_copy(spec)["rows"]}


def job_scan_timing(spec: dict) -> dict:
    """:func:`weirdnet_lab.gpu.scan_timing.job_scan_timing` (issue 73's prepared run)."""
    from .scan_timing import job_scan_timing as scan_timing

    return scan_timing(spec)


JOBS = {"env": job_env, "selfcheck": job_selfcheck, "copy": job_copy, "kernels": job_kernels,
        "scan-timing": job_scan_timing}


def job_main(argv: list[str]) -> int:
    """``python -m weirdnet_lab.gpu JOB SPEC``: run the job, write its JSON result to
    the spec's ``result`` path."""
    from weirdnet.run import write_atomic
    from weirdnet_lab.harness.children import watch_parent

    if len(argv) != 2 or argv[0] not in JOBS:
        print(f"usage: python -m weirdnet_lab.gpu {{{','.join(JOBS)}}} SPEC", file=sys.stderr)
        return 2
    watch_parent()
    spec = json.loads(argv[1])
    result = JOBS[argv[0]](spec)
    write_atomic(spec["result"], json.dumps(result, indent=2) + "\n")
    return 0
