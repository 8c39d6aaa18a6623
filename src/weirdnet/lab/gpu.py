"""``weirdnet bench gpu``: the GPU path checked and timed by one command.

Six steps, in this order, each in child processes under its own wall-clock limit (its
time box: a child still running at the end of it is stopped, the step is recorded as
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
   (`weirdnet bench suite`), and the budget's whole time extrapolated from it.

The exit status is 1 when a correctness check failed (or did not finish), else 0 (a
timing step that failed or timed out is reported, not fatal); 2 without CUDA (unless
--dry-run-cpu), for a bad option or a busy OUT.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from weirdnet.lab.harness import output

HELP = "the GPU path in one command: tests, scan, models, decoding, suite pilot"

DESCRIPTION = __doc__.split("\n\n", 1)[1].replace("``", "`") + """
OUT gets report.md (every step's results on one page), gpu.json (the run), records/N-STEP.json
(one per step), logs/ (each child's output; each suite pilot cell's training log as
logs/suite-CELL.jsonl) and the benchmarks' own folders, laid out as
benchmarks/results/ is: scan/scan_cuda.*, speed/speed_cuda.*, decode-b1/decode_cuda.*,
decode-b16/decode_cuda.*, suite/suite-gpu/ (the suite's run directories: suite-runs/).
Time boxes in seconds (--quick's in brackets): env 60 [60], correctness 300 [120], scan
300 [60], speed 300 [90], decode 180 [35], suite 360 [60]: 25 minutes at most [7]. On a
fresh machine the env step alone took 23 to 30+ s (an H100, CUDA starting up), and each
Triton kernel compiles on its first use, inside the step that first needs it.

--dry-run-cpu runs the same steps on the CPU at tiny sizes (a few Triton-interpreter
tests, TRITON_INTERPRET=1; the smoke suite budget) to check the control flow: its report
says "CPU dry run: no GPU numbers".
"""
EXAMPLES = """\
examples:
  weirdnet bench gpu --out gpu-run               # on a GPU machine: 25 minutes at most
  weirdnet bench gpu --out gpu-run --quick       # 7 minutes at most
  weirdnet bench gpu --out /tmp/dry --dry-run-cpu   # the control flow, on the CPU
  weirdnet bench gpu --out gpu-run --steps env,correctness
  benchmarks/gpu.sh gpu-run                      # a fresh machine: install, then run
"""

STEPS = ("env", "correctness", "scan", "speed", "decode", "suite")
TITLES = {"env": "Environment", "correctness": "Correctness (GPU tests)",
          "scan": "Scan timing vs SDPA and copy bandwidth",
          "speed": "Model-level training steps", "decode": "Decoding at 16K context",
          "suite": "Pilot of the gpu suite budget (ListOps)"}
TIME_BOXES_S = {
    "full": {"env": 60, "correctness": 300, "scan": 300, "speed": 300, "decode": 180,
             "suite": 360},
    "quick": {"env": 60, "correctness": 120, "scan": 60, "speed": 90, "decode": 35,
              "suite": 60},
    "dry-run": {"env": 60, "correctness": 120, "scan": 120, "speed": 120, "decode": 120,
                "suite": 180},
}
"""Each step's wall-clock limit in seconds, per mode (--time-box STEP=S overrides)."""

NO_CUDA = ("weirdnet bench gpu: no CUDA device (torch.cuda.is_available() is False); run "
           "it on a GPU machine, or pass --dry-run-cpu to check the control flow on the CPU")
DRY_RUN_NOTE = "CPU dry run: no GPU numbers"

GPU_TESTS = {"full": ("tests/ops/test_scan_triton.py", "tests/ops/test_scan_nonfinite.py"),
             "quick": ("tests/ops/test_scan_triton.py",)}
"""The test files whose cases run on CUDA when it is there (relative to the checkout)."""
DRY_RUN_TESTS = ("tests/ops/test_scan_triton.py::test_forward_matches_reference[True-37-2]",
                 "tests/ops/test_scan_triton.py::test_gradients_match_reference[37-2-False-dtype11]",
                 "tests/ops/test_scan_triton.py::test_decoding_is_bitwise_the_full_pass[2]")
"""A few Triton kernels under the interpreter at tiny sizes (about 10 s on a CPU)."""

SCAN = {"full": {"lengths": (1024, 2048, 4096, 8192, 16384, 32768, 65536)},
        "quick": {"lengths": (1024, 4096, 16384), "repeats": 5},
        "dry-run": {"lengths": (64, 128)}}
SCAN_METHODS = "scan,scan-kernel,scan-torch,sdpa-causal"
SCAN_SHAPE = {"batch": 8, "dim": 1024, "dtype": "bfloat16"}
COPY_TARGET = 0.6
COPY_TARGET_FROM_L = 4096
"""Target: the scan's forward reaches >= 60% of the copy bandwidth for L >= 4K."""

# --quick times two models at two lengths: on an H100 (2026-11-26) each cell took 20-30 s
# (a child process that starts CUDA and compiles its kernels), so its first run's nine
# cells did not fit the box and none came back.
SPEED_MECHANISMS = {"full": "weird-a,weird-b,softmax", "quick": "weird-a,softmax",
                    "dry-run": "weird-a,weird-b,softmax"}
SPEED = {"full": ["--lengths", "1024", "2048", "4096", "8192", "16384",
                  "--max-step-seconds", "10"],
         "quick": ["--lengths", "1024", "16384", "--steps", "2", "--max-step-seconds", "5"],
         "dry-run": ["--lengths", "64", "--dim", "16", "--depth", "1", "--d-ff", "32",
                     "--heads", "2", "--batch", "2", "--steps", "1", "--warmup", "0"]}

DECODE_BATCHES = (1, 16)
DECODE = {"full": ["--contexts", "16384"],
          "quick": ["--contexts", "16384", "--new-tokens", "16"],
          "dry-run": ["--quick", "--contexts", "256", "--new-tokens", "8", "--threads", "1",
                      "--models", "weirdnet-a-small-cpu,gpt2-small-cpu"]}

SUITE = {"full": ["--budget", "gpu"],
         "quick": ["--budget", "gpu", "--mechanisms", "weird-a,weird-b,dba,softmax"],
         "dry-run": ["--budget", "smoke", "--mechanisms", "weird-a,softmax"]}


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="folder for report.md, the records and every benchmark's output")
    parser.add_argument("--quick", action="store_true",
                        help="every step smaller, time boxes adding up to 7 minutes")
    parser.add_argument("--dry-run-cpu", action="store_true",
                        help="no GPU: the same steps on the CPU at tiny sizes (control flow "
                             "only; the report says so)")
    parser.add_argument("--steps", type=_steps, default=list(STEPS), metavar="S1,S2",
                        help=f"run only these steps, in the usual order (default: "
                             f"{','.join(STEPS)})")
    parser.add_argument("--time-box", type=_time_box, action="append", default=[],
                        metavar="STEP=SECONDS", help="a step's wall-clock limit (repeatable; "
                        "defaults above)")
    parser.add_argument("--tests", nargs="+", default=None, metavar="TEST",
                        help="pytest paths or node ids for the correctness step (default: "
                             "the CUDA-parametrised test files of this checkout)")
    parser.add_argument("--force", action="store_true",
                        help="let a --quick or --dry-run-cpu run write into a folder that "
                             "holds a full run's report")


# --- one run, its steps ---------------------------------------------------------------

@dataclass
class Plan:
    """What one run does: mode ("full", "quick" or "dry-run"), device, time boxes."""

    out: Path
    mode: str
    device: str
    steps: list[str]
    boxes: dict[str, float]
    tests: list[str] | None = None
    force: bool = False
    command: list[str] = field(default_factory=list)

    @property
    def dry(self) -> bool:
        return self.mode == "dry-run"

    def bench(self, *args: str) -> list[str]:
        """The command line of ``weirdnet bench ARGS`` in a fresh interpreter."""
        return [sys.executable, "-m", "weirdnet", "bench", *args]


class StepTimeout(Exception):
    """The step's time box ran out (its child has been stopped)."""


class Step:
    """One step being run: its deadline, the children it started, its record's data."""

    def __init__(self, plan: Plan, name: str):
        self.plan, self.name = plan, name
        self.box = plan.boxes[name]
        self.deadline = time.monotonic() + self.box
        self.commands: list[str] = []
        self.logs: list[str] = []
        self.data: dict = {}

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def child(self, command: list[str], what: str, env: dict[str, str] | None = None):
        """Run ``command`` (its output in logs/STEP-WHAT.log) within the time left; the
        completed process.  Raises :class:`StepTimeout` when the time box runs out."""
        from weirdnet.lab.harness import children

        self.commands.append(shlex.join(command))
        log_path = self.plan.out / "logs" / f"{self.name}-{what}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.logs.append(str(log_path.relative_to(self.plan.out)))
        left = self.remaining()
        if left <= 0:
            raise StepTimeout(f"no time left in the {self.box:g} s time box for {what}")
        with open(log_path, "w", encoding="utf-8") as log:
            try:
                return children.run(command, timeout_s=left, env=env, log=log,
                                    what=f"the {self.name} step's {what}")
            except children.ChildTimeout:
                raise StepTimeout(f"{what} was still running at the end of the "
                                  f"{self.box:g} s time box (stopped)") from None

    def job(self, job: str, spec: dict, env: dict[str, str] | None = None) -> dict:
        """Run ``job`` of :data:`JOBS` in a child (:meth:`child`); what it returned."""
        result_path = self.plan.out / "logs" / f"{self.name}-{job}.result.json"
        result_path.unlink(missing_ok=True)
        done = self.child([sys.executable, "-m", "weirdnet.lab.gpu", job,
                           json.dumps({**spec, "result": str(result_path)})], job, env)
        if done.returncode != 0 or not result_path.exists():
            raise RuntimeError(f"the {job} job exited with {done.returncode} (see "
                               f"{self.logs[-1]})")
        return json.loads(result_path.read_text(encoding="utf-8"))


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def run_step(plan: Plan, index: int, name: str) -> dict:
    """Run step ``name`` within its time box and write its record; the record."""
    from weirdnet._atomic import write_atomic

    print(f"weirdnet bench gpu: step {index} {name} (time box {plan.boxes[name]:g} s)",
          file=sys.stderr, flush=True)
    step, started = Step(plan, name), time.perf_counter()
    record = {"step": name, "index": index, "title": TITLES[name], "mode": plan.mode,
              "device": plan.device, "started": _now(), "time_box_s": plan.boxes[name]}
    try:
        status, note = STEP_FUNCTIONS[name](step)
    except StepTimeout as timeout:
        status, note = "timed_out", str(timeout)
    except Exception as error:  # noqa: BLE001 - one step's failure must not stop the run
        status, note = "error", f"{type(error).__name__}: {error}"
    record.update({"status": status, "note": note,
                   "seconds": round(time.perf_counter() - started, 2),
                   "commands": step.commands, "logs": step.logs, "data": step.data})
    with output.write_whole():
        write_atomic(plan.out / "records" / f"{index}-{name}.json",
                     json.dumps(record, indent=2) + "\n")
    print(f"weirdnet bench gpu: step {index} {name}: {status} in {record['seconds']:.0f} s"
          + (f" ({note})" if note and status != "ok" and status != "passed" else ""),
          file=sys.stderr, flush=True)
    return record


# --- the steps: each returns (status, note) and fills step.data -----------------------

def _step_env(step: Step) -> tuple[str, str]:
    step.data.update(step.job("env", {"device": step.plan.device}))
    return "ok", ""


def _repository() -> Path | None:
    """The checkout this weirdnet runs from (it holds tests/), else None."""
    import weirdnet

    for root in (Path(weirdnet.__file__).resolve().parents[2], Path.cwd()):
        if (root / "tests" / "ops" / "test_scan_triton.py").exists():
            return root
    return None


def _code_version() -> dict:
    """The checkout's commit and dirty flag, read by this process: the env step's child,
    which reads them too, can time out on a fresh machine (CUDA starting up)."""
    from weirdnet.lab.harness.machine import git_commit

    root = _repository()
    return git_commit(root) if root is not None else {"commit": None, "dirty": None}


def _junit_counts(path: Path) -> dict:
    """Counts and failed test ids from a pytest JUnit XML file."""
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites)
              for k in ("tests", "failures", "errors", "skipped")}
    # JUnit's classname is the module's dotted path from pytest's rootdir: as a path
    failed = [f"{case.get('classname', '').replace('.', '/')}::{case.get('name')}"
              for case in root.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts[
        "skipped"]
    return {**counts, "failed_tests": failed[:50]}


def _test_env(plan: Plan) -> dict[str, str]:
    env = dict(os.environ)
    if plan.dry:
        env["TRITON_INTERPRET"] = "1"
    return env


def parallel_test_workers(dry: bool) -> int:
    """pytest-xdist workers for the GPU tests: each Triton specialization compiles on one
    CPU core on first use, and compiling is most of a fresh machine's test time; several
    processes compile side by side (they share Triton's disk cache).  1 (no xdist) in a
    dry run, without pytest-xdist, or on fewer than 4 cores."""
    import importlib.util

    cores = os.cpu_count() or 1
    if dry or cores < 4 or importlib.util.find_spec("xdist") is None:
        return 1
    return min(8, cores // 2)


def _step_correctness(step: Step) -> tuple[str, str]:
    plan = step.plan
    if plan.tests is not None:
        tests = list(plan.tests)
    else:
        root = _repository()
        if root is None:
            return "error", ("the GPU tests were not found: run it from a checkout of the "
                             "repository (benchmarks/gpu.sh does)")
        names = DRY_RUN_TESTS if plan.dry else GPU_TESTS[plan.mode]
        tests = [str(root / name) for name in names]
    junit = plan.out / "logs" / "correctness-junit.xml"
    junit.unlink(missing_ok=True)
    workers = parallel_test_workers(plan.dry)
    parallel = ["-n", str(workers)] if workers > 1 else []
    done = step.child([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "-o", "addopts=-ra", *parallel, f"--junitxml={junit}", *tests],
                      "pytest", _test_env(plan))
    counts = _junit_counts(junit) if junit.exists() else {}
    step.data["tests"] = {"paths": tests, "exit_status": done.returncode, "workers": workers,
                          **counts}
    passed = done.returncode == 0 and counts.get("passed", 0) > 0
    if done.returncode == 0 and counts.get("passed", 0) == 0 and plan.dry:
        return "skipped", "every test was skipped (is triton installed?)"
    check = step.job("selfcheck", {"device": plan.device}, _test_env(plan))
    step.data["selfcheck"] = check
    if check.get("skipped"):
        passed = passed and plan.dry
    elif check.get("error") is not None:
        passed = False
    note = (f"{counts.get('passed', 0)} passed, {counts.get('failures', 0)} failed, "
            f"{counts.get('errors', 0)} errors, {counts.get('skipped', 0)} skipped; "
            f"self-check: {_selfcheck_text(check)}") if counts else \
        f"pytest exited with {done.returncode} and wrote no results"
    return ("passed" if passed else "failed"), note


def _selfcheck_text(check: dict) -> str:
    if check.get("skipped"):
        return f"skipped ({check['skipped']})"
    return "passed" if check.get("error") is None else f"FAILED ({check['error']})"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _device_type(plan: Plan) -> str:
    return "cuda" if plan.device.startswith("cuda") else "cpu"


def _step_scan(step: Step) -> tuple[str, str]:
    plan, spec = step.plan, SCAN[step.plan.mode]
    args = ["scan", "--device", plan.device, "--out", str(plan.out / "scan"),
            "--methods", SCAN_METHODS, "--lengths", *map(str, spec["lengths"])]
    force = ["--force"] if plan.force else []
    if plan.dry:  # --quick's tiny shapes, float32 (what the CPU kernels are for)
        args += ["--quick", *force, "--no-memory"]
    else:
        args += ["--batch", str(SCAN_SHAPE["batch"]), "--dim", str(SCAN_SHAPE["dim"]),
                 "--dtype", SCAN_SHAPE["dtype"]]
        if plan.mode == "quick":
            args += ["--quick", *force, "--repeats", str(spec["repeats"])]
    done = step.child(plan.bench(*args), "scan")
    doc = _read_json(plan.out / "scan" / f"scan_{_device_type(plan)}.json")
    if done.returncode != 0 or doc is None:
        return "failed", f"weirdnet bench scan exited with {done.returncode}"
    config = doc["config"]
    step.data["scan"] = {"file": f"scan/scan_{_device_type(plan)}.json",
                         "scan_backend": doc["machine"].get("scan_backend"),
                         "config": {k: config[k] for k in ("batch", "dim", "dtype", "lengths")},
                         "results": [{k: r.get(k) for k in ("method", "L", "fwd_ms",
                                                           "fwdbwd_ms", "mem_mib", "error")}
                                     for r in doc["results"]],
                         "targets": doc.get("targets", [])}
    copy = step.job("copy", {"device": plan.device, "dtype": config["dtype"],
                             "batch": config["batch"], "dim": config["dim"],
                             "lengths": config["lengths"]})
    step.data["copy"] = copy["rows"]
    step.data["fractions"] = copy_fractions(step.data["scan"]["results"], copy["rows"])
    errors = [r for r in step.data["scan"]["results"] if r["error"]]
    return ("ok", "") if not errors else ("failed", f"{len(errors)} row(s) failed")


def copy_fractions(rows: list[dict], copies: list[dict]) -> list[dict]:
    """Per L: the scan forward's achieved bandwidth over the bytes it reads and writes
    (a, v and the output: 3 B·L·D elements), as a fraction of a device-to-device copy of
    the same bytes: copy time / scan forward time."""
    fwd = {r["L"]: r["fwd_ms"] for r in rows if r["method"] == "scan" and r["fwd_ms"]}
    out = []
    for c in copies:
        scan_ms = fwd.get(c["L"])
        out.append({"L": c["L"], "copy_ms": c["ms"], "scan_fwd_ms": scan_ms,
                    "fraction": c["ms"] / scan_ms if scan_ms else None,
                    "scan_gb_per_s": c["bytes"] / scan_ms / 1e6 if scan_ms else None,
                    "copy_gb_per_s": c["gb_per_s"]})
    return out


def _step_speed(step: Step) -> tuple[str, str]:
    """``bench speed``; when the time box stops it, the cells it measured before (its
    partial report, ``speed_<device>.partial.json``) are kept in the record."""
    plan = step.plan
    name = f"speed_{_device_type(plan)}"
    try:
        done = step.child(plan.bench("speed", "--device", plan.device, "--mechanisms",
                                     SPEED_MECHANISMS[plan.mode], "--out",
                                     str(plan.out / "speed"), *SPEED[plan.mode]), "speed")
    except StepTimeout as timeout:
        doc = _read_json(plan.out / "speed" / f"{name}.partial.json")
        if doc is None:
            raise
        step.data.update({"file": f"speed/{name}.partial.json", "partial": True,
                          "settings": doc["settings"], "rows": doc["rows"]})
        measured = sum(r.get("status") == "ok" for r in doc["rows"])
        return "timed_out", (f"{timeout}; the {measured} cell(s) measured before it are "
                             "kept (a partial report)")
    doc = _read_json(plan.out / "speed" / f"{name}.json")
    if done.returncode != 0 or doc is None:
        return "failed", f"weirdnet bench speed exited with {done.returncode}"
    step.data.update({"file": f"speed/{name}.json",
                      "settings": doc["settings"], "rows": doc["rows"]})
    bad = [r for r in doc["rows"] if r.get("status") != "ok"]
    return "ok", (f"{len(bad)} cell(s) not ok (skipped or failed)" if bad else "")


def _step_decode(step: Step) -> tuple[str, str]:
    plan, failed = step.plan, []
    step.data["runs"] = []
    for batch in DECODE_BATCHES:
        folder = plan.out / f"decode-b{batch}"
        force = ["--force"] if plan.force and plan.dry else []
        done = step.child(plan.bench("decode", "--device", plan.device, "--batch", str(batch),
                                     "--out", str(folder), *DECODE[plan.mode], *force),
                          f"decode-b{batch}")
        doc = _read_json(folder / f"decode_{_device_type(plan)}.json")
        if done.returncode != 0 or doc is None:
            failed.append(f"batch {batch}: weirdnet bench decode exited with "
                          f"{done.returncode}")
            continue
        step.data["runs"].append({"batch": batch, "file": f"decode-b{batch}/decode_"
                                  f"{_device_type(plan)}.json", "config": doc["config"],
                                  "results": doc["results"], "targets": doc["targets"]})
    return ("failed", "; ".join(failed)) if failed else ("ok", "")


def _step_suite(step: Step) -> tuple[str, str]:
    plan, args = step.plan, SUITE[step.plan.mode]
    budget = args[args.index("--budget") + 1]
    try:
        done = step.child(plan.bench("suite", *args, "--tables", "main", "--tasks", "listops",
                                     "--seeds", "0", "--no-plot", "--out",
                                     str(plan.out / "suite"), "--work",
                                     str(plan.out / "suite-runs")), "suite")
    finally:  # the cells that finished, even when the time box ran out
        cells = _suite_cells(plan.out / "suite" / f"suite-{budget}" / "cells")
        cells += _unfinished_cells(step, plan.out / "suite-runs" / f"suite-{budget}",
                                   {c["run"] for c in cells})
        step.data.update({"budget": budget, "cells": cells,
                          "estimate": budget_estimate(budget, cells)})
    if done.returncode != 0:
        return "failed", f"weirdnet bench suite exited with {done.returncode}"
    return "ok", ""


def _suite_cells(folder: Path) -> list[dict]:
    """The pilot's cells from their records: time, speed, memory, test accuracy."""
    cells = []
    for path in sorted(folder.glob("*.json")):
        record = _read_json(path) or {}
        cells.append({k: record.get(k) for k in ("variant", "seed", "status", "wall_s",
                                                 "steps", "steps_per_s", "memory_mib",
                                                 "resumed")}
                     | {"test_accuracy": _test_accuracy(record), "run": path.stem})
    return cells


def _unfinished_cells(step: Step, runs: Path, recorded: set[str]) -> list[dict]:
    """Copy each pilot cell's training log (``runs/CELL/log.jsonl``) to
    logs/suite-CELL.jsonl, so the report shows where a cell's time went, and describe the
    cells without a record: the last step logged, and when, from their logs."""
    cells = []
    for log in sorted(runs.glob("*/log.jsonl")):
        run = log.parent.name
        copy = step.plan.out / "logs" / f"suite-{run}.jsonl"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(log.read_bytes())
        step.logs.append(str(copy.relative_to(step.plan.out)))
        if run not in recorded:
            cells.append(_unfinished_cell(run, log))
    return cells


def _unfinished_cell(run: str, log: Path) -> dict:
    """A cell that has no record: the last event of its latest process, and its time
    since that process started."""
    events = []
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by the stop
            continue
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    events = events[starts[-1]:] if starts else events
    last = events[-1] if events else {}
    wall = (last["time"] - events[0]["time"]) if len(events) > 1 else None
    variant = run.split("--")[1] if run.count("--") >= 2 else run
    return {"variant": variant, "seed": None, "run": run,
            "status": f"unfinished (last event: {last.get('event', 'none')})",
            "wall_s": wall, "steps": last.get("step"), "steps_per_s": None,
            "memory_mib": None, "resumed": bool(starts and events[0].get("resumed_from")),
            "test_accuracy": None}


def _test_accuracy(record: dict) -> float | None:
    test = (record.get("results") or {}).get("test") or {}
    value = test.get("accuracy", test.get("acc"))
    return value if isinstance(value, int | float) else None


def budget_estimate(budget: str, cells: list[dict]) -> dict:
    """The budget's cell count and its whole time if every cell took the pilot's mean
    (ListOps) wall time: an extrapolation, said as one. A resumed cell's wall time covers
    only its last process, so resumed cells are left out of the mean."""
    from weirdnet.lab.suite.budgets import get_budget
    from weirdnet.lab.suite.plan import TABLES_BY_NAME, plan_cells

    try:
        planned = plan_cells(get_budget(budget), list(TABLES_BY_NAME))
    except (ValueError, FileNotFoundError) as error:
        return {"error": str(error)}
    walls = [c["wall_s"] for c in cells
             if c.get("status") == "done" and c.get("wall_s") and not c.get("resumed")]
    mean = sum(walls) / len(walls) if walls else None
    return {"cells_in_budget": len(planned), "pilot_cells_done": len(walls),
            "mean_cell_wall_s": mean,
            "budget_minutes_if_every_cell_cost_this": (len(planned) * mean / 60.0
                                                        if mean else None)}


STEP_FUNCTIONS: dict[str, Callable[[Step], tuple[str, str]]] = {
    "env": _step_env, "correctness": _step_correctness, "scan": _step_scan,
    "speed": _step_speed, "decode": _step_decode, "suite": _step_suite}


# --- the command ----------------------------------------------------------------------

def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Check for CUDA, run the steps, write the report; the exit status."""
    import torch

    if not args.dry_run_cpu and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr, flush=True)
        return 2
    mode = "dry-run" if args.dry_run_cpu else "quick" if args.quick else "full"
    boxes = {**TIME_BOXES_S[mode], **dict(args.time_box)}
    plan = Plan(out=Path(args.out).expanduser(), mode=mode,
                device="cpu" if args.dry_run_cpu else "cuda",
                steps=[s for s in STEPS if s in args.steps], boxes=boxes,
                tests=args.tests, force=args.force, command=["weirdnet", *argv])

    def refuse() -> None:
        if mode != "full":
            previous = _read_json(plan.out / "gpu.json") or {}
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
    from weirdnet._atomic import write_atomic

    records = []
    session.kept = lambda: (f"the records of {len(records)} finished step(s) are in "
                            f"{plan.out / 'records'}; no report written")
    for index, name in enumerate(STEPS, start=1):
        if name in plan.steps:
            records.append(run_step(plan, index, name))
    records = [_read_json(plan.out / "records" / f"{r['index']}-{r['step']}.json") or r
               for r in records]  # the report is built from the records as written
    correctness = next((r for r in records if r["step"] == "correctness"), None)
    failed = correctness is not None and correctness["status"] not in ("passed", "skipped")
    status = 1 if failed else 0
    summary = {"benchmark": "gpu", "mode": plan.mode, "quick": plan.mode != "full",
               "device": plan.device, "command": shlex.join(plan.command), "date": _now(),
               **_code_version(), "steps": {r["step"]: r["status"] for r in records},
               "exit_status": status}
    with output.write_whole():
        write_atomic(plan.out / "gpu.json", json.dumps(summary, indent=2) + "\n")
        path = write_atomic(plan.out / "report.md", render_report(summary, records))
    print(f"weirdnet bench gpu: wrote {path}" + ("; a correctness check failed" if failed
                                                else ""), file=sys.stderr, flush=True)
    return status


# --- the report -----------------------------------------------------------------------

def _f(value, digits: int = 2, suffix: str = "") -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}{suffix}"


def render_report(summary: dict, records: list[dict]) -> str:
    """report.md from the run's summary and its step records."""
    lines = ["# weirdnet bench gpu", ""]
    if summary["mode"] == "dry-run":
        lines += [f"**{DRY_RUN_NOTE}.** Every step ran on the CPU at tiny sizes to check "
                  "the control flow; no number here says anything about a GPU.", ""]
    dirty = " (with uncommitted changes)" if summary.get("dirty") else ""
    lines += [f"- date: {summary['date']}; mode: {summary['mode']}; device: "
              f"{summary['device']}; command: `{summary['command']}`",
              f"- commit: {summary.get('commit') or 'unknown'}{dirty}",
              f"- exit status: {summary['exit_status']} ("
              f"{'a' if summary['exit_status'] else 'no'} correctness check failed)", "",
              "| # | step | status | seconds | time box s | note |", "|---|---|---|---|---|---|"]
    for r in records:
        note = (r.get("note") or "").replace("|", "/").replace("\n", " ")[:200]
        lines.append(f"| {r['index']} | {r['step']} | {r['status']} | {r['seconds']:.0f} | "
                     f"{r['time_box_s']:g} | {note} |")
    for r in records:
        lines += ["", f"## {r['index']}. {r['title']}", "",
                  f"Status: **{r['status']}** in {r['seconds']:.0f} s (time box "
                  f"{r['time_box_s']:g} s)." + (f" {r['note']}" if r.get("note") else "")]
        lines += _SECTIONS[r["step"]](r.get("data") or {})
        if r.get("logs"):
            lines += ["", "Logs: " + ", ".join(f"`{p}`" for p in r["logs"])]
    return "\n".join(lines) + "\n"


def _env_section(data: dict) -> list[str]:
    keys = ("device_name", "capability", "memory_gib", "driver", "cuda", "torch", "triton",
            "python", "weirdnet", "commit", "dirty", "platform")
    return ["", "| what | value |", "|---|---|"] + [
        f"| {k} | {data.get(k) if data.get(k) is not None else '–'} |" for k in keys if k in data]


def _correctness_section(data: dict) -> list[str]:
    tests = data.get("tests")
    if not tests:
        return []
    lines = ["", f"- pytest: {tests.get('passed', '?')} passed, {tests.get('failures', '?')} "
                 f"failed, {tests.get('errors', '?')} errors, {tests.get('skipped', '?')} "
                 f"skipped (exit status {tests['exit_status']}; "
                 f"{tests.get('workers', 1)} pytest process(es))",
             "- tests: " + ", ".join(f"`{_short(p)}`" for p in tests["paths"][:10])]
    lines += [f"  - FAILED `{name}`" for name in tests.get("failed_tests", [])]
    if "selfcheck" in data:
        lines.append(f"- Triton self-check on {data['selfcheck'].get('device')}: "
                     f"{_selfcheck_text(data['selfcheck'])}")
    return lines


def _short(test: str) -> str:
    """A test path or node id from its ``tests/`` folder on."""
    path, sep, rest = test.partition("::")
    parts = Path(path).parts
    where = len(parts) - 1 - parts[::-1].index("tests") if "tests" in parts else len(parts) - 1
    return str(Path(*parts[where:])) + sep + rest


def _scan_section(data: dict) -> list[str]:
    scan = data.get("scan")
    if not scan:
        return []
    c = scan["config"]
    rows = {(r["method"], r["L"]): r for r in scan["results"]}
    methods = list(dict.fromkeys(r["method"] for r in scan["results"]))
    lines = ["", f"B={c['batch']}, D={c['dim']}, {c['dtype']}; scan backend "
                 f"{scan.get('scan_backend') or '?'}; median ms (fwd / fwd+bwd); full "
                 f"numbers: `{scan['file']}`", "",
             "| L | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for L in c["lengths"]:
        cells = []
        for m in methods:
            r = rows.get((m, L))
            cells.append("–" if r is None else r["error"][:40] if r["error"] else
                         f"{_f(r['fwd_ms'])} / {_f(r['fwdbwd_ms'])}")
        lines.append(f"| {L} | " + " | ".join(cells) + " |")
    if data.get("fractions"):
        lines += ["", "Forward vs a device-to-device copy of the same bytes (a, v read, the "
                      "output written):", "",
                  "| L | copy ms | copy GB/s | scan fwd ms | scan GB/s | fraction |",
                  "|---|---|---|---|---|---|"]
        for f in data["fractions"]:
            lines.append(f"| {f['L']} | {_f(f['copy_ms'], 3)} | {_f(f['copy_gb_per_s'], 1)} | "
                         f"{_f(f['scan_fwd_ms'], 3)} | {_f(f['scan_gb_per_s'], 1)} | "
                         f"{_f(f['fraction'])} |")
    targets = [f"- {t['text']}: {_f(t['value'])} — {'PASS' if t['passed'] else 'FAIL'}"
               for t in scan.get("targets", [])]
    targets += [f"- scan forward >= {COPY_TARGET:.0%} of the copy bandwidth at L={f['L']}: "
                f"{_f(f['fraction'])} — {'PASS' if f['fraction'] >= COPY_TARGET else 'FAIL'}"
                for f in data.get("fractions", [])
                if f["L"] >= COPY_TARGET_FROM_L and f["fraction"] is not None]
    return lines + ["", "Targets:"] + (targets or ["- none measured at these lengths"])


def _speed_section(data: dict) -> list[str]:
    rows = data.get("rows")
    if not rows:
        return []
    s = data["settings"]
    lines = ["", f"D={s['dim']}, depth {s['depth']}, d_ff {s['d_ff']}, batch {s['batch']}; "
                 f"full numbers: `{data['file']}`", "",
             "| mechanism | L | steps/s | peak memory MiB | status |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mechanism']} | {r['length']} | {_f(r.get('steps_per_s'))} | "
                     f"{_f(r.get('memory_mib'), 1)} | {r.get('status')} |")
    return lines


def _decode_section(data: dict) -> list[str]:
    lines = []
    for run_ in data.get("runs", []):
        lines += ["", f"Batch {run_['batch']} (`{run_['file']}`):", "",
                  "| context | model | tokens/s | step ms |", "|---|---|---|---|"]
        lines += [f"| {r['context']} | {r['model']} | {_f(r['tokens_per_s'], 1)} | "
                  f"{_f(r['step_ms_median'], 3)} |" for r in run_["results"]]
    return lines


def _suite_section(data: dict) -> list[str]:
    if not data.get("cells"):
        return []
    lines = ["", f"Budget `{data['budget']}`, ListOps, seed 0:", "",
             "| mechanism | status | wall s | steps | steps/s | peak MiB | test accuracy |",
             "|---|---|---|---|---|---|---|"]
    for c in data["cells"]:
        status = f"{c['status']} (resumed)" if c.get("resumed") else c["status"]
        lines.append(f"| {c['variant']} | {status} | {_f(c['wall_s'], 1)} | "
                     f"{c['steps'] if c['steps'] is not None else '–'} | "
                     f"{_f(c['steps_per_s'])} | {_f(c['memory_mib'], 1)} | "
                     f"{_f(c['test_accuracy'], 3)} |")
    e = data.get("estimate") or {}
    if e.get("mean_cell_wall_s"):
        lines += ["", f"The `{data['budget']}` budget plans {e['cells_in_budget']} cells; at "
                      f"the pilot's mean of {e['mean_cell_wall_s']:.1f} s per cell (ListOps "
                      f"only: other tasks differ) it would take about "
                      f"{e['budget_minutes_if_every_cell_cost_this']:.0f} minutes "
                      "(an extrapolation, not a measurement)."]
    if any(c["status"].startswith("unfinished") for c in data["cells"]):
        lines += ["", "An unfinished cell had no record when the step ended: its steps and "
                      "wall time are those of its last logged event, counted from its "
                      "process's start (its log: `logs/suite-CELL.jsonl`)."]
    if any(c.get("resumed") for c in data["cells"]):
        lines += ["", "A resumed cell continued from a checkpoint an earlier process left "
                      "in this folder: its wall time and steps/s cover only its last "
                      "process, so it is left out of the extrapolation."]
    return lines


_SECTIONS: dict[str, Callable[[dict], list[str]]] = {
    "env": _env_section, "correctness": _correctness_section, "scan": _scan_section,
    "speed": _speed_section, "decode": _decode_section, "suite": _suite_section}


# --- the jobs (run as ``python -m weirdnet.lab.gpu JOB SPEC``) -----------------------

def job_env(spec: dict) -> dict:
    """Device, driver, CUDA, torch, triton, weirdnet versions, the git commit."""
    import subprocess

    import torch

    from weirdnet.lab.harness.machine import machine_info

    device = torch.device(spec["device"])
    info = machine_info(device, sys.argv, "not tuned (environment record)")
    info.update({"cuda": torch.version.cuda, "triton": None, "driver": None})
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update({"device_name": props.name, "capability": f"{props.major}.{props.minor}",
                     "memory_gib": round(props.total_memory / 2**30, 1),
                     "multiprocessors": props.multi_processor_count})
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    else:
        from weirdnet.lab.harness.machine import cpu_model

        info["device_name"] = f"CPU: {cpu_model()}"
    return info  # machine_info holds the commit


def job_selfcheck(spec: dict) -> dict:
    """The Triton scan backend's self-check on the device (None: agreed with PyTorch)."""
    import torch

    device = torch.device(spec["device"])
    try:
        from weirdnet.ops.weird_scan import dispatch

        backend = dispatch.BACKENDS["triton"]
        reason = backend.unavailable(device)
    except Exception as error:  # noqa: BLE001 - triton missing or broken: said, not raised
        reason = f"{type(error).__name__}: {error}"
    if reason is not None:
        if device.type == "cuda":
            return {"device": str(device), "error": f"the Triton backend is unavailable: "
                                                   f"{reason}"}
        return {"device": str(device), "skipped": reason}
    return {"device": str(device), "error": dispatch.selfcheck_error(backend, device)}


def job_copy(spec: dict) -> dict:
    """Median ms of ``dst.copy_(src)`` over 1.5·B·L·D elements (the 3·B·L·D elements the
    scan forward reads and writes) for each L."""
    import torch

    from weirdnet.lab.harness.timing import median_ms, synchronize, time_step

    device, dtype = torch.device(spec["device"]), getattr(torch, spec["dtype"])
    def copy_ms(n: int) -> float:
        src = torch.randn(n, device=device).to(dtype)
        dst = torch.empty_like(src)
        times = time_step(lambda: dst.copy_(src), device, repeats=spec.get("repeats", 20),
                          warmup=3)
        synchronize(device)
        return median_ms(times)

    rows = []
    for L in spec["lengths"]:
        n = 3 * spec["batch"] * L * spec["dim"] // 2
        ms = copy_ms(n)
        moved = 2 * n * torch.empty((), dtype=dtype).element_size()
        rows.append({"L": L, "elements": n, "bytes": moved, "ms": ms,
                     "gb_per_s": moved / ms / 1e6})
    return {"rows": rows}


JOBS = {"env": job_env, "selfcheck": job_selfcheck, "copy": job_copy}


def _job_main(argv: list[str]) -> int:
    """``python -m weirdnet.lab.gpu JOB SPEC``: run the job, write its JSON result to
    the spec's ``result`` path."""
    from weirdnet._atomic import write_atomic
    from weirdnet.lab.harness.children import watch_parent

    if len(argv) != 2 or argv[0] not in JOBS:
        print(f"usage: python -m weirdnet.lab.gpu {{{','.join(JOBS)}}} SPEC", file=sys.stderr)
        return 2
    watch_parent()
    spec = json.loads(argv[1])
    result = JOBS[argv[0]](spec)
    write_atomic(spec["result"], json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_job_main(sys.argv[1:]))
