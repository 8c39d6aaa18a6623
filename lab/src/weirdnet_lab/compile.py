"""``weirdnet bench compile``: training steps/s of models run eagerly and through
``torch.compile(model, fullgraph=True)``, side by side in one run.

Workloads (random tokens; a step = forward, loss, backward, AdamW step):

- ``quickstart``: the language model of ``configs/quickstart.toml`` (Weird-Net structure B,
  D = 128, 4 layers, bytes), batch 16 x 256 tokens, as ``weirdnet train`` runs it;
- ``weird-a-4k``: a Weird-Net structure-A classifier at L = 4,096 with ``bench speed``'s
  CPU sizes (D = 64, 2 layers, batch 4).

Each (workload, mode) runs in a fresh process (:mod:`.children`).  The compiled mode
reports the time of its first step (compilation included) apart from the median of the
timed steps; both modes start from the same weights and batch, and the report gives the
relative difference of their first losses (it checks that compile computes the same).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from weirdnet_lab.harness import output
from weirdnet_lab.harness.arguments import above, at_least, positive

HELP = "training steps/s eager vs torch.compile(fullgraph=True)"

DESCRIPTION = __doc__.split("\n\n", 1)[0].replace("``", "`") + "\n\n" + \
    "Writes compile_<device>.{json,md} to OUT and prints the Markdown table. OUT is --out " \
    "DIR, else $WEIRDNET_BENCH_DIR, else ~/.cache/weirdnet/bench; the committed results " \
    "are rewritten only with --out lab/results."
EXAMPLES = """\
examples:
  weirdnet bench compile                                 # both workloads, CPU
  weirdnet bench compile --out lab/results        # the committed results
  weirdnet bench compile --workloads quickstart --steps 20
"""
QUICKSTART = {"pattern": "B", "dim": 128, "depth": 4, "d_ff": 512, "heads": 4,
              "batch": 16, "length": 256}
"""The model and batch of configs/quickstart.toml (a test keeps them equal)."""
WORKLOADS = {
    "quickstart": {"model": "lm", **QUICKSTART},
    "weird-a-4k": {"model": "classifier", "mechanism": "weird-a", "dim": 64, "depth": 2,
                   "d_ff": 128, "heads": 4, "batch": 4, "length": 4096},
}
MODES = ("eager", "compiled")
VOCAB = 257


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, from {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--steps", type=positive, default=10, help="timed steps (default 10)")
    parser.add_argument("--warmup", type=at_least(0), default=2,
                        help="untimed steps after the first (default 2)")
    parser.add_argument("--timeout", type=above(0), default=1200.0,
                        help="seconds per (workload, mode) process (default 1200)")
    output.add_out_arguments(parser, "compile_<device>.{json,md}")


# --- the child: one (workload, mode) ---------------------------------------------------

def _model(spec: dict[str, Any]):
    """The workload's model (seeded: every mode starts from the same weights)."""
    import torch

    torch.manual_seed(0)
    if spec["model"] == "lm":
        from weirdnet.models import WeirdNetLM

        keys = ("pattern", "dim", "depth", "d_ff", "heads")
        backbone = {k: spec[k] for k in keys} | {"vocab_size": VOCAB, "max_len": spec["length"],
                                                 "causal": True}
        return WeirdNetLM({"backbone": backbone})
    from weirdnet.models import WeirdNetClassifier
    from weirdnet_lab.variants import get_variant

    backbone = {k: spec[k] for k in ("dim", "depth", "d_ff", "heads")}
    backbone |= {"max_len": spec["length"], "vocab_size": VOCAB,
                 **get_variant(spec["mechanism"]).backbone_overrides("lra")}
    return WeirdNetClassifier({"backbone": backbone, "num_classes": 2})


def _batch(spec: dict[str, Any]):
    """(inputs, targets) for one step: next-token targets for the LM, labels otherwise."""
    import torch

    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (spec["batch"], spec["length"] + 1), generator=generator)
    if spec["model"] == "lm":
        return tokens[:, :-1], tokens[:, 1:]
    return tokens[:, :-1], torch.randint(0, 2, (spec["batch"],), generator=generator)


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """First-step time and loss, and the median step time, of one (workload, mode)."""
    import torch

    from weirdnet_lab.harness.timing import time_step

    model = _model(spec)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = torch.compile(model, fullgraph=True) if spec["mode"] == "compiled" else model
    inputs, targets = _batch(spec)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = run(inputs, targets).loss if spec["model"] == "lm" else \
            run(inputs, labels=targets).loss
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    start = time.perf_counter()
    first_loss = step()  # timed alone: it holds the compilation
    first_s = time.perf_counter() - start
    times = time_step(step, torch.device("cpu"), spec["steps"], spec["warmup"])
    seconds = statistics.median(times)
    return {"workload": spec["workload"], "mode": spec["mode"], "status": "ok",
            "first_step_s": first_s, "first_loss": first_loss, "step_s": seconds,
            "steps_per_s": 1.0 / seconds, "tokens_per_s": spec["batch"] * spec["length"] / seconds,
            "parameters": sum(p.numel() for p in model.parameters()),
            "threads": torch.get_num_threads()}


