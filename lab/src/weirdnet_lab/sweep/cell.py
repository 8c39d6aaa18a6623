"""Run one suite cell in a fresh process and write its record: the ``cell`` job of
:mod:`weirdnet_lab.harness.child` (``python -m weirdnet_lab.harness.child cell @SPEC.json``), where
the spec holds ``config`` (the cell's training config), ``record`` (where the record
goes), ``cell`` (task, variant, seed, budget) and ``command`` (the suite's command line,
for the record).  Stopped by SIGINT/SIGTERM, it writes no record: the cell stays
unfinished, and the trainer has saved what it could, so a rerun resumes it.

Measured here, beside the trainer's metrics:

- **speed**: training steps per second, the median over the trainer's log windows
  (``samples_per_s / batch_size``), so evaluation pauses do not count, and the same per
  second of the process's CPU time (``cpu_steps_per_s``), which other jobs on the
  machine do not change (:func:`training_rate` says which a report uses);
- **memory**: on CPU the peak resident set size above the resident size once data and
  model are built (glibc told to keep freed memory, so the peak is a true high-water mark:
  :mod:`weirdnet_lab.harness.alloc`); on CUDA ``max_memory_allocated`` above the allocation
  at that point.  Both cover the training steps and the evaluations of the run;
- **time**: ``wall_s``, the wall time of the training and its evaluations, and
  ``cpu_s``, the CPU time this process spent in it (every thread).  Reports take a
  cell's training time from its steps and :func:`training_rate`
  (:func:`training_seconds`), which neither a pause nor a resume changes, and fall back
  on the smaller of wall and CPU time (:func:`busy_seconds`);
- **code**: ``commit`` and ``dirty`` of the checkout when the record is written, and
  ``commits``, every commit the run trained with, in order: each process that trains the
  cell (the first, and each resume) appends its checkout's version to the spec's
  ``code_log`` (:func:`note_code_version`), so a run resumed after the checkout moved
  says so;
- **baseline**: what ignoring the input scores on the items the test evaluation read (the
  majority class, or an LM's unigram entropy: :mod:`.baselines`);
- **stages**: a cell with a curriculum (the spec's ``stages``, training configs trained
  in order before its own, which starts from the last one's weights) records each
  stage's results, steps and wall time (this process's: a stage finished by an earlier,
  interrupted process of the cell counts only its check, and says ``resumed``); the
  cell's ``wall_s`` and ``cpu_s`` include them.

A run directory with checkpoints of the cell's very config is resumed (an interrupted
cell) unless the spec says ``fresh`` (a run the command asked to redo); otherwise it is
started afresh (a directory without checkpoints, or one left by an older config of the
cell, is overwritten).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from weirdnet_lab.harness.alloc import reuse_freed_memory
from weirdnet_lab.harness.jsonl import json_objects
from weirdnet_lab.harness.machine import code_version, git_commit


def _process_cpu_s() -> float:
    """CPU seconds (user + system, every thread) this process has used."""
    times = os.times()
    return times.user + times.system


def busy_seconds(record: dict[str, Any]) -> float | None:
    """A cell's running time with pauses left out: the smaller of its wall time and its
    CPU time (a one-thread cell's CPU time excludes the time it was stopped or waited for
    a core; a multi-thread cell's exceeds its wall time).  Records made before ``cpu_s``
    existed give their wall time; None without either.  A resumed cell's record counts
    only its last process (see :func:`training_seconds`)."""
    wall, cpu = record.get("wall_s"), record.get("cpu_s")
    if wall and cpu:
        return min(wall, cpu)
    return wall or None


def ran_on_cpu(record: dict[str, Any]) -> bool:
    """Whether a cell's record says it trained on a CPU (older records: assumed so)."""
    return str((record.get("machine") or {}).get("device", "cpu")).startswith("cpu")


def training_rate(record: dict[str, Any]) -> float | None:
    """Training steps per second of a cell, as other jobs on the machine leave it: on a
    CPU, its median steps per CPU-second times its torch threads (with one thread, steps
    per CPU-second); on a GPU, or in a record made before ``cpu_steps_per_s`` existed, its
    median wall-clock steps/s.  None without either."""
    cpu_rate = record.get("cpu_steps_per_s")
    if cpu_rate and ran_on_cpu(record):
        return cpu_rate * (record.get("torch_threads") or 1)
    return record.get("steps_per_s")


def training_seconds(record: dict[str, Any]) -> float | None:
    """The training time of a cell's whole run: its steps at its :func:`training_rate`
    (the trainer's log windows), so neither a pause, a resume nor another job changes it;
    evaluations are not counted.  Falls back to :func:`busy_seconds` without both."""
    steps, rate = record.get("steps"), training_rate(record)
    if steps and rate:
        return steps / rate
    return busy_seconds(record)


def note_code_version(code_log: str | None, version: dict[str, Any], resume: bool
                      ) -> list[str]:
    """Append this process's ``version`` (``commit``, ``dirty``) to the cell's code log
    (started afresh unless ``resume``) and return the distinct commits in it, in order
    (a dirty checkout's commit marked ``+dirty``).  Without a code log (a spec written
    before it existed): just this process's commit."""
    def label(entry: dict[str, Any]) -> str:
        return f"{entry.get('commit')}{'+dirty' if entry.get('dirty') else ''}"

    if code_log is None:
        return [label(version)]
    path = Path(code_log)
    entries = list(json_objects(path)) if resume and path.exists() else []
    entries.append(version)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return list(dict.fromkeys(label(e) for e in entries))


def median_rates(log_file: Path, batch_size: int) -> dict[str, float | None]:
    """Median training steps per second over the ``train`` events of a run log, in one
    pass: ``steps_per_s`` by the wall clock, ``cpu_steps_per_s`` by this process's CPU
    time (None where no event has it)."""
    fields = {"steps_per_s": "samples_per_s", "cpu_steps_per_s": "cpu_samples_per_s"}
    rates: dict[str, list[float]] = {key: [] for key in fields}
    for event in json_objects(log_file):
        if event.get("event") != "train":
            continue
        for key, field in fields.items():
            if event.get(field):
                rates[key].append(event[field] / batch_size)
    return {key: statistics.median(v) if v else None for key, v in rates.items()}


def evaluations(log_file: Path) -> list[dict[str, Any]]:
    """The periodic validation evaluations of a run log: ``{"step", "metrics"}`` by step
    (a resumed run's redone evaluations counted once, as ``weirdnet plot`` reads them)."""
    from weirdnet.train import read_log

    return [{"step": step, "metrics": metrics}
            for step, metrics in read_log(log_file).evals.get("val", [])]


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Train the cell of ``spec`` and return its record (see the module doc)."""
    allocator = reuse_freed_memory()
    import torch

    from weirdnet.train import TrainConfig, Trainer
    from weirdnet_lab.harness.machine import machine_info
    from weirdnet_lab.harness.memory import PeakMemory
    from weirdnet_lab.sweep.baselines import trivial_baseline
    from weirdnet_lab.sweep.store import run_matches

    config = TrainConfig.from_dict(spec["config"])
    run_dir = Path(config.run.out_dir) / config.run.name
    # an older config's run starts afresh; so does one the command asked to redo
    resume = not spec.get("fresh") and run_matches(run_dir, spec["config"])
    commits = note_code_version(spec.get("code_log"),
                                git_commit(Path(__file__).resolve().parent), resume)
    started, cpu_started = time.perf_counter(), _process_cpu_s()
    stages = [train_stage(stage, bool(spec.get("fresh"))) for stage in spec.get("stages", ())]
    trainer = Trainer(config, resume=resume, overwrite=not resume, progress_bar=False)
    meter = PeakMemory(trainer.processes.device, since="data + model")
    meter.start()
    summary = trainer.fit()
    wall_s = time.perf_counter() - started
    cpu_s = _process_cpu_s() - cpu_started
    memory_mib, memory_kind = meter.peak_mib()
    evaluated = summary.get("evaluated", {})
    baseline = trivial_baseline(trainer.splits["test"], trainer.info.task,
                                evaluated.get("test")) if "test" in trainer.splits else None
    machine = machine_info(trainer.processes.device, spec["command"], allocator)
    record = {
        **spec["cell"], "status": "done", "results": summary["results"],
        "evaluated": evaluated, "baseline": baseline,
        "steps": summary["steps"], "best_step": summary["best_step"],
        "parameters": summary["parameters"],
        **median_rates(run_dir / "log.jsonl", config.train.batch_size),
        "evaluations": evaluations(run_dir / "log.jsonl"),
        "memory_mib": memory_mib, "memory_kind": memory_kind, "wall_s": wall_s,
        "cpu_s": round(cpu_s, 1), "resumed": resume, **code_version(machine),
        "commits": commits, "machine": machine,
        "torch_threads": torch.get_num_threads(),
        "cells_at_once": spec.get("cells_at_once", 1),
        "config_hash": spec["config_hash"], "config": spec["config"],
    }
    if stages:
        record["stages"] = stages
    if spec["cell"].get("positions"):  # bits per byte by context length (bench context)
        from weirdnet_lab.sweep.context_eval import context_measurements

        record.update(context_measurements(run_dir, config, spec["cell"]["positions"],
                                           trainer.processes.device))
    return record


def train_stage(config_dict: dict[str, Any], fresh: bool) -> dict[str, Any]:
    """Train one curriculum stage of a cell (resumed where its run holds checkpoints of
    this config, unless ``fresh``; a finished one is left as it is) and return what the
    cell's record keeps of it."""
    from weirdnet.train import TrainConfig, Trainer
    from weirdnet_lab.sweep.store import config_hash, run_matches

    config = TrainConfig.from_dict(config_dict)
    resume = not fresh and run_matches(Path(config.run.out_dir) / config.run.name, config_dict)
    started = time.perf_counter()
    trainer = Trainer(config, resume=resume, overwrite=not resume, progress_bar=False)
    try:
        summary = trainer.fit()
    finally:
        trainer.close()
    return {"name": config.run.name, "config_hash": config_hash(config_dict),
            "config": config_dict, "results": summary["results"],
            "evaluated": summary.get("evaluated", {}), "steps": summary["steps"],
            "best_step": summary["best_step"], "wall_s": time.perf_counter() - started,
            "resumed": resume}


def run_cell_and_record(spec: dict[str, Any]) -> dict[str, Any]:
    """Train the cell, write its record atomically; returns where it went."""
    from weirdnet.run import write_atomic

    record = run_cell(spec)
    return {"record": str(write_atomic(spec["record"], json.dumps(record, indent=2) + "\n"))}
