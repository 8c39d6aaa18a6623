"""Child process measuring the peak extra CPU memory of one forward+backward.

Run as ``python -m weirdnet.bench._memchild --suite OPBENCH --method NAME --batch B
--length L --dim D ...``; prints one JSON line.  Order of events (see :mod:`.memory`):

1. allocator setting (before torch is imported, so every tensor is served from the heap);
2. one forward+backward on a tiny shape, to load kernels, thread pools and autograd state
   whose one-off memory is not the method's per-call cost (skipped if it fails: the
   real measurement then reports any error);
3. the real inputs and ``grad_out`` (nothing larger is built): baseline = current RSS;
   the peak RSS is reset to it, and checked to be no higher than it;
4. one forward+backward; extra = peak RSS - baseline (peak RSS: ``VmHWM``, see
   :mod:`.memory` for why not ``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json

from weirdnet.bench.alloc import reuse_freed_memory
from weirdnet.bench.children import watch_parent

# High-water mark above the baseline tolerated as counter noise (RSS counters are cached
# per thread by the kernel, up to 64 pages each).
_SLACK_BYTES = 1 << 20


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m weirdnet.bench._memchild")
    p.add_argument("--suite", default="scan")
    p.add_argument("--method", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--length", type=int, required=True)
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the JSON result; returns the exit status."""
    allocator = reuse_freed_memory()
    args = _parse(argv)
    watch_parent()  # a bench command killed outright: do not outlive it
    import torch

    from weirdnet.bench.memory import MIB, current_rss_bytes, peak_rss_bytes, reset_peak_rss
    from weirdnet.bench.methods import Shape
    from weirdnet.bench.opbench import get_opbench
    from weirdnet.bench.timing import forward_backward_step

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
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
