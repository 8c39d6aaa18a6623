"""Side by side: the CPU scan kernels of this tree against those of an earlier commit.

    python lab/benchmarks/scan_kernel_ab.py REV [--lengths 1024 4096 16384] [--batch 4]
        [--width 256] [--cpu-time] [--out DIR [--name NAME]]

Builds ``csrc/`` of git revision REV (same compiler and flags as weirdnet's own build)
next to this tree's, checks that both give bitwise the same forward and backward, then
times the forward and the backward of both on the same inputs (B = --batch, D = --width,
float32, all torch threads), alternating old and new in every round so that load changes
reach both alike.  ``--cpu-time`` times with this process's CPU time instead of the wall
clock (one torch thread only): on a machine other jobs share, a wait for a core then does
not count.  Prints a Markdown table (median of the rounds) and, with --out, writes
it to DIR/NAME.md (default scan_kernel_ab_cpu).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from weirdnet.ops import cbuild
from weirdnet.ops.weird_scan import cpu
from weirdnet.run import write_atomic
from weirdnet_lab.harness.alloc import reuse_freed_memory
from weirdnet_lab.harness.machine import cpu_model

CSRC = "src/weirdnet/ops/weird_scan/csrc"


def this_tree() -> str:
    """This tree's commit, with " + uncommitted changes" when the kernels differ from it."""
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", CSRC]).returncode != 0
    return commit + (" + uncommitted changes" if dirty else "")


def build_revision(rev: str, folder: Path) -> ctypes.CDLL:
    """The kernel library of ``rev``'s csrc/, compiled into ``folder``."""
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                               text=True, check=True).stdout.strip())
    for name in ("weird_scan.c", "weird_scan_impl.h"):
        text = subprocess.run(["git", "show", f"{rev}:{CSRC}/{name}"], cwd=root,
                              capture_output=True, text=True, check=True).stdout
        (folder / name).write_text(text)
    target = folder / "old.so"
    compiler = cbuild.find_compiler()
    subprocess.run([compiler, *cbuild.FLAGS, cbuild.NATIVE_FLAG, "-o", str(target),
                    str(folder / "weird_scan.c"), "-lm"], check=True)
    lib = ctypes.CDLL(str(target))
    cpu._declare(lib)
    return lib


def call(lib, kind: str, a, v, logw, g, K):
    """Run the library's fwd or bwd on (a, v, logw[, g]) through cpu.py's thread split
    (causal, no mask, no documents)."""
    kernel = cpu._KERNEL
    saved = kernel._lib
    kernel._lib = lib
    try:
        D = a.shape[-1]
        return cpu.fwd(a, v, logw, None, None, D, K) if kind == "fwd" else \
            cpu.bwd(a, v, logw, None, None, g, D, K)
    finally:
        kernel._lib = saved


def same_results(old, new, a, v, logw, g, K) -> bool:
    """Whether both libraries give bitwise the same O, dA, dV and d log_w."""
    def outputs(lib):
        return (call(lib, "fwd", a, v, logw, g, K), *call(lib, "bwd", a, v, logw, g, K))

    return all(torch.equal(x, y) for x, y in zip(outputs(old), outputs(new), strict=True))


def measure(old, new, B: int, L: int, D: int, rounds: int, clock=time.perf_counter) -> dict:
    K = max(1, (L - 1).bit_length())
    gen = torch.Generator().manual_seed(0)
    a, v, g = (torch.randn(B, L, D, generator=gen) for _ in range(3))
    logw = (torch.randn(K, D, generator=gen) * 0.1).cumsum(0)
    row = {"L": L, "same": same_results(old, new, a, v, logw, g, K)}
    for kind in ("fwd", "bwd"):
        for lib in (old, new):
            call(lib, kind, a, v, logw, g, K)  # warm-up
        times = {"old": [], "new": []}
        for r in range(rounds):
            order = (("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old))
            for name, lib in order:
                start = clock()
                call(lib, kind, a, v, logw, g, K)
                times[name].append(clock() - start)
        for name in ("old", "new"):
            row[f"{kind}_{name}_ms"] = 1e3 * statistics.median(times[name])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="git revision of the old kernels")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with the process's CPU time (needs one torch thread)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--name", default="scan_kernel_ab_cpu",
                        help="file name of the table under --out, without .md")
    args = parser.parse_args(argv)
    if args.cpu_time and torch.get_num_threads() != 1:
        print(f"scan_kernel_ab: --cpu-time needs one torch thread (OMP_NUM_THREADS=1), "
              f"not {torch.get_num_threads()}", file=sys.stderr)
        return 2
    clock = time.process_time if args.cpu_time else time.perf_counter
    reuse_freed_memory()
    new = cpu.load()
    with tempfile.TemporaryDirectory() as folder:
        old = build_revision(args.rev, Path(folder))
        rows = [measure(old, new, args.batch, L, args.width, args.rounds, clock)
                for L in args.lengths]
    lines = [f"# CPU scan kernels: {args.rev} (old) against this tree (new: {this_tree()})",
             "",
             f"- command: `python lab/benchmarks/scan_kernel_ab.py {' '.join(sys.argv[1:])}`",
             f"- machine: {cpu_model()}, "
             f"{torch.get_num_threads()} torch threads; torch {torch.__version__}",
             f"- B={args.batch}, D={args.width}, float32, no mask; median of "
             f"{args.rounds} alternating rounds after a warm-up"
             + ("; process CPU time" if args.cpu_time else "; wall time"), "",
             "| L | fwd old ms | fwd new ms | bwd old ms | bwd new ms | bwd old/new | "
             "(fwd+bwd)/fwd new | bitwise equal |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['L']} | {r['fwd_old_ms']:.2f} | {r['fwd_new_ms']:.2f} | "
                     f"{r['bwd_old_ms']:.1f} | {r['bwd_new_ms']:.1f} | "
                     f"{r['bwd_old_ms'] / r['bwd_new_ms']:.2f}x | "
                     f"{(r['fwd_new_ms'] + r['bwd_new_ms']) / r['fwd_new_ms']:.2f} | "
                     f"{'yes' if r['same'] else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_atomic(args.out / f"{args.name}.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
