"""``weirdnet bench speed``: training steps/s and peak memory of each model family
relative to the Transformer on byte-level text classification (Weird-Net Table V,
DBA Table 1).

Every (mechanism, length) is measured in a fresh process (``python -m
weirdnet.lab.harness.child speed SPEC``) with the same model size and batch for every
mechanism: a classifier over bytes (vocabulary 257, 2 classes), AdamW, random tokens.
One training step = forward, loss, backward, optimizer step.

- memory: the peak extra memory of the first training step (which also creates the Adam
  state) above the model, optimizer and batch, as the allocator counts it:
  ``max_memory_allocated`` on CUDA; on CPU the same quantity from a per-allocation trace
  (:func:`.memory.allocator_peak_bytes`), and beside it the peak RSS (glibc keeps freed
  memory, :mod:`.alloc`), which adds heap fragmentation and C workspaces;
- speed: the median of ``--steps`` timed steps after ``--warmup`` untimed ones.

A mechanism whose step took longer than ``--max-step-seconds`` at one length is not run
at longer ones (marked in the table), so the quadratic Transformer cannot stall the run.

``--task lm`` measures byte-level language models instead (vocabulary 256, next-byte
loss), the models of ``weirdnet bench lm`` and its ``transformers`` peers (Llama, Mamba,
Mamba-2, RWKV), each matched to the non-embedding parameters of the GPT-2-style
Transformer at the chosen sizes within 5%, with ratios against the Transformer++.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from weirdnet.lab.harness import output
from weirdnet.lab.harness.alloc import reuse_freed_memory

HELP = "training steps/s and peak memory of each model vs the Transformer"

DESCRIPTION = __doc__.split("\n\n", 1)[0].replace("``", "`") + "\n\n" + \
    "Writes speed_<device>.{json,md,png} (--task lm: speed_lm_<device>.*) to OUT and " \
    "prints the Markdown table. OUT is --out DIR, else $WEIRDNET_BENCH_DIR, else " \
    "~/.cache/weirdnet/bench; the committed " \
    "results are rewritten only with --out benchmarks/results."
EXAMPLES = """\
examples:
  weirdnet bench speed                                   # CPU, L = 256 ... 16K
  weirdnet bench speed --out benchmarks/results          # the committed results
  weirdnet bench speed --device cuda                     # LRA Text sizes, batch 32
  weirdnet bench speed --lengths 1024 4096 --mechanisms weird-a,dba,softmax
  weirdnet bench speed --task lm                         # LMs and the transformers peers
"""
LENGTHS = (256, 512, 1024, 2048, 3072, 4096, 8192, 16384)
SIZES = {"cpu": {"dim": 64, "depth": 2, "d_ff": 128, "heads": 4, "batch": 4},
         "cuda": {"dim": 256, "depth": 4, "d_ff": 1024, "heads": 4, "batch": 32}}
"""Default model and batch per device: CPU-sized, and LRA Text's (Weird-Net Table II)."""
LM_LENGTHS = (1024, 2048, 4096, 8192, 16384)
LM_SIZES = {"cpu": {"dim": 128, "depth": 4, "d_ff": 512, "heads": 4, "batch": 1},
            "cuda": {"dim": 256, "depth": 4, "d_ff": 1024, "heads": 4, "batch": 8}}
"""``--task lm``: bench lm's model on CPU (one sequence per step), a wider one on CUDA."""
LM_MECHANISMS = ("weird-a", "weird-b", "weird-a-pp", "weird-b-pp", "softmax", "llama",
                 "mamba", "mamba2", "rwkv", "transformerpp")
