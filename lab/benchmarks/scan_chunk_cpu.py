"""Side by side on one CPU thread: scan backends "chunk" and "torch" (and "cpu" if built).

    python lab/benchmarks/scan_chunk_cpu.py [--lengths 1024 4096 16384] [--batch 2]
        [--width 256] [--rounds 3] [--levels-per-chunk 6]

Times the forward and the forward + backward of each backend on the same float32 inputs
(B = --batch, D = --width, log_w = cumsum(randn), logits N(0, 1)), after one warm-up
call, alternating the backends in every round so that load changes reach them alike,
with this process's CPU time (one torch thread: a wait for a core does not count).
Prints a Markdown table of the medians, with the machine and commit.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import torch

from weirdnet.ops import levels_needed, weird_scan
from weirdnet.ops.weird_scan import chunk, dispatch
from weirdnet_lab.harness.machine import cpu_model


def timed(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def cases(B: int, L: int, D: int):
    g = torch.Generator().manual_seed(L)
    a, v = (torch.randn(B, L, D, generator=g) for _ in range(2))
    log_w = torch.randn(levels_needed(L), D, generator=g).cumsum(0)
    return a, v, log_w, torch.randn(B, L, D, generator=g)


def runs(backend: str, a, v, log_w, grad):
    def forward():
        with torch.no_grad():
            weird_scan(a, v, log_w, backend=backend)

    def both():
        xs = [x.detach().requires_grad_() for x in (a, v, log_w)]
        weird_scan(*xs, backend=backend).backward(grad)

    return forward, both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels-per-chunk", type=int, default=chunk.LEVELS_PER_CHUNK)
    args = parser.parse_args()
    torch.set_num_threads(1)
    chunk.LEVELS_PER_CHUNK = args.levels_per_chunk
    names = ["chunk", "torch"] + (["cpu"] if dispatch.BACKENDS["cpu"].available("cpu") else [])
    commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"CPU: {cpu_model()}, 1 thread, torch {torch.__version__}, commit {commit}, "
          f"B = {args.batch}, D = {args.width}, float32, C = {1 << args.levels_per_chunk}, "
          f"median of {args.rounds} rounds (CPU time, s)\n")
    print("| L | " + " | ".join(f"{n} fwd | {n} fwd+bwd" for n in names) + " |")
    print("|---" * (1 + 2 * len(names)) + "|")
    for L in args.lengths:
        inputs = cases(args.batch, L, args.width)
        fns = {n: runs(n, *inputs) for n in names}
        times = {(n, k): [] for n in names for k in range(2)}
        for n in names:  # warm-up: first calls plan einsums, build kernels
            for fn in fns[n]:
                fn()
        for _ in range(args.rounds):
            for n in names:
                for k, fn in enumerate(fns[n]):
                    times[(n, k)].append(timed(fn))
        cells = [f"{statistics.median(times[(n, k)]):.3f}" for n in names for k in range(2)]
        print(f"| {L} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
