"""How long the Triton scan kernels take to compile for a GPU, side by side with another
revision of them.  Needs triton (its wheel carries ptxas), not a GPU: each kernel is
compiled ahead of time for one target (default sm_90, an H100), with an empty cache.

    python lab/benchmarks/triton_compile_time.py                       # this checkout
    python lab/benchmarks/triton_compile_time.py --baseline e01cd49    # and that revision

Prints one row per kernel specialization of a first step at L = 1024 (seconds, lines of
PTX), in the passes each revision's own ``plan`` makes, and with --baseline that
revision's rows and the ratio of the totals.  A first training step compiles each specialization
it meets once (forward and backward, per pass shape, per dtype); Triton caches them on
disk afterwards.  Timings drift between runs on a shared machine: compare within a run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNEL_FILE = "src/weirdnet/ops/weird_scan/triton.py"
PACKAGE = "weirdnet.ops.weird_scan"
# A first step at L = 1024 (10 levels), in the passes each module's own ``plan`` makes.
LENGTH, LEVELS = 1024, 10
WIDTH = 1024  # channels: blocks of MAX_BLOCK_D


def load_kernels(revision: str | None, scratch: Path):
    """The kernel module of this checkout, or of ``revision`` (its file, written under
    ``scratch`` and loaded under the same package so that its relative imports resolve)."""
    if revision is None:
        return importlib.import_module(f"{PACKAGE}.triton")
    root = Path(__file__).resolve().parents[2]
    source = subprocess.run(["git", "show", f"{revision}:{KERNEL_FILE}"], cwd=root,
                            check=True, capture_output=True, text=True).stdout
    path = scratch / "triton_baseline.py"
    path.write_text(source)
    name = f"{PACKAGE}._triton_{revision}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def constants(kernels, ps, fn) -> tuple[dict, int]:
    """(every constexpr of ``fn``, num_warps) for one causal pass ``ps`` (a ``_Pass``) over
    bf16 inputs without a mask or documents, from the host code's own ``_common`` (on meta
    tensors)."""
    import torch

    x = torch.empty(1, LENGTH, WIDTH, dtype=torch.bfloat16, device="meta")
    log_w = torch.empty(LEVELS, WIDTH, dtype=torch.float32, device="meta")
    first, last = ps.lo == 0, ps.halo == 0
    *_, consts = kernels._common(ps, (x, x), slice(0, WIDTH), None, None, log_w, first)
    values = {**consts, "REV": False, "FIRST": first, "LAST": last, "TOP": last}
    return {p.name: values[p.name] for p in fn.params if p.is_constexpr}, consts["num_warps"]


def signature(fn, consts: dict, io_dtype: str) -> dict:
    """Argument types: pointers to the inputs/outputs in ``io_dtype``, float32 buffers
    for the pass state, int32 for the scalars."""
    sig = {}
    for p in fn.params:
        if p.name in consts:
            sig[p.name] = "constexpr"
        elif p.name in ("x1_ptr", "x2_ptr", "g_ptr", "y2_ptr", "mask_ptr", "doc_ptr",
                        "bo_1", "bo_2"):
            sig[p.name] = f"*{io_dtype}"
        elif p.name.endswith("_ptr") or p.name.startswith(("bi_", "bo_")):
            sig[p.name] = "*fp32"
        else:
            sig[p.name] = "i32"
    return sig


def compile_seconds(kernels, fn, ps, arch: int) -> tuple[float, int]:
    """(seconds, lines of PTX) to compile ``fn`` for one pass, bf16 inputs."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    consts, warps = constants(kernels, ps, fn)
    names = [p.name for p in fn.params]
    src = ASTSource(fn=fn, signature=signature(fn, consts, "bf16"),
                    constexprs={(names.index(k),): v for k, v in consts.items()})
    start = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": warps})
    return time.perf_counter() - start, len(compiled.asm["ptx"].splitlines())


def measure(kernels, arch: int) -> list[tuple[str, str, float, int]]:
    """(kernel, pass, seconds, PTX lines) for each kernel of each pass of the module's own
    plan, with an empty Triton cache."""
    rows = []
    passes = kernels.plan(LENGTH, LEVELS)
    for i, ps in enumerate(passes):
        label = f"{i + 1} of {len(passes)}: levels {ps.lo}-{ps.lo + ps.nl - 1}"
        for kind, fn in (("forward", kernels._fwd_pass_kernel),
                         ("backward", kernels._bwd_pass_kernel)):
            rows.append((kind, label, *compile_seconds(kernels, fn, ps, arch)))
    return rows


def main() -> int:
    from weirdnet.run import write_atomic
    from weirdnet_lab.harness.machine import cpu_model, git_commit

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="a git revision whose kernels to compile too")
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90)")
    parser.add_argument("--out", type=Path, help="also write the table to DIR/NAME.md")
    parser.add_argument("--name", default="triton_compile_time_cpu")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        parser.error("unset TRITON_INTERPRET: the interpreter compiles nothing")
    with tempfile.TemporaryDirectory(prefix="triton-compile-time-") as folder:
        scratch = Path(folder)
        os.environ["TRITON_CACHE_DIR"] = str(scratch / "cache-this-tree")  # empty caches
        current = measure(load_kernels(None, scratch), args.arch)
        base = None
        if args.baseline:
            os.environ["TRITON_CACHE_DIR"] = str(scratch / "cache-baseline")
            base = measure(load_kernels(args.baseline, scratch), args.arch)
    import triton

    tree = git_commit(Path(__file__).resolve().parents[2])
    lines = [f"# Compile time of the Triton scan kernels (this tree: {tree['commit']}"
             f"{', with uncommitted changes' if tree['dirty'] else ''})", "",
             f"- command: `python lab/benchmarks/triton_compile_time.py {' '.join(sys.argv[1:])}`",
             f"- compiled on: {cpu_model()}, for sm_{args.arch}; Triton {triton.__version__}; "
             "bf16 inputs, D = 1024, an empty cache; wall clock, one compilation each", ""]
    for name, rows in (("this tree", current), (args.baseline, base)):
        if rows is None:
            continue
        lines += [f"{name}:", "", "| kernel | pass | s | PTX lines |", "|---|---|---|---|"]
        lines += [f"| {kind} | {label} | {sec:.1f} | {ptx:,} |"
                  for kind, label, sec, ptx in rows]
        lines.append("")
    total = sum(row[2] for row in current)
    summary = f"total, the kernels of a first step at L = {LENGTH}: {total:.1f} s"
    if base:
        btotal = sum(row[2] for row in base)
        summary += f"; {args.baseline}: {btotal:.1f} s ({btotal / total:.1f}x)"
    text = "\n".join([*lines, summary]) + "\n"
    print(text, end="")
    if args.out:
        write_atomic(args.out / f"{args.name}.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