REFERENCE = {"classify": "softmax", "lm": "transformerpp"}
"""The model every ratio of a task is taken against."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from weirdnet.lab.variants import MECHANISMS

    names = ",".join(m.name for m in MECHANISMS)
    parser.add_argument("--task", choices=("classify", "lm"), default="classify",
                        help="classify: byte-level text classification (the papers' "
                             "tables; default); lm: byte-level language models with the "
                             "transformers peers")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help=f"default: {' '.join(map(str, LENGTHS))} (classify), "
                             f"{' '.join(map(str, LM_LENGTHS))} (lm)")
    parser.add_argument("--mechanisms", default=None, help=f"comma-separated (default: "
                        f"{names}; lm: {','.join(LM_MECHANISMS)})")
    for key in ("dim", "depth", "d_ff", "heads", "batch"):
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None,
                            help=f"default: {SIZES['cpu'][key]} (CPU), "
                                 f"{SIZES['cuda'][key]} (CUDA); lm: "
                                 f"{LM_SIZES['cpu'][key]}, {LM_SIZES['cuda'][key]}")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps (default 1)")
    parser.add_argument("--max-step-seconds", type=float, default=30.0,
                        help="skip longer lengths of a mechanism slower than this")
    output.add_out_arguments(parser, "speed_<device>.{json,md,png}")


# --- the child: one (mechanism, length) ------------------------------------------------

def _widths(spec: dict[str, Any]) -> dict[str, Any]:
    return {key: spec[key] for key in ("dim", "depth", "d_ff", "heads")}


def _build_lm(spec: dict[str, Any], device):
    """The matched language model of ``spec["mechanism"]`` (see :mod:`weirdnet.
    experiments.matching`), its step and its batches of random bytes."""
    import torch

    from weirdnet.lab import matching

    table = matching.matched_variant(spec["mechanism"], _widths(spec))[0]
    model = matching.build(table, max_len=spec["length"]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(tokens, targets) -> None:
        optimizer.zero_grad(set_to_none=True)
        model(tokens, targets).loss.backward()
        optimizer.step()

    def batch(length: int):
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, 256, (spec["batch"], length + 1), generator=generator)
        return tokens[:, :-1].to(device), tokens[:, 1:].to(device)

    return model, step, batch


def _build(spec: dict[str, Any], device):
    import torch

    from weirdnet.lab.variants import get_variant

    if spec.get("task") == "lm":
        return _build_lm(spec, device)
    from weirdnet.models.classifier import WeirdNetClassifier

    variant = get_variant(spec["mechanism"]).model_overrides("text", "lra")  # its readout too
    backbone = {"dim": spec["dim"], "depth": spec["depth"], "d_ff": spec["d_ff"],
                "heads": spec["heads"], "max_len": spec["length"], "vocab_size": 257,
                **variant.pop("backbone")}
    model = WeirdNetClassifier({"backbone": backbone, "num_classes": 2, **variant}).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(tokens, labels) -> None:
        optimizer.zero_grad(set_to_none=True)
        model(tokens, labels=labels).loss.backward()
        optimizer.step()

    def batch(length: int):
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, 257, (spec["batch"], length), generator=generator)
        labels = torch.randint(0, 2, (spec["batch"],), generator=generator)
        return tokens.to(device), labels.to(device)

    return model, step, batch


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Speed and memory of one (mechanism, length): see the module doc."""
    allocator = reuse_freed_memory()
    import torch

    from weirdnet.lab.harness.memory import MIB, PeakMemory, allocator_peak_bytes
    from weirdnet.lab.harness.timing import synchronize, time_step

    device = torch.device(spec["device"])
    torch.manual_seed(0)
    model, step, batch = _build(spec, device)
    step(*batch(min(16, spec["length"])))  # load kernels and thread pools
    tokens, labels = batch(spec["length"])
    meter = PeakMemory(device, since="model, optimizer and batch")
    meter.start()
    step(tokens, labels)
    synchronize(device)
    memory_mib, rss_mib = meter.peak_mib()[0], None
    if device.type == "cpu":  # the trace's own buffers would count in the RSS: a 2nd model
        rss_mib = memory_mib
        torch.manual_seed(0)
        _, fresh_step, _ = _build(spec, device)
        memory_mib = allocator_peak_bytes(lambda: fresh_step(tokens, labels)) / MIB
    times = time_step(lambda: step(tokens, labels), device, spec["steps"], spec["warmup"])
    seconds = statistics.median(times)
    return {"mechanism": spec["mechanism"], "length": spec["length"], "status": "ok",
            "step_s": seconds, "steps_per_s": 1.0 / seconds,
            "tokens_per_s": spec["batch"] * spec["length"] / seconds,
            "memory_mib": memory_mib, "rss_mib": rss_mib, "allocator": allocator,
            "parameters": model.num_parameters(),
            "non_embedding_parameters": model.num_parameters(embeddings=False)}


