"""``weirdnet bench gpu``: the GPU path checked and timed by one command.

Ten steps (issue 62 added kernels, models and decode-graph, described in
docs/speed.md; issue 73 added scan-timing; --quick runs env and scan-timing, issue 73's
prepared run of 8 minutes), in this order, each
in child processes under its own wall-clock limit (its time box: a child still
running at the end of it is stopped, the step is recorded as
timed out and the next step runs), each writing its JSON record under OUT/records/
before the next begins:

1. env: the device, driver, CUDA, torch, triton and weirdnet versions, the git commit;
2. correctness: the CUDA-parametrised tests (tests/ops/test_scan_triton.py,
   tests/ops/test_scan_nonfinite.py: every Triton scan kernel against the float64 reference
   at awkward sizes, forward and gradients, fp32/bf16/fp16, masks, reverse, decoding,
   stability at 64K) in a pytest child, then the Triton backend's self-check;
3. scan: `weirdnet bench scan` at B=8, D=1024, bf16, L=1K..64K (scan, the kernels
   without the custom op, the PyTorch backend, SDPA causal), and the device-to-device
   copy bandwidth over the bytes the scan's forward reads and writes: the scan's
   achieved fraction of it;
4. speed: `weirdnet bench speed` (Weird-Net A and B against the Transformer) at
   1K..16K, with peak memory (--quick: Weird-Net A and the Transformer at 1K and 16K);
5. decode: `weirdnet bench decode` at 16K context, batch 1 and 16;
6. suite: a pilot of the `gpu` suite budget on ListOps, one seed per mechanism
   (`weirdnet bench suite`), and the budget's whole time extrapolated from it;
7. scan-timing (issue 73): the new Triton scan backend (--new-backend) against the old
   one and SDPA causal at 1K, 4K, 16K, 64K, forward and forward + backward, timed with
   triton.testing.do_bench (median, L2 flushed), after the environment, SDPA's backend,
   each backend's self-check and the copy bandwidth; then each forward pass alone and
   with its level loop emptied, and the path-A rate, where the backend module has the
   hooks (bench_passes, path_counts; else a record says what is missing).  Each
   measurement is written (OUT/logs/scan-timing.jsonl) before the next starts; a time
   budget skips what is left, each skip a record.

The exit status is 1 when a correctness check failed (or did not finish), else 0 (a
timing step that failed or timed out is reported, not fatal); 2 without CUDA (unless
--dry-run-cpu), for a bad option or a busy OUT.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from weirdnet_lab.harness import output

from .plan import NO_CUDA, QUICK_STEPS, STEPS, TIME_BOXES_S, Plan, now, read_json
from .report import render_report
from .steps import code_version, run_step

HELP = "the GPU path in one command: tests, scan, models, decoding, suite pilot"

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`") + """
OUT gets report.md (every step's results on one page), gpu.json (the run), records/N-STEP.json
(one per step), logs/ (each child's output; each suite pilot cell's training log as
logs/suite-CELL.jsonl) and the benchmarks' own folders, laid out as
lab/results/ is: scan/scan_cuda.*, speed/speed_cuda.*, decode-b1/decode_cuda.*,
decode-b16/decode_cuda.*, suite/suite-gpu/ (the suite's run directories: suite-runs/).
Time boxes in seconds (--quick's in brackets): env 60 [45], scan-timing 420 [420],
correctness 300 [90], scan 300 [60], kernels 240 [150], speed 300 [90], models 300 [120],
decode 180 [35], decode-graph 120 [75], suite 360 [60]; --quick: 465 s at most. On a
fresh machine the env step alone took 23 to 30+ s (an H100, CUDA starting up), and each
Triton kernel compiles on its first use, inside the step that first needs it.

--dry-run-cpu runs the same steps on the CPU at tiny sizes (a few Triton-interpreter
tests, TRITON_INTERPRET=1; the smoke suite budget) to check the control flow: its report
says "CPU dry run: no GPU numbers".
"""
EXAMPLES = """\
examples:
  weirdnet bench gpu --out gpu-run               # on a GPU machine: 25 minutes at most
  weirdnet bench gpu --out gpu-run --quick       # issue 73's run: 8 minutes at most
  weirdnet bench gpu --out gpu-run --quick --new-backend triton-e2
  weirdnet bench gpu --out /tmp/dry --dry-run-cpu   # the control flow, on the CPU
  weirdnet bench gpu --out gpu-run --steps env,correctness
  lab/benchmarks/gpu.sh gpu-run                      # a fresh machine: install, then run
"""


def _steps(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown step(s) {', '.join(unknown) or '(none)'}; "
                                         f"choose from {', '.join(STEPS)}")
    return names


def _time_box(text: str) -> tuple[str, float]:
    name, _, seconds = text.partition("=")
    try:
        value = float(seconds)
    except ValueError:
        value = -1.0
    if name not in STEPS or not value > 0:
        raise argparse.ArgumentTypeError(f"expected STEP=SECONDS with STEP one of "
                                         f"{', '.join(STEPS)} and SECONDS > 0, got {text!r}")
    return name, value


def _default_new() -> str:
    from weirdnet_lab.scan_cost.budgets import NEW_BACKEND

    return NEW_BACKEND


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for report.md, the records and every benchmark's output")
    parser.add_argument("--quick", action="store_true",
                        help="env and scan-timing only, within 8 minutes (--steps adds "
                             "others)")
    parser.add_argument("--dry-run-cpu", action="store_true",
                        help="no GPU: the same steps on the CPU at tiny sizes (control flow "
                             "only; the report says so)")
    parser.add_argument("--steps", type=_steps, default=None, metavar="S1,S2",
                        help=f"run only these steps, in the usual order (default: "
                             f"{','.join(STEPS)}; --quick: {','.join(QUICK_STEPS)})")
    parser.add_argument("--time-box", type=_time_box, action="append", default=[],
                        metavar="STEP=SECONDS", help="a step's wall-clock limit (repeatable; "
                        "defaults above)")
    parser.add_argument("--tests", nargs="+", default=None, metavar="TEST",
                        help="pytest paths or node ids for the correctness step (default: "
                             "the CUDA-parametrised test files of this checkout)")
    parser.add_argument("--new-backend", default=None, metavar="NAME",
                        help=f"the new Triton scan backend the scan-timing step races "
                             f"against 'triton' (default: {_default_new()}; a name this "
                             "checkout lacks is recorded as missing)")
    parser.add_argument("--force", action="store_true",
                        help="let a --quick or --dry-run-cpu run write into a folder that "
                             "holds a full run's report")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Check for CUDA, run the steps, write the report; the exit status."""
    import torch

    if not args.dry_run_cpu and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr, flush=True)
        return 2
    mode = "dry-run" if args.dry_run_cpu else "quick" if args.quick else "full"
    boxes = {**TIME_BOXES_S[mode], **dict(args.time_box)}
    chosen = args.steps or (QUICK_STEPS if mode == "quick" else STEPS)
    plan = Plan(out=Path(args.out).expanduser(), mode=mode,
                device="cpu" if args.dry_run_cpu else "cuda",
                steps=[s for s in STEPS if s in chosen], boxes=boxes,
                tests=args.tests, force=args.force, command=["weirdnet", *argv],
                new_backend=args.new_backend or _default_new())

    def refuse() -> None:
        if mode != "full":
            previous = read_json(plan.out / "gpu.json") or {}
            full = [plan.out / "report.md"] if previous.get("mode") == "full" else []
            output.refuse_quick_over_full(full, f"--{'dry-run-cpu' if plan.dry else 'quick'}",
                                          args.force)

    try:
        refuse()
        with output.writing(plan.out, "weirdnet bench gpu") as session:
            refuse()
            return _run(plan, session)
    except output.BenchError as error:
        return output.fail(error)


def _run(plan: Plan, session: output.Writing) -> int:
    from weirdnet.run import write_atomic

    records = []
    session.kept = lambda: (f"the records of {len(records)} finished step(s) are in "
                            f"{plan.out / 'records'}; no report written")
    for index, name in enumerate(STEPS, start=1):
        if name in plan.steps:
            records.append(run_step(plan, index, name))
    records = [read_json(plan.out / "records" / f"{r['index']}-{r['step']}.json") or r
               for r in records]  # the report is built from the records as written
    correctness = next((r for r in records if r["step"] == "correctness"), None)
    failed = correctness is not None and correctness["status"] not in ("passed", "skipped")
    status = 1 if failed else 0
    summary = {"benchmark": "gpu", "mode": plan.mode, "quick": plan.mode != "full",
               "device": plan.device, "command": shlex.join(plan.command), "date": now(),
               **code_version(), "steps": {r["step"]: r["status"] for r in records},
               "exit_status": status}
    with output.write_whole():
        write_atomic(plan.out / "gpu.json", json.dumps(summary, indent=2) + "\n")
        path = write_atomic(plan.out / "report.md", render_report(summary, records))
    print(f"weirdnet bench gpu: wrote {path}" + ("; a correctness check failed" if failed
                                                else ""), file=sys.stderr, flush=True)
    return status
