"""What one ``weirdnet bench gpu`` run does (:class:`Plan`), each step's settings per mode,
and the :class:`Step` that runs a step's children within its time box."""

from __future__ import annotations

import datetime
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

STEPS = ("env", "correctness", "scan", "kernels", "speed", "models", "decode",
         "decode-graph", "suite", "scan-timing")
QUICK_STEPS = ("env", "scan-timing")
"""--quick's steps unless --steps names others: issue 73's prepared run in 8 minutes
(issue 62's were env, correctness, kernels, models, decode-graph: --steps names them)."""
TITLES = {"env": "Environment", "correctness": "Correctness (GPU tests)",
          "scan": "Scan timing vs SDPA and copy bandwidth",
          "speed": "Model-level training steps", "decode": "Decoding at 16K context",
          "suite": "Pilot of the gpu suite budget (ListOps)",
          "kernels": "Scan backends vs SDPA causal and a copy (issue 62)",
          "models": "Model level, bf16: Weird-Net A vs Transformer++ vs fla Gated DeltaNet",
          "decode-graph": "Decoding at batch 1, 16K context, with and without a CUDA graph",
          "scan-timing": "Issue 73: new vs old scan kernel vs SDPA causal (do_bench, L2 "
                         "flushed), passes, path-A rate"}
TIME_BOXES_S = {
    "full": {"env": 60, "scan-timing": 420, "correctness": 300, "scan": 300, "kernels": 240,
             "speed": 300, "models": 300, "decode": 180, "decode-graph": 120, "suite": 360},
    "quick": {"env": 45, "scan-timing": 420, "correctness": 90, "scan": 60, "kernels": 150,
              "speed": 90, "models": 120, "decode": 35, "decode-graph": 75, "suite": 60},
    "dry-run": {"env": 60, "scan-timing": 300, "correctness": 120, "scan": 120,
                "kernels": 120, "speed": 120, "models": 120, "decode": 120,
                "decode-graph": 120, "suite": 180},
}
"""Each step's wall-clock limit in seconds, per mode (--time-box STEP=S overrides)."""

NO_CUDA = ("weirdnet bench gpu: no CUDA device (torch.cuda.is_available() is False); run "
           "it on a GPU machine, or pass --dry-run-cpu to check the control flow on the CPU")
DRY_RUN_NOTE = "CPU dry run: no GPU numbers"

GPU_TESTS = {"full": ("tests/ops/test_scan_triton.py", "tests/ops/test_scan_nonfinite.py"),
             "quick": ("tests/ops/test_scan_triton.py",)}
"""The test files whose cases run on CUDA when it is there (relative to the checkout)."""
DRY_RUN_TESTS = tuple(
    f"tests/ops/test_scan_triton.py::{test}" for test in (
        "test_forward_matches_reference[triton-True-37-2]",
        "test_gradients_match_reference[triton-37-2-False-dtype11]",
        "test_decoding_is_bitwise_the_full_pass[triton-2]",
        # the new kernel (its backward is "triton"'s)
        "test_forward_matches_reference[triton-e2-True-37-2]",
        "test_decoding_is_bitwise_the_full_pass[triton-e2-2]"))
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

KERNELS = {"full": {"lengths": (1024, 16384, 65536), "repeats": 10},
           "quick": {"lengths": (1024, 16384, 65536), "repeats": 5},
           "dry-run": {"lengths": (64, 128), "repeats": 1, "batch": 1, "dim": 32,
                       "dtype": "float32"}}
MODELS = {"full": ["--lengths", "4096", "16384", "--steps", "3"],
          "quick": ["--lengths", "4096", "16384", "--steps", "2", "--warmup", "1"],
          "dry-run": ["--lengths", "64", "--dim", "16", "--depth", "1", "--d-ff", "32",
                      "--heads", "2", "--batch", "1", "--steps", "1", "--warmup", "0"]}
MODEL_MECHANISMS = ("weird-a", "transformerpp", "fla-gated-deltanet")
DECODE_GRAPH = {"full": ["--contexts", "16384", "--new-tokens", "64"],
                "quick": ["--contexts", "16384", "--new-tokens", "32"],
                "dry-run": ["--contexts", "256", "--new-tokens", "8", "--threads", "1"]}

SCAN_TIMING = {
    "full": {"batch": 8, "dim": 1024, "dtype": "bfloat16",
             "lengths": (1024, 4096, 16384, 65536), "pass_lengths": (1024, 16384),
             "copy_length": 16384},
    "quick": {"batch": 8, "dim": 1024, "dtype": "bfloat16",
              "lengths": (1024, 4096, 16384, 65536), "pass_lengths": (1024, 16384),
              "copy_length": 16384},
    "dry-run": {"batch": 1, "dim": 32, "dtype": "float32", "lengths": (64, 128),
                "pass_lengths": (64, 128), "copy_length": 128},
}
"""Issue 73's prepared run: shapes per mode (B = 8, D = 1024, bf16 on a GPU)."""
SCAN_TIMING_NEED_S = {"1024": 15, "4096": 15, "16384": 20, "65536": 45}
"""Seconds a race row needs at each L (three methods' compiles and do_bench at 64K):
with less left, the row and those after it are skipped with a record saying so."""
SCAN_TIMING_MARGIN_S = 25
"""Seconds of the time box kept for the child's start (CUDA, imports) and its exit."""

SUITE = {"full": ["--budget", "gpu"],
         "quick": ["--budget", "gpu", "--mechanisms", "weird-a,weird-b,dba,softmax"],
         "dry-run": ["--budget", "smoke", "--mechanisms", "weird-a,softmax"]}




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
    new_backend: str = ""
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
        from weirdnet_lab.harness import children

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
        done = self.child([sys.executable, "-m", "weirdnet_lab.gpu", job,
                           json.dumps({**spec, "result": str(result_path)})], job, env)
        if done.returncode != 0 or not result_path.exists():
            raise RuntimeError(f"the {job} job exited with {done.returncode} (see "
                               f"{self.logs[-1]})")
        return json.loads(result_path.read_text(encoding="utf-8"))


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")



def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def device_type(plan: Plan) -> str:
    return "cuda" if plan.device.startswith("cuda") else "cpu"