def _run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One cell in a fresh process (the ``compile`` job of
    :mod:`weirdnet_lab.harness.child`), stopped with this one; a failure is a row with its
    status and error."""
    from weirdnet_lab.harness import children

    result = children.run_job("compile", spec, timeout_s=timeout)
    return {**{key: spec[key] for key in ("workload", "mode")}, **result}


# --- the parent ------------------------------------------------------------------------

def measure_all(workloads: list[str], steps: int, warmup: int, timeout: float
                ) -> list[dict[str, Any]]:
    """Every (workload, mode), eager first, each in a fresh process."""
    from tqdm.auto import tqdm

    rows = []
    with tqdm(total=len(workloads) * len(MODES), unit="cell", dynamic_ncols=True) as bar:
        for name in workloads:
            for mode in MODES:
                bar.set_postfix_str(f"{name} {mode}")
                spec = {**WORKLOADS[name], "workload": name, "mode": mode, "steps": steps,
                        "warmup": warmup}
                rows.append(_run_child(spec, timeout))
                bar.update(1)
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload: eager and compiled steps/s, their ratio and the loss agreement."""
    table = []
    for name in dict.fromkeys(r["workload"] for r in rows):
        cells = {r["mode"]: r for r in rows if r["workload"] == name}
        eager, compiled = cells.get("eager", {}), cells.get("compiled", {})
        entry: dict[str, Any] = {"workload": name, "eager": eager, "compiled": compiled}
        if eager.get("status") == "ok" and compiled.get("status") == "ok":
            entry["speedup"] = compiled["steps_per_s"] / eager["steps_per_s"]
            entry["first_loss_rel_diff"] = abs(compiled["first_loss"] - eager["first_loss"]) \
                / abs(eager["first_loss"])
        table.append(entry)
    return table


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    if row.get("status") != "ok":
        return row.get("status", "not run") + (f": {row['error']}" if "error" in row else "")
    return format(row[key], fmt)


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = ["# torch.compile: eager vs compiled training steps", "",
             f"- machine: {m['cpu_model']} ({m['usable_cores']} usable cores); torch "
             f"{m['torch']}; weirdnet {m['weirdnet']}; {m['date']}",
             f"- command: `{m['command']}`", "",
             "| workload | eager steps/s | compiled steps/s | compiled / eager | "
             "first compiled step (s, compile incl.) | first loss rel. diff |",
             "|---|---|---|---|---|---|"]
    for entry in result["summary"]:
        eager, compiled = entry["eager"], entry["compiled"]
        ratio = f"{entry['speedup']:.2f}x" if "speedup" in entry else "–"
        diff = f"{entry['first_loss_rel_diff']:.1e}" if "speedup" in entry else "–"
        lines.append(f"| {entry['workload']} | {_cell(eager, 'steps_per_s', '.2f')} | "
                     f"{_cell(compiled, 'steps_per_s', '.2f')} | {ratio} | "
                     f"{_cell(compiled, 'first_step_s', '.1f')} | {diff} |")
    settings = result["settings"]
    lines += ["", f"Median of {settings['steps']} timed steps after the first step and "
              f"{settings['warmup']} more untimed ones; each cell in a fresh process. "
              "Compiled: `torch.compile(model, fullgraph=True)` (inductor)."]
    for name in settings["workloads"]:
        lines.append(f"- {name}: {json.dumps(WORKLOADS[name])}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure every cell, write and print the report; the exit status."""
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown or not workloads:
        print(f"weirdnet bench compile: unknown workload {', '.join(unknown) or '(none)'}; "
              f"choose from {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    out = output.out_dir(args.out)
    try:
        with output.writing(out, "weirdnet bench compile") as session:
            return _run(args, argv, workloads, out, session)
    except output.BenchError as error:
        return output.fail(error)


def _run(args, argv, workloads: list[str], out: Path, session: output.Writing) -> int:
    import torch

    from weirdnet.run import write_atomic
    from weirdnet_lab.harness.alloc import reuse_freed_memory
    from weirdnet_lab.harness.machine import machine_info

    rows = measure_all(workloads, args.steps, args.warmup, args.timeout)
    info = machine_info(torch.device("cpu"), ["weirdnet", *argv], reuse_freed_memory())
    result = {"settings": {"workloads": workloads, "steps": args.steps, "warmup": args.warmup},
              "machine": info, "rows": rows, "summary": summarize(rows)}
    text = markdown(result)
    paths = [out / "compile_cpu.json", out / "compile_cpu.md"]
    with output.write_whole():
        write_atomic(paths[0], json.dumps(result, indent=2) + "\n")
        write_atomic(paths[1], text)
        session.kept = "the report was written whole: " + ", ".join(map(str, paths))
    print(text, flush=True)
    output.print_written(paths)
    return 0 if all(r.get("status") == "ok" for r in rows) else 1

