"""The ``memory`` job of :mod:`weirdnet_lab.harness.child`: the peak extra CPU memory of
one forward+backward.

Spec: ``suite`` (operator benchmark), ``method``, ``batch``, ``length``, ``dim``,
``head_dim``, ``dtype``, ``threads``, ``seed``.  Order of events (see
:mod:`weirdnet_lab.harness.memory`):

1. allocator setting (:mod:`weirdnet_lab.harness.child` applies it before torch is
   imported, so every tensor is served from the heap);
2. one forward+backward on a tiny shape, to load kernels, thread pools and autograd state
   whose one-off memory is not the method's per-call cost (skipped if it fails: the
   real measurement then reports any error);
3. the real inputs and ``grad_out`` (nothing larger is built): baseline = current RSS;
   the peak RSS is reset to it, and checked to be no higher than it;
4. one forward+backward; extra = peak RSS - baseline (peak RSS: ``VmHWM``, see
   :mod:`weirdnet_lab.harness.memory` for why not ``ru_maxrss``).
"""

from __future__ import annotations

import argparse

from weirdnet_lab.harness.alloc import reuse_freed_memory

# High-water mark above the baseline tolerated as counter noise (RSS counters are cached
# per thread by the kernel, up to 64 pages each).
_SLACK_BYTES = 1 << 20


def measure(spec: dict) -> dict:
    """The peak extra memory of one forward+backward of ``spec``'s method and shape."""
    allocator = reuse_freed_memory()  # idempotent: reports the setting the child applied
    args = argparse.Namespace(**{"head_dim": 64, "dtype": "float32", "threads": 0,
                                 "seed": 0, "suite": "scan", **spec})
    import torch

    from weirdnet_lab.harness.memory import MIB, current_rss_bytes, peak_rss_bytes, reset_peak_rss
    from weirdnet_lab.opbench.methods import Shape, forward_backward_step
    from weirdnet_lab.opbench.spec import get_opbench

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    method = get_opbench(args.suite).method(args.method)
    dtype, device = getattr(torch, args.dtype), torch.device("cpu")
    tiny = Shape(1, min(args.length, 64), args.dim, args.head_dim)
    try:
        forward_backward_step(method.build(tiny, dtype, device, args.seed))()
    except Exception:  # noqa: BLE001 - only a warm-up; the real run below reports errors
        pass

    case = method.build(Shape(args.batch, args.length, args.dim, args.head_dim), dtype,
                        device, args.seed)
    was_reset = reset_peak_rss()
    baseline, high_water = current_rss_bytes(), peak_rss_bytes()
    forward_backward_step(case)()
    peak = peak_rss_bytes()
    result = {
        "baseline_bytes": baseline,
        "high_water_before_bytes": high_water,
        "baseline_is_high_water": high_water <= baseline + _SLACK_BYTES,
        "peak_reset": was_reset,
        "peak_bytes": peak,
        "extra_bytes": peak - baseline,
        "extra_mib": (peak - baseline) / MIB,
        "input_bytes": case.input_bytes(),
        "threads": torch.get_num_threads(),
        "allocator": allocator,
        "how": "child process: VmHWM after fwd+bwd - RSS after allocating inputs",
    }
    return result
