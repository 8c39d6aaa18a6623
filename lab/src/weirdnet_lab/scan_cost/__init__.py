"""``weirdnet bench scan-cost``: what a Triton scan backend's kernels cost, counted on the
CPU (issue 73, part 5): bytes per element, launches, host syncs and the sm_90 PTX of
its level loops.  No GPU: the kernels run under Triton's interpreter and compile for
sm_90 on the CPU.

At the issue's shape (B = 8, D = 1024, bf16 in and out, causal; --length, 16K by
default):

- bytes read and written per element by each kernel, forward and forward + backward:
  distinct addresses each launch loads and stores, counted by an interpreter run at one
  channel block (B = 1, D = 16) and derived exactly for B = 8, D = 1024
  (weirdnet_lab.scan_cost.derive says how, the tests check it), plus the bytes of the
  PyTorch ops the host code runs around the kernels;
- launches per forward and per backward (Triton kernels and those PyTorch ops: each is a
  kernel launch on a GPU) and host syncs, at L = 1K .. 256K (the host code run on meta
  tensors);
- the PTX of every kernel specialization the run met, compiled for sm_90:
  bar.sync and shared-memory instructions inside its loops (the level loops), FP32
  instructions per level per element, global load and store widths.

Writes OUT/scan_cost_BACKEND.{json,md}.  About 3 minutes for "triton" at 16K on an idle
core (the interpreter run), plus a few seconds per kernel to compile.
"""

from __future__ import annotations

import argparse
import json
import os

from weirdnet_lab.harness import output
from weirdnet_lab.harness.arguments import above, positive

from .budgets import BUDGETS, LAUNCH_LENGTHS, SHAPE, SMALL

HELP = "bytes, launches, syncs and sm_90 PTX of a Triton scan backend, on the CPU"
DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`")
EXAMPLES = """\
examples:
  weirdnet bench scan-cost --backend triton --out lab/results/scan-cost
  weirdnet bench scan-cost --backend triton --length 2048 --no-ptx
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="triton",
                        help="a Triton scan backend of weird_scan (default: triton)")
    parser.add_argument("--length", type=positive, default=16384, metavar="L",
                        help="sequence length of the bytes count (default 16384)")
    parser.add_argument("--no-ptx", action="store_true", help="skip compiling the PTX")
    parser.add_argument("--timeout", type=above(0), default=3600.0,
                        help="seconds for each child process (default 3600)")
    output.add_out_arguments(parser, "scan_cost_BACKEND.{json,md}")




def child_env(interpret: bool) -> dict[str, str]:
    """The environment of a child: the interpreter on or off, the self-check off."""
    env = dict(os.environ, WEIRDNET_SCAN_SELFCHECK="0")
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.ops.weird_scan import dispatch
    from weirdnet_lab.harness import children

    from .report import render

    if args.backend not in dispatch.BACKENDS:
        return output.fail(f"backend {args.backend!r} is not in this checkout (choose from "
                           f"{', '.join(dispatch.BACKENDS)})")
    out = output.out_dir(args.out)
    try:
        with output.writing(out, "weirdnet bench scan-cost"):
            info = machine(argv)  # the commit as the run starts
            spec = {"backend": args.backend, "length": args.length}
            counts = children.run_job("scan-cost", spec,
                                      timeout_s=args.timeout, env=child_env(True),
                                      what="the interpreter run")
            if counts.get("status") in ("error", "timeout", "OOM"):
                raise RuntimeError(counts["error"])
            ptx = None
            if not args.no_ptx:
                ptx = children.run_job("scan-ptx",
                                       {"specs": counts["specs"]}, timeout_s=args.timeout,
                                       env=child_env(False), what="the PTX compilation")
            doc = record(args, info, counts, ptx)
            from weirdnet.run import write_atomic

            with output.write_whole():
                stem = out / f"scan_cost_{args.backend}"
                write_atomic(stem.with_suffix(".json"), json.dumps(doc, indent=2) + "\n")
                write_atomic(stem.with_suffix(".md"), render(doc))
            output.print_written([stem.with_suffix(".json"), stem.with_suffix(".md")])
    except (output.BenchError, RuntimeError) as error:
        return output.fail(error)
    print(render(doc), end="")
    return 0


def machine(argv: list[str]) -> dict:
    """Machine, versions (Triton's too), commit and command."""
    import torch

    from weirdnet_lab.harness.machine import machine_info

    info = machine_info(torch.device("cpu"), ["weirdnet", *argv], "not relevant")
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def record(args, info: dict, counts: dict, ptx: dict | None) -> dict:
    """The JSON record: machine, versions, commit, command, counts, PTX, budget."""
    import dataclasses

    budget = BUDGETS.get(args.backend)
    return {"benchmark": "scan-cost", "backend": args.backend, "machine": info,
            "shape": {**SHAPE, "L": args.length, "dtype": "bfloat16", "causal": True},
            "small": SMALL, "launch_lengths": list(LAUNCH_LENGTHS),
            "counts": counts, "ptx": ptx,
            "budget": dataclasses.asdict(budget) if budget else None}

