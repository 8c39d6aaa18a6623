"""Side by side: the short convolution's fused C kernel against PyTorch's conv1d.

    python lab/benchmarks/short_conv_ab.py [--shapes 512x64x64 16x1024x128] [--width 4]
        [--documents N] [--rounds 15] [--cpu-time] [--out DIR [--name NAME]]

Both paths of :func:`weirdnet.ops.short_conv.short_conv` (``backend="cpu"`` and
``backend="torch"``) run on the same float32 inputs of each B x L x D shape with taps of
width --width; after checking that they agree (relative error of the output and of all
three gradients below 1e-5), the forward and the backward are timed, alternating the two
paths in every round so that load changes reach both alike.  ``--documents N`` packs N
equal documents into every row (``doc_ids``; the PyTorch path is then the shifted form).
``--cpu-time`` times with this process's CPU time (one torch thread only): on a machine
other jobs share, a wait for a core then does not count.  Prints a Markdown table (median
of the rounds) and, with --out, writes it to DIR/NAME.md (default short_conv_ab_cpu).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from weirdnet.ops.short_conv import short_conv
from weirdnet.run import write_atomic
from weirdnet_lab.harness.machine import cpu_model

PATHS = ("torch", "cpu")  # conv1d, the C kernel


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        B, L, D = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is BxLxD, e.g. 512x64x64, got {text!r}") \
            from None
    if min(B, L, D) < 1:
        raise argparse.ArgumentTypeError(f"every size must be >= 1, got {text!r}")
    return B, L, D


def inputs(B: int, L: int, D: int, k: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, L, D, generator=g), torch.randn(D, k, generator=g),
            torch.randn(D, generator=g), torch.randn(B, L, D, generator=g))


def documents(B: int, L: int, n: int) -> torch.Tensor | None:
    """doc_ids (B, L) of n equal documents per row, or None for n = 1."""
    return None if n == 1 else (torch.arange(L) * n // L).expand(B, L).contiguous()


def run(backend: str, x, weight, bias, grad, doc, clock) -> tuple[float, float, list]:
    """(forward seconds, backward seconds, [y, dx, dweight, dbias]) of one path."""
    leaves = [t.detach().requires_grad_() for t in (x, weight, bias)]
    start = clock()
    y = short_conv(*leaves, doc_ids=doc, backend=backend)
    mid = clock()
    y.backward(grad)
    end = clock()
    return mid - start, end - mid, [y.detach(), *(t.grad for t in leaves)]


def agree(a: list, b: list) -> bool:
    return all(float((p - q).norm() / q.norm()) < 1e-5 for p, q in zip(a, b))


def measure(shape: tuple[int, int, int], k: int, n_docs: int, rounds: int, clock) -> dict:
    x, weight, bias, grad = inputs(*shape, k)
    doc = documents(shape[0], shape[1], n_docs)
    first = {p: run(p, x, weight, bias, grad, doc, clock)[2] for p in PATHS}  # warm-up
    times = {(p, part): [] for p in PATHS for part in ("fwd", "bwd")}
    for _ in range(rounds):
        for p in PATHS:
            fwd, bwd, _ = run(p, x, weight, bias, grad, doc, clock)
            times[p, "fwd"].append(fwd)
            times[p, "bwd"].append(bwd)
    ms = {key: 1e3 * statistics.median(v) for key, v in times.items()}
    return {"shape": shape, "ms": ms, "agree": agree(first["cpu"], first["torch"])}


def this_tree() -> str:
    out = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True,
                         text=True)
    return out.stdout.strip() or "unknown"


def table(rows: list[dict], torch_name: str) -> list[str]:
    """The Markdown table; ``torch_name`` names the PyTorch path ("conv1d", "shifted")."""
    out = [f"| B x L x D | fwd {torch_name} ms | fwd C ms | bwd {torch_name} ms | bwd C ms | "
           f"fwd+bwd {torch_name} / C | agree |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        ms = row["ms"]
        ratio = (ms["torch", "fwd"] + ms["torch", "bwd"]) / (ms["cpu", "fwd"] + ms["cpu", "bwd"])
        out.append(f"| {' x '.join(map(str, row['shape']))} | {ms['torch', 'fwd']:.2f} | "
                   f"{ms['cpu', 'fwd']:.2f} | {ms['torch', 'bwd']:.2f} | "
                   f"{ms['cpu', 'bwd']:.2f} | {ratio:.2f}x | "
                   f"{'yes' if row['agree'] else 'NO'} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", type=parse_shape,
                        default=[(512, 64, 64), (512, 128, 64), (16, 1024, 128),
                                 (4, 4096, 128), (1, 16384, 256)])
    parser.add_argument("--width", type=int, default=4, help="taps k (default 4)")
    parser.add_argument("--documents", type=int, default=1,
                        help="documents packed in each row (default 1: no packing)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with process CPU time (needs one torch thread)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--name", default="short_conv_ab_cpu")
    args = parser.parse_args(argv)
    if min(args.width, args.rounds, args.documents) < 1:
        parser.error("--width, --documents and --rounds must be >= 1")
    if any(args.documents > L for _, L, _ in args.shapes):
        parser.error("--documents must not exceed any shape's L")
    if args.cpu_time and torch.get_num_threads() != 1:
        parser.error("--cpu-time needs one torch thread (set OMP_NUM_THREADS=1)")
    clock = time.process_time if args.cpu_time else time.perf_counter
    rows = [measure(shape, args.width, args.documents, args.rounds, clock)
            for shape in args.shapes]
    torch_path = "the shifted PyTorch form" if args.documents > 1 else "conv1d"
    lines = [f"# Short convolution: the C kernel against {torch_path} (this tree: {this_tree()})",
             "",
             f"- command: `python lab/benchmarks/short_conv_ab.py {' '.join(sys.argv[1:])}`",
             f"- machine: {cpu_model()}, {torch.get_num_threads()} torch threads; "
             f"torch {torch.__version__}",
             f"- k = {args.width}, float32, bias, no state, "
             + (f"{args.documents} packed documents per row (the PyTorch path: the shifted "
                "form)" if args.documents > 1 else "one document per row")
             + f"; median of {args.rounds} "
             "alternating rounds after a warm-up; "
             f"{'process CPU time' if args.cpu_time else 'wall clock'}; agree: relative "
             "error of the output and all three gradients below 1e-5", "",
             *table(rows, "shifted" if args.documents > 1 else "conv1d")]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        write_atomic(args.out / f"{args.name}.md", text)
    return 0 if all(row["agree"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
