"""How often the "triton-e2" backward's programs take path A (issue 73, part 4), on the
scan inputs of a model's Weird-attention layers: at the default initialisation and on a
trained run.  Under the Triton interpreter on the CPU (no GPU needed).

    OMP_NUM_THREADS=1 TRITON_INTERPRET=1 python lab/benchmarks/scan_e2_backward_paths.py \
        RUN_DIR [--batch 4] [--length 256] [--layer-lengths 4096 16384] [--layer-dim 16]

RUN_DIR: a trained run or checkpoint (``weirdnet train``); the default-initialisation
model is the same class and config with fresh parameters (seed 0).  The tokens are bytes
of the Python standard library's source (the quick start's data), the output gradient
N(0, 1).  Prints, per model and pass (keyed by its first level), the programs that took
path B and all programs.
"""

from __future__ import annotations

import argparse
import os
import sysconfig
from pathlib import Path

import torch


def tokens(batch: int, length: int) -> torch.Tensor:
    """(batch, length) bytes of the standard library's source, from a few files."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    data = b"".join(p.read_bytes() for p in sorted(lib.glob("*.py"))[:40])
    starts = torch.linspace(0, len(data) - length - 1, batch).long().tolist()
    return torch.tensor([list(data[s:s + length]) for s in starts], dtype=torch.long)


def scan_inputs(model, ids):
    """The (a, v, log_w, mask, doc, n_causal) of each scan call in a forward of ``model``."""
    import weirdnet.layers.weird as weird

    seen, original = [], weird.scan_op

    def record(a, v, log_w, mask, doc, n_causal, *rest):
        seen.append((a.detach(), v.detach(), log_w.detach(), mask, doc, n_causal))
        return original(a, v, log_w, mask, doc, n_causal, *rest)

    weird.scan_op = record
    try:
        with torch.no_grad():
            model(ids)
    finally:
        weird.scan_op = original
    return seen


def counts(model, ids) -> dict[int, list[int]]:
    from weirdnet.ops.weird_scan import triton_e2

    total: dict[int, list[int]] = {}
    for a, v, log_w, mask, doc, n_causal in scan_inputs(model, ids):
        grad = torch.randn(a.shape, generator=torch.Generator().manual_seed(0))
        _, found = triton_e2._backward.path_counts(a.float(), v.float(), log_w.float(),
                                                   grad, mask, doc, n_causal)
        for lo, (took, n) in found.items():
            row = total.setdefault(lo, [0, 0])
            row[0] += took
            row[1] += n
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--layer-lengths", type=int, nargs="*", default=[],
                        help="also one default-initialised WeirdAttention layer (D = "
                        "--layer-dim, x ~ N(0, 1), batch 1) at these lengths")
    parser.add_argument("--layer-dim", type=int, default=16)
    parser.add_argument("--skip-models", action="store_true",
                        help="only the --layer-lengths measurements")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("set TRITON_INTERPRET=1 (the kernels run in the interpreter)")
    from weirdnet.train.trained import load_trained

    trained = load_trained(args.run)[0].eval()
    torch.manual_seed(0)
    fresh = type(trained)(trained.config).eval()
    ids = tokens(args.batch, args.length)
    models = () if args.skip_models else (("default initialisation", fresh),
                                          (f"trained ({args.run})", trained))
    for name, model in models:
        found = counts(model, ids)
        report(name, found)
    from weirdnet.layers.weird import WeirdAttention

    for length in args.layer_lengths:
        torch.manual_seed(0)
        layer = WeirdAttention(args.layer_dim, max_len=length)
        x = torch.randn(1, length, args.layer_dim)
        with torch.no_grad():
            a, v, log_w = layer.proj_a(x), layer.proj_v(x), layer.log_weights()
        grad = torch.randn(a.shape, generator=torch.Generator().manual_seed(0))
        from weirdnet.ops.weird_scan import triton_e2

        _, found = triton_e2._backward.path_counts(a, v, log_w, grad)
        report(f"one layer, default initialisation, L = {length}, D = {args.layer_dim}",
               found)


def report(name: str, found: dict) -> None:
    took = sum(t for t, _ in found.values())
    n = sum(n for _, n in found.values())
    by_pass = ", ".join(f"pass from level {lo}: {t}/{m}" for lo, (t, m) in
                        sorted(found.items()))
    print(f"{name}: {took} of {n} backward programs took path B, {n - took} path A "
          f"({100 * (n - took) / max(n, 1):.1f}%); {by_pass}")


if __name__ == "__main__":
    main()
