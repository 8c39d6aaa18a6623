"""``weirdnet bench context-parallel``: training steps of one sequence sharded over P
processes (torchrun, gloo, one thread per process): peak memory per process, tokens/s,
and the halo bytes each process sends against the formula and ring attention's.

Every (model, length, P) cell is one ``torchrun --nproc-per-node P`` job of
:mod:`.worker`, run one after another: a byte-level Weird-Net A (no positions) or B++
language model, D = 128, N = 2, activation checkpointing per block, batch 1.  P = 1 is
the single-process model on its default backend (the C kernel on a CPU), the baseline of
the memory ratio.  Writes ``context_parallel.{json,md,png}`` to OUT/context-parallel/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from weirdnet_lab.harness import output
from weirdnet_lab.harness.arguments import above, at_least, positive

HELP = "context parallelism: memory per process, tokens/s and bytes sent, P = 1, 2, 4"
DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`")
EXAMPLES = """\
examples:
  weirdnet bench context-parallel --out lab/results       # the committed record
  weirdnet bench context-parallel --lengths 65536 131072 --processes 1 4
  weirdnet bench context-parallel --halos keep resend     # both, side by side
  weirdnet bench context-parallel --model-lengths weird-b-pp=65536,131072
  weirdnet bench context-parallel --quick --out /tmp/cp   # tiny, seconds
  weirdnet bench context-parallel --dry-run               # print the cells only
"""
MODELS = ("weird-a", "weird-b-pp")
HALOS = ("keep", "resend")
LENGTHS = (65536, 131072, 262144)
PROCESSES = (1, 2, 4)
QUICK = dict(lengths=(512,), processes=(1, 2), steps=1, dim=32)
FFN_CHUNK = 16384


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated, of %(default)s")
    parser.add_argument("--lengths", type=positive, nargs="+", default=list(LENGTHS),
                        help="sequence lengths in bytes (default: %(default)s)")
    parser.add_argument("--model-lengths", action="append", default=[], metavar="NAME=L,L",
                        help="lengths for one model instead of --lengths (repeatable)")
    parser.add_argument("--processes", type=positive, nargs="+", default=list(PROCESSES),
                        help="P, processes per sequence (default: %(default)s)")
    parser.add_argument("--halos", nargs="+", default=["resend"], choices=HALOS,
                        help="what the sharded scan keeps for its backward, one cell per "
                             "value for P > 1 (default: %(default)s)")
    parser.add_argument("--recompute-exchanges", action="store_true",
                        help="let the block checkpoints recompute the sharded scans (their "
                             "halos sent again) instead of keeping their outputs: less "
                             "memory, more bytes (ContextParallel.recompute_exchanges)")
    parser.add_argument("--steps", type=at_least(0), default=1,
                        help="timed steps after the first (memory) step (default 1)")
    parser.add_argument("--dim", type=positive, default=128, help="D (default 128)")
    parser.add_argument("--depth", type=positive, default=2, help="N, blocks (default 2)")
    parser.add_argument("--timeout", type=above(0), default=1800.0,
                        help="seconds per cell before it is stopped (default 1800)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny: L = 512, P = 1, 2, D = 32 (for tests)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the cells and their commands, run nothing")
    output.add_out_arguments(parser, "context-parallel/context_parallel.{json,md,png}")


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every cell's spec (the worker's SPEC plus P); ValueError for a bad setting."""
    from weirdnet_lab.context_parallel.worker import MODELS as KNOWN

    settings = {**vars(args), **(QUICK if args.quick else {})}
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    per_model = {}
    for item in args.model_lengths:
        name, _, text = item.partition("=")
        try:
            per_model[name] = [int(x) for x in text.split(",") if x]
        except ValueError:
            raise ValueError(f"--model-lengths wants NAME=L,L,..., got {item!r}") from None
    for name in [*models, *per_model]:
        if name not in KNOWN:
            raise ValueError(f"unknown model {name!r}; known: {', '.join(KNOWN)}")
    cells = []
    for name in models:
        for length in (settings["lengths"] if args.quick else per_model.get(name, args.lengths)):
            for P in settings["processes"]:
                if P < 1 or length < 2 * P:
                    raise ValueError(f"P = {P} does not fit L = {length} (each process "
                                     "needs >= 2 positions, P >= 1)")
                for halos in (args.halos if P > 1 else args.halos[:1]):
                    cells.append(dict(model=name, length=int(length), P=int(P),
                                      halos=halos,
                                      recompute_exchanges=bool(args.recompute_exchanges),
                                      steps=settings["steps"],
                                      dim=settings["dim"], depth=args.depth,
                                      ffn_chunk=FFN_CHUNK))
    if settings["steps"] < 0 or settings["dim"] < 1 or args.depth < 1:
        raise ValueError("--steps must be >= 0, --dim and --depth >= 1")
    for cell in cells:
        check_cell(cell)
    return cells