def _run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One cell in a fresh process (the ``speed`` job of
    :mod:`weirdnet.lab.harness.child`), stopped with this one; a failure is a row with its
    status and error."""
    from weirdnet.lab.harness import children

    result = children.run_job("speed", spec, timeout_s=timeout)
    return {**{key: spec[key] for key in ("mechanism", "length")}, **result}


# --- the parent: every (mechanism, length), then the report ----------------------------

def _resolve(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    table = LM_SIZES if args.task == "lm" else SIZES
    sizes = dict(table["cuda" if device.startswith("cuda") else "cpu"])
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    return {"task": args.task, "reference": REFERENCE[args.task], "device": device,
            **sizes, "steps": args.steps, "warmup": args.warmup}


def measure_all(base: dict[str, Any], mechanisms: list[str], lengths: list[int],
                max_step_s: float) -> list[dict[str, Any]]:
    """Measure every (mechanism, length), shortest first, skipping lengths after a step
    slower than ``max_step_s``."""
    from tqdm.auto import tqdm

    rows = []
    slow: dict[str, int] = {}
    with tqdm(total=len(mechanisms) * len(lengths), unit="cell", dynamic_ncols=True) as bar:
        for mechanism in mechanisms:
            for length in sorted(lengths):
                bar.set_postfix_str(f"{mechanism} L={length}")
                if mechanism in slow:
                    rows.append({"mechanism": mechanism, "length": length,
                                 "status": f"skipped (> {max_step_s:g} s/step at "
                                           f"L={slow[mechanism]})"})
                else:
                    timeout = 60 + max_step_s * (base["steps"] + base["warmup"] + 2) * 4
                    row = _run_child({**base, "mechanism": mechanism, "length": length},
                                     timeout)
                    rows.append(row)
                    if row["status"] != "ok" or row["step_s"] > max_step_s:
                        slow[mechanism] = length
                bar.update(1)
    return rows


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure every cell, write and print the report (see :mod:`.output`); the exit
    status."""
    from weirdnet.lab.variants import MECHANISMS, get_variant

    lm = args.task == "lm"
    if args.lengths is None:
        args.lengths = list(LM_LENGTHS if lm else LENGTHS)
    if args.mechanisms is None:
        args.mechanisms = ",".join(LM_MECHANISMS if lm else (m.name for m in MECHANISMS))
    try:
        mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
        for name in mechanisms:
            why = get_variant(name).unsupported("lm" if lm else "lra")
            if why:
                raise ValueError(f"{why} (--task {args.task})")
    except ValueError as error:
        print(f"weirdnet bench speed: {error}", file=sys.stderr)
        return 2
    out = output.out_dir(args.out)
    try:
        with output.writing(out, "weirdnet bench speed") as session:
            return _run(args, argv, mechanisms, out, session)
    except output.BenchError as error:
        return output.fail(error)


def _run(args: argparse.Namespace, argv: list[str], mechanisms: list[str], out: Path,
         session: output.Writing) -> int:
    import torch

    from weirdnet._atomic import write_atomic
    from weirdnet.lab.harness.machine import machine_info
    from weirdnet.lab.speed_report import draw, markdown

    try:
        base = _resolve(args)
    except ValueError as error:
        print(f"weirdnet bench speed: {error}", file=sys.stderr)
        return 2
    if base["reference"] not in mechanisms:
        mechanisms.append(base["reference"])  # the reference of every ratio
    if base["task"] == "lm":
        try:  # every model matched before any is timed
            from weirdnet.lab import matching

            for name in mechanisms:
                matching.matched_variant(name, _widths(base))
        except (ValueError, ImportError) as error:
            print(f"weirdnet bench speed: {error}", file=sys.stderr)
            return 2
    rows = measure_all(base, mechanisms, args.lengths, args.max_step_seconds)
    command = ["weirdnet", *argv]
    info = machine_info(torch.device(base["device"]), command, reuse_freed_memory())
    result = {"settings": base, "machine": info, "rows": rows}
    stem = ("speed_lm_" if base["task"] == "lm" else "speed_") + \
        torch.device(base["device"]).type
    text = markdown(result, f"{stem}.png")
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    with output.write_whole():
        write_atomic(paths[0], json.dumps(result, indent=2) + "\n")
        try:
            draw(result, out / f"{stem}.png")
            paths.append(out / f"{stem}.png")
        except ImportError:
            text = text.replace(f"![speed and memory]({stem}.png)\n", "")
            print("plot skipped: matplotlib is not installed (pip install matplotlib)",
                  file=sys.stderr)
        write_atomic(paths[1], text)
        session.kept = "the report was written whole: " + ", ".join(map(str, paths))
    print(text, flush=True)
    output.print_written(paths)
    return 0

