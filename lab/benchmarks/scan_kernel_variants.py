"""Time the Triton scan kernels under other tuning knobs, side by side in one process (GPU).

The knobs of ``weirdnet.ops.weird_scan.triton`` (LEVELS_PER_PASS, NUM_WARPS, MAX_BLOCK_D,
TILE_ELEMENTS) are module globals read at call time; each variant sets them, checks its
output against the default's, and times fwd and fwd+bwd with ``triton.testing.do_bench``
(median ms).  ``--other-module FILE`` adds the kernels of another version of that module
(for example ``git show e01cd49:src/weirdnet/ops/weird_scan/triton.py``), loaded as a
sibling module.  SDPA causal (B, 16, L, 64) is timed in the same run for scale.  Where
the backward is timed, the peak memory of one forward + backward above what was allocated
before it is recorded too (``peak_extra_mib``).  Writes one
JSON line per measurement to ``--out`` as it goes, so a run cut short keeps what it measured.

    python lab/benchmarks/scan_kernel_variants.py --out variants.jsonl [--other-module F]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from functools import partial

import torch
import torch.nn.functional as F
import triton.testing

from weirdnet.ops.weird_scan import triton as cur

DEFAULTS = dict(LEVELS_PER_PASS=cur.LEVELS_PER_PASS, NUM_WARPS=cur.NUM_WARPS,
                MAX_BLOCK_D=cur.MAX_BLOCK_D, TILE_ELEMENTS=cur.TILE_ELEMENTS)
# Changes from the module's defaults, in the order they run (a run stops at its deadline).
# The first run (H200, 2026-11-27; lab/results/gpu/h200-2026-11-27-variants/) swept
# LEVELS_PER_PASS at 8 warps, 16-channel blocks: 5 won and became the default.  These are
# the knobs it did not reach, around that default.
VARIANTS = [{}, {"NUM_WARPS": 4}, {"NUM_WARPS": 2}, {"MAX_BLOCK_D": 32}, {"MAX_BLOCK_D": 8},
            {"TILE_ELEMENTS": 1024}, {"TILE_ELEMENTS": 16384}, {"LEVELS_PER_PASS": 4},
            {"LEVELS_PER_PASS": 6}, {"NUM_WARPS": 4, "MAX_BLOCK_D": 32}]


def load_other(path: str):
    name = "weirdnet.ops.weird_scan._other_triton"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def inputs(L: int, B: int, D: int, dtype: torch.dtype):
    g = torch.Generator(device="cuda").manual_seed(L)
    a = torch.randn(B, L, D, device="cuda", generator=g).to(dtype)
    v = torch.randn(B, L, D, device="cuda", generator=g).to(dtype)
    K = max(1, math.ceil(math.log2(L)))
    log_w = -torch.rand(K, D, device="cuda", generator=g)
    grad = torch.randn(B, L, D, device="cuda", generator=g).to(dtype)
    return a, v, log_w, grad, K


def sdpa_step(qkv, grad) -> None:
    F.scaled_dot_product_attention(*qkv, is_causal=True).backward(grad)


def scan_step(mod, a, v, log_w, grad, split: int, nlev: int) -> None:
    """What one training step asks of the scan: the forward, then the backward."""
    mod.fwd(a, v, log_w, None, None, split, nlev)
    mod.bwd(a, v, log_w, None, None, grad, split, nlev)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--other-module")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--bwd-lengths", type=int, nargs="+", default=[1024, 16384])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--deadline-s", type=float, default=330.0)
    args = p.parse_args()
    start = time.monotonic()
    out = open(args.out, "a")

    def emit(**rec):
        rec["t"] = round(time.monotonic() - start, 1)
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")
        out.flush()

    emit(device=torch.cuda.get_device_name(), torch=torch.__version__,
         triton=triton.__version__, defaults=DEFAULTS, B=args.batch, D=args.dim)
    data = {L: inputs(L, args.batch, args.dim, torch.bfloat16) for L in args.lengths}
    for L in args.lengths:  # SDPA causal for scale
        q = torch.randn(args.batch, 16, L, 64, device="cuda", dtype=torch.bfloat16)
        qs = [q.clone().requires_grad_() for _ in range(3)]
        fwd = triton.testing.do_bench(partial(F.scaled_dot_product_attention, q, q, q,
                                              is_causal=True))
        fb = triton.testing.do_bench(partial(sdpa_step, qs, q))
        emit(variant="sdpa-causal", L=L, fwd_ms=fwd, fwdbwd_ms=fb)
    want = {}
    runs = [("current", cur, v) for v in VARIANTS]
    if args.other_module:  # right after the defaults: the comparison asked for first
        runs.insert(1, ("other", load_other(args.other_module), {}))
    for label, mod, knobs in runs:
        if time.monotonic() - start > args.deadline_s:
            emit(stopped="deadline", before=f"{label} {knobs}")
            break
        for key, val in {**DEFAULTS, **knobs}.items():
            setattr(mod, key, val)
        for L in args.lengths:
            a, v, log_w, grad, K = data[L]
            try:
                t0 = time.monotonic()
                o = mod.fwd(a, v, log_w, None, None, args.dim, K)
                torch.cuda.synchronize()
                first = time.monotonic() - t0
                ref = want.setdefault(L, o)
                diff = (o.float() - ref.float()).abs().max().item()
                fwd = triton.testing.do_bench(
                    partial(mod.fwd, a, v, log_w, None, None, args.dim, K))
                rec = dict(variant=label, knobs=knobs, L=L, fwd_ms=fwd, max_diff=diff,
                           first_call_s=round(first, 2))
                if L in args.bwd_lengths:
                    step = partial(scan_step, mod, a, v, log_w, grad, args.dim, K)
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    before = torch.cuda.memory_allocated()
                    t0 = time.monotonic()
                    step()
                    torch.cuda.synchronize()
                    rec["first_bwd_call_s"] = round(time.monotonic() - t0, 2)
                    rec["peak_extra_mib"] = round(
                        (torch.cuda.max_memory_allocated() - before) / 2**20, 1)
                    rec["fwdbwd_ms"] = triton.testing.do_bench(step, warmup=5, rep=50)
                emit(**rec)
            except Exception as exc:  # a variant the kernels cannot build: record it
                emit(variant=label, knobs=knobs, L=L, error=f"{type(exc).__name__}: {exc}"[:300])
                break
    out.close()


if __name__ == "__main__":
    main()
