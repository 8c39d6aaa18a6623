"""Run one suite cell in this (fresh) process and write its record.

``python -m weirdnet.experiments.child SPEC.json`` where the spec holds ``config`` (the
cell's training config), ``record`` (where the record goes), ``cell`` (task, variant,
seed, budget) and ``command`` (the suite's command line, for the record).

Measured here, beside the trainer's metrics:

- **speed**: training steps per second, the median over the trainer's log windows
  (``samples_per_s / batch_size``), so evaluation pauses do not count;
- **memory**: on CPU the peak resident set size above the resident size once data and
  model are built (glibc told to keep freed memory, so the peak is a true high-water mark:
  :mod:`weirdnet.bench.alloc`); on CUDA ``max_memory_allocated`` above the allocation
  at that point.  Both cover the training steps and the evaluations of the run.

A run directory with checkpoints is resumed (an interrupted cell); otherwise it is
started afresh (a partial directory without checkpoints is overwritten).
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from weirdnet.bench.alloc import reuse_freed_memory


def git_commit(where: Path) -> dict[str, Any]:
    """The checkout's commit and whether it has uncommitted changes (None outside git)."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                                 timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


def median_steps_per_s(log_file: Path, batch_size: int) -> float | None:
    """Median training steps/s over the ``train`` events of a run log."""
    rates = []
    with open(log_file, encoding="utf-8") as handle:
        for line in handle:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "train" and event.get("samples_per_s"):
                rates.append(event["samples_per_s"] / batch_size)
    return statistics.median(rates) if rates else None


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Train the cell of ``spec`` and return its record (see the module doc)."""
    allocator = reuse_freed_memory()
    import torch

    from weirdnet.bench.machine import machine_info
    from weirdnet.bench.memory import PeakMemory
    from weirdnet.train.checkpoint import list_checkpoints
    from weirdnet.train.config import TrainConfig
    from weirdnet.train.trainer import Trainer

    config = TrainConfig.from_dict(spec["config"])
    run_dir = Path(config.run.out_dir) / config.run.name
    resume = bool(list_checkpoints(run_dir))
    started = time.perf_counter()
    trainer = Trainer(config, resume=resume, overwrite=not resume, progress_bar=False)
    meter = PeakMemory(trainer.processes.device, since="data + model")
    meter.start()
    summary = trainer.fit()
    wall_s = time.perf_counter() - started
    memory_mib, memory_kind = meter.peak_mib()
    return {
        **spec["cell"], "status": "done", "results": summary["results"],
        "steps": summary["steps"], "best_step": summary["best_step"],
        "parameters": summary["parameters"],
        "steps_per_s": median_steps_per_s(run_dir / "log.jsonl", config.train.batch_size),
        "memory_mib": memory_mib, "memory_kind": memory_kind, "wall_s": wall_s,
        "resumed": resume, **git_commit(Path(__file__).parent),
        "machine": machine_info(trainer.processes.device, spec["command"], allocator),
        "torch_threads": torch.get_num_threads(),
        "config_hash": spec["config_hash"], "config": spec["config"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the cell of the spec file ``argv[0]``; the exit status (``128 + signal`` when
    stopped by SIGINT/SIGTERM: then no record is written and the cell stays unfinished;
    the trainer has saved what it could, so a rerun resumes it)."""
    from weirdnet._atomic import write_atomic
    from weirdnet._signals import STOP, Interrupted
    from weirdnet.bench.children import watch_parent

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m weirdnet.experiments.child SPEC.json", file=sys.stderr)
        return 2
    watch_parent()  # the suite killed outright: stop (and checkpoint) by ourselves
    installed = STOP.install()  # SIGINT/SIGTERM raise Interrupted (the trainer defers it)
    written = None
    try:
        spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
        record = run_cell(spec)
        written = write_atomic(spec["record"], json.dumps(record, indent=2) + "\n")
    except (Interrupted, KeyboardInterrupt) as stop:
        if not isinstance(stop, Interrupted):
            stop = Interrupted(signal.SIGINT)
        kept = f"record {written} written" if written else "no record written"
        print(f"weirdnet bench: cell stopped ({stop.message}); {kept}", file=sys.stderr,
              flush=True)
        return stop.exit_status
    finally:
        if installed:
            STOP.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