def check_cell(cell: dict[str, Any]) -> None:
    """What each worker would refuse, checked here before any process starts (a worker's
    error would end in torchrun's own ChildFailedError traceback): the model builds (on
    the meta device: no memory) and, for P > 1, takes the cell's ContextParallel.
    ValueError naming the cell otherwise."""
    import torch

    from weirdnet.ops import ContextParallel
    from weirdnet.train.context_parallel import check_shardable
    from weirdnet_lab.context_parallel.worker import build_model

    try:
        with torch.device("meta"):
            model = build_model(cell["model"], cell["length"], cell["dim"], cell["depth"])
        if cell["P"] > 1:
            ContextParallel(halos=cell["halos"],  # checks its settings
                            recompute_exchanges=cell["recompute_exchanges"])
            check_shardable(model)
    except ValueError as error:
        raise ValueError(f"{cell['model']} L={cell['length']} P={cell['P']} "
                         f"(--dim {cell['dim']}, --depth {cell['depth']}): {error}") from None


def worker_command(cell: dict[str, Any], prefix: str) -> list[str]:
    """The torchrun command line of one cell."""
    spec = {k: cell[k] for k in ("model", "length", "halos", "recompute_exchanges", "steps",
                                 "dim", "depth", "ffn_chunk")}
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={cell['P']}", "-m", "weirdnet_lab.context_parallel.worker",
            json.dumps(spec), prefix]


def run_cell(cell: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one cell; its row (:func:`.report.row`) or {"error": ...}."""
    from weirdnet_lab.context_parallel.report import row
    from weirdnet_lab.harness.memory import child_env

    env = {**child_env(), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        prefix = str(Path(tmp) / "rank")
        try:
            done = subprocess.run(worker_command(cell, prefix), env=env, timeout=timeout,
                                  capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return {**cell, "error": f"stopped after {timeout:.0f} s"}
        if done.returncode:
            return {**cell, "error": f"exit {done.returncode}: "
                                     f"{worker_error(done.stderr or done.stdout)}"}
        ranks = [json.loads(Path(f"{prefix}.{r}.json").read_text()) for r in range(cell["P"])]
    return row(cell, ranks)


def worker_error(output: str) -> str:
    """The cause of a failed torchrun job, read from its output: the last exception line
    a worker printed (torchrun's own ChildFailedError report comes after it and names
    only exit codes), else the last three lines."""
    lines = output.strip().splitlines()
    causes = [line for line in lines if _EXCEPTION.match(line) and "ChildFailedError" not in line]
    return causes[-1] if causes else " | ".join(lines[-3:])


_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt): ")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Plan, run every cell, write the record and report; the exit status."""
    try:
        cells = plan(args)
    except ValueError as error:
        print(f"weirdnet bench context-parallel: {error}", file=sys.stderr)
        return 2
    if args.dry_run:
        for cell in cells:
            print(" ".join(worker_command(cell, "PREFIX")))
        return 0
    import torch

    from weirdnet_lab.context_parallel.report import write
    from weirdnet_lab.harness.alloc import return_freed_memory
    from weirdnet_lab.harness.machine import machine_info

    folder = output.out_dir(args.out) / "context-parallel"
    rows = []
    for cell in cells:
        rows.append(run_cell(cell, args.timeout))
        r = rows[-1]
        print(f"{r['model']} L={r['length']} P={r['P']}: "
              + (r["error"] if "error" in r else
                 f"{r['peak_rss_mib']:.0f} MiB/process, {r['tokens_per_s']:.0f} tokens/s"),
              file=sys.stderr, flush=True)
    machine = machine_info(torch.device("cpu"), ["weirdnet", *argv],
                           return_freed_memory())
    machine["load_average_after"] = list(os.getloadavg())
    record = {"machine": machine, "quick": bool(args.quick), "rows": rows}
    paths = write(folder, record)
    output.print_written(paths)
    return 1 if any("error" in r for r in rows) else 0
