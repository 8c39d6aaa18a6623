"""The six steps of ``weirdnet bench gpu``: each runs its children within its time box,
returns (status, note) and fills ``step.data``; :func:`run_step` writes its record."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from weirdnet_lab.harness import output
from weirdnet_lab.harness.jsonl import json_objects

from .plan import (
    DECODE,
    DECODE_BATCHES,
    DECODE_GRAPH,
    DRY_RUN_TESTS,
    GPU_TESTS,
    KERNELS,
    MODEL_MECHANISMS,
    MODELS,
    SCAN,
    SCAN_METHODS,
    SCAN_SHAPE,
    SCAN_TIMING,
    SCAN_TIMING_MARGIN_S,
    SCAN_TIMING_NEED_S,
    SPEED,
    SPEED_MECHANISMS,
    SUITE,
    TITLES,
    Plan,
    Step,
    StepTimeout,
    device_type,
    now,
    read_json,
)
from .report import selfcheck_text


def run_step(plan: Plan, index: int, name: str) -> dict:
    """Run step ``name`` within its time box and write its record; the record."""
    from weirdnet.run import write_atomic

    print(f"weirdnet bench gpu: step {index} {name} (time box {plan.boxes[name]:g} s)",
          file=sys.stderr, flush=True)
    step, started = Step(plan, name), time.perf_counter()
    record = {"step": name, "index": index, "title": TITLES[name], "mode": plan.mode,
              "device": plan.device, "started": now(), "time_box_s": plan.boxes[name]}
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


def code_version() -> dict:
    """The checkout's commit and dirty flag, read by this process: the env step's child,
    which reads them too, can time out on a fresh machine (CUDA starting up)."""
    from weirdnet_lab.harness.machine import git_commit

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
                             "repository (lab/benchmarks/gpu.sh does)")
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
            f"self-check: {selfcheck_text(check)}") if counts else \
        f"pytest exited with {done.returncode} and wrote no results"
    return ("passed" if passed else "failed"), note


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
    doc = read_json(plan.out / "scan" / f"scan_{device_type(plan)}.json")
    if done.returncode != 0 or doc is None:
        return "failed", f"weirdnet bench scan exited with {done.returncode}"
    config = doc["config"]
    step.data["scan"] = {"file": f"scan/scan_{device_type(plan)}.json",
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
    name = f"speed_{device_type(plan)}"
    try:
        done = step.child(plan.bench("speed", "--device", plan.device, "--mechanisms",
                                     SPEED_MECHANISMS[plan.mode], "--out",
                                     str(plan.out / "speed"), *SPEED[plan.mode]), "speed")
    except StepTimeout as timeout:
        doc = read_json(plan.out / "speed" / f"{name}.partial.json")
        if doc is None:
            raise
        step.data.update({"file": f"speed/{name}.partial.json", "partial": True,
                          "settings": doc["settings"], "rows": doc["rows"]})
        measured = sum(r.get("status") == "ok" for r in doc["rows"])
        return "timed_out", (f"{timeout}; the {measured} cell(s) measured before it are "
                             "kept (a partial report)")
    doc = read_json(plan.out / "speed" / f"{name}.json")
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
        doc = read_json(folder / f"decode_{device_type(plan)}.json")
        if done.returncode != 0 or doc is None:
            failed.append(f"batch {batch}: weirdnet bench decode exited with "
                          f"{done.returncode}")
            continue
        step.data["runs"].append({"batch": batch, "file": f"decode-b{batch}/decode_"
                                  f"{device_type(plan)}.json", "config": doc["config"],
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
        record = read_json(path) or {}
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
    events = list(json_objects(log))
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
    from weirdnet_lab.suite.budgets import get_budget
    from weirdnet_lab.suite.plan import TABLES_BY_NAME, plan_cells

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


def _step_kernels(step: Step) -> tuple[str, str]:
    """Issue 62's scan backends, SDPA causal and the copy, in one child."""
    plan = step.plan
    spec = {**SCAN_SHAPE, **KERNELS[plan.mode], "device": plan.device}
    step.data.update(step.job("kernels", spec))
    step.data["config"] = {k: spec[k] for k in ("batch", "dim", "dtype", "lengths")}
    failed = [r for r in step.data["rows"]
              if r["error"] and not r["error"].startswith("skipped")]
    return ("ok", "") if not failed else ("failed", f"{len(failed)} row(s) failed")


def fla_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("fla") is not None


def _step_models(step: Step) -> tuple[str, str]:
    """``bench speed --task lm``: Weird-Net A, the Transformer++ and fla's Gated DeltaNet
    (where fla is installed and the device is CUDA: fla's kernels are Triton), bf16."""
    plan = step.plan
    names = [m for m in MODEL_MECHANISMS if m != "fla-gated-deltanet"
             or (fla_importable() and device_type(plan) == "cuda")]
    step.data["left_out"] = [m for m in MODEL_MECHANISMS if m not in names]
    done = step.child(plan.bench("speed", "--task", "lm", "--device", plan.device,
                                 "--mechanisms", ",".join(names), "--out",
                                 str(plan.out / "models"), *MODELS[plan.mode]), "models")
    doc = read_json(plan.out / "models" / f"speed_lm_{device_type(plan)}.json")
    if done.returncode != 0 or doc is None:
        return "failed", f"weirdnet bench speed exited with {done.returncode}"
    step.data.update({"file": f"models/speed_lm_{device_type(plan)}.json",
                      "settings": doc["settings"], "rows": doc["rows"]})
    note = (f"left out: {', '.join(step.data['left_out'])} (fla not installed, or no "
            "CUDA)") if step.data["left_out"] else ""
    return "ok", note


def _step_decode_graph(step: Step) -> tuple[str, str]:
    """``bench decode`` at batch 1, Weird-Net A small, with and without --cuda-graph."""
    plan, failed = step.plan, []
    step.data["runs"] = []
    for graph in (False, True):
        folder = plan.out / ("decode-graph" if graph else "decode-eager")
        done = step.child(plan.bench("decode", "--device", plan.device, "--batch", "1",
                                     "--models", "weirdnet-a-small-cpu", "--out",
                                     str(folder), *DECODE_GRAPH[plan.mode],
                                     *(["--cuda-graph"] if graph else [])),
                          folder.name)
        doc = read_json(folder / f"decode_{device_type(plan)}.json")
        if done.returncode != 0 or doc is None:
            failed.append(f"{folder.name}: weirdnet bench decode exited with "
                          f"{done.returncode}")
            continue
        step.data["runs"].append({"batch": 1, "cuda_graph": graph,
                                  "file": f"{folder.name}/decode_{device_type(plan)}.json",
                                  "config": doc["config"], "results": doc["results"],
                                  "targets": doc["targets"]})
    return ("failed", "; ".join(failed)) if failed else ("ok", "")


def _step_scan_timing(step: Step) -> tuple[str, str]:
    """Issue 73's prepared run (:mod:`weirdnet_lab.gpu.scan_timing`) in one child, within
    the time box less a margin; the rows it wrote before a timeout are kept."""
    from .scan_timing import read_rows

    plan = step.plan
    rows_path = plan.out / "logs" / "scan-timing.jsonl"
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    rows_path.unlink(missing_ok=True)
    spec = {**SCAN_TIMING[plan.mode], "device": plan.device, "records": str(rows_path),
            "new_backend": plan.new_backend, "need_s": SCAN_TIMING_NEED_S,
            "budget_s": max(step.remaining() - SCAN_TIMING_MARGIN_S, 1.0)}
    step.logs.append(str(rows_path.relative_to(plan.out)))
    try:
        step.job("scan-timing", spec, _test_env(plan))
    finally:  # what it measured, also when the time box stopped it
        step.data.update({"config": {k: spec[k] for k in ("batch", "dim", "dtype", "lengths",
                                                          "new_backend")},
                          "rows": read_rows(rows_path)})
    rows = step.data["rows"]
    failed = [r for r in rows if r.get("status") in ("error", "failed")]
    skipped = [r for r in rows if r.get("status") in ("skipped", "missing")]
    note = f"{len(skipped)} measurement(s) skipped or missing" if skipped else ""
    if failed:
        return "failed", f"{len(failed)} measurement(s) failed" + (f"; {note}" if note else "")
    return "ok", note


STEP_FUNCTIONS: dict[str, Callable[[Step], tuple[str, str]]] = {
    "env": _step_env, "correctness": _step_correctness, "scan": _step_scan,
    "kernels": _step_kernels, "speed": _step_speed, "models": _step_models,
    "decode": _step_decode, "decode-graph": _step_decode_graph, "suite": _step_suite,
    "scan-timing": _step_scan_timing}
