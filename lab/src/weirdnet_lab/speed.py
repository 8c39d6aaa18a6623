"""``weirdnet bench speed``: training steps/s and peak memory of each model family
relative to the Transformer on byte-level text classification (Weird-Net Table V,
DBA Table 1).

Every (mechanism, length) is measured in a fresh process (``python -m
weirdnet_lab.harness.child speed SPEC``) with the same model size and batch for every
mechanism: a classifier over bytes (vocabulary 257, 2 classes), AdamW, random tokens.
One training step = forward, loss, backward, optimizer step.

- memory: the peak extra memory of the first training step (which also creates the Adam
  state) above the model, optimizer and batch, as the allocator counts it:
  ``max_memory_allocated`` on CUDA; on CPU the same quantity from a per-allocation trace
  (:func:`.memory.allocator_peak_bytes`), and beside it the peak RSS (glibc keeps freed
  memory, :mod:`.alloc`), which adds heap fragmentation and C workspaces;
- speed: the median of ``--steps`` timed steps after ``--warmup`` untimed ones;
- precision: on CUDA every model trains in bfloat16 autocast, with
  ``scaled_dot_product_attention`` limited to FlashAttention or cuDNN (a Transformer row
  whose attention neither takes fails, rather than timing the math kernel); each row
  records the SDPA backend its step ran (``sdpa_backend``, None without SDPA).  On a CPU
  every model trains in float32, as before.

A mechanism whose step took longer than ``--max-step-seconds`` at one length is not run
at longer ones (marked in the table), so the quadratic Transformer cannot stall the run.
The cells run one length at a time, the reference first.  A stop signal after some cells
keeps them as ``<stem>.partial.{json,md}`` (marked partial; a full report there is left
as it was, and the next full report removes the partial one).

``--task lm`` measures byte-level language models instead (vocabulary 256, next-byte
loss), the models of ``weirdnet bench lm`` and its ``transformers`` peers (Llama, Mamba,
Mamba-2, RWKV, Qwen3-Next, RecurrentGemma, xLSTM), each matched to the non-embedding parameters
of the GPT-2-style Transformer at the chosen sizes within 5%, with ratios against the
Transformer++.

``--task long`` asks how long one machine can train (issue 33): the same language models
at 4K to 1M bytes, batch 1, Weird-Net A without positions (``weird-a-long``, D = 256,
N = 4) against the Transformer++ and Mamba-2 at matched sizes, every model with activation
checkpointing (``--checkpointing blocks``; weirdnet's FFNs in checkpointed chunks of
``--ffn-chunk`` positions).  Memory is the step's peak RSS with glibc's mmap threshold
fixed at 1 MiB (freed large blocks go back to the system, so the peak is what the machine
must hold: :func:`.harness.alloc.return_freed_memory`), and one step per length is timed,
the memory step itself.  A length is skipped when the
growth measured between a model's last two lengths predicts a step over
``--max-step-seconds`` or a peak over ``--memory-budget-gib``; the report gives each
model's largest length within the budget and its tokens/s against its own at the
shortest length (near-linear cost keeps that ratio near 1).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weirdnet.run import Interrupted, signal_name
from weirdnet_lab.harness import output
from weirdnet_lab.harness.alloc import return_freed_memory, reuse_freed_memory
from weirdnet_lab.harness.arguments import positive

HELP = "training steps/s and peak memory of each model vs the Transformer"

DESCRIPTION = __doc__.split("\n\n", 1)[0].replace("``", "`") + "\n\n" + \
    "On CUDA every model trains in bf16 autocast, SDPA limited to FlashAttention or " \
    "cuDNN (the report names the backend each row ran; a row neither takes fails); on " \
    "a CPU in float32.\n\n" + \
    "Writes speed_<device>.{json,md,png} (--task lm: speed_lm_<device>.*, --task long: " \
    "speed_long_<device>.*) to OUT and " \
    "prints the Markdown table. OUT is --out DIR, else $WEIRDNET_BENCH_DIR, else " \
    "~/.cache/weirdnet/bench; the committed " \
    "results are rewritten only with --out lab/results."
EXAMPLES = """\
examples:
  weirdnet bench speed                                   # CPU, L = 256 ... 16K
  weirdnet bench speed --out lab/results          # the committed results
  weirdnet bench speed --device cuda                     # LRA Text sizes, batch 32
  weirdnet bench speed --lengths 1024 4096 --mechanisms weird-a,dba,softmax
  weirdnet bench speed --task lm                         # LMs and the transformers peers
  weirdnet bench speed --task long                       # 4K to 1M bytes, checkpointed
"""
DEFAULTS = {"checkpointing": "none", "ffn_chunk": 0, "memory": "trace",
            "memory_budget_gib": None, "steps": 3, "warmup": 1, "max_step_seconds": 30.0}
"""The run options' defaults (``--task long`` changes some: :data:`TASKS`)."""
_RUN_OPTIONS = {
    "steps": (int, None, "timed steps"),
    "warmup": (int, None, "untimed steps"),
    "max_step_seconds": (float, None, "skip the longer lengths of a mechanism slower than "
                                      "this, or predicted to be"),
    "checkpointing": (str, ("none", "blocks"), "activation checkpointing of every model"),
    "ffn_chunk": (int, None, "weirdnet FFNs in checkpointed chunks of this many positions "
                             "(0: whole)"),
    "memory": (str, ("trace", "rss"), "trace: the allocator's bytes, from a traced second "
                                      "step; rss: the peak RSS of the timed step"),
    "memory_budget_gib": (float, None, "skip the lengths predicted to need more GiB"),
}
"""The options whose defaults depend on the task: (type, choices, help)."""


@dataclass(frozen=True)
class TaskSetting:
    """What ``--task`` sets.

    lengths: the default sequence lengths; sizes: the model and batch per device type
    ("cpu", "cuda"); mechanisms: the default models (None: the suite's mechanisms);
    reference: the model every ratio is taken against; stem: the report files' name
    before the device type; lm: its models are language models (else classifiers);
    defaults: the run options' defaults (:data:`DEFAULTS`, some changed)."""

    lengths: tuple[int, ...]
    sizes: dict[str, dict[str, int]]
    mechanisms: tuple[str, ...] | None
    reference: str
    stem: str
    lm: bool
    defaults: dict[str, Any] = field(default_factory=lambda: dict(DEFAULTS))


TASKS = {
    # CPU-sized, and LRA Text's (Weird-Net Table II) on CUDA
    "classify": TaskSetting(
        (256, 512, 1024, 2048, 3072, 4096, 8192, 16384),
        {"cpu": {"dim": 64, "depth": 2, "d_ff": 128, "heads": 4, "batch": 4},
         "cuda": {"dim": 256, "depth": 4, "d_ff": 1024, "heads": 4, "batch": 32}},
        None, "softmax", "speed_", lm=False),
    # bench lm's model on CPU (one sequence per step), a wider one on CUDA
    "lm": TaskSetting(
        (1024, 2048, 4096, 8192, 16384),
        {"cpu": {"dim": 128, "depth": 4, "d_ff": 512, "heads": 4, "batch": 1},
         "cuda": {"dim": 256, "depth": 4, "d_ff": 1024, "heads": 4, "batch": 8}},
        ("weird-a", "weird-b", "weird-a-pp", "weird-b-pp", "softmax", "llama", "mamba",
         "mamba2", "rwkv", "qwen3-next", "recurrent-gemma", "xlstm", "transformerpp"),
        "transformerpp", "speed_lm_", lm=True),
    # issue 33's setting: a 24 GB laptop (24e9 bytes = 22.35 GiB)
    "long": TaskSetting(
        (4096, 16384, 65536, 262144, 1048576),
        {device: {"dim": 256, "depth": 4, "d_ff": 1024, "heads": 4, "batch": 1}
         for device in ("cpu", "cuda")},
        ("weird-a-long", "transformerpp", "mamba2"), "transformerpp", "speed_long_",
        lm=True, defaults={**DEFAULTS, "checkpointing": "blocks", "ffn_chunk": 16384,
                           "memory": "rss", "memory_budget_gib": round(24e9 / 2**30, 2),
                           "steps": 1, "warmup": 0, "max_step_seconds": 1800.0}),
}
"""Every ``--task``: what it measures by default."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from weirdnet_lab.variants import MECHANISMS

    def each_task(value) -> str:
        return "; ".join(f"{name}: {value(task)}" for name, task in TASKS.items())

    suite = ",".join(m.name for m in MECHANISMS)
    parser.add_argument("--task", choices=tuple(TASKS), default="classify",
                        help="classify: byte-level text classification (the papers' "
                             "tables; default); lm: byte-level language models with the "
                             "transformers peers; long: language models at 4K to 1M bytes "
                             "with activation checkpointing")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    parser.add_argument("--lengths", type=positive, nargs="+", default=None,
                        help="default: " + each_task(lambda t: " ".join(map(str, t.lengths))))
    parser.add_argument("--mechanisms", default=None, help="comma-separated (default: "
                        + each_task(lambda t: ",".join(t.mechanisms or [suite])) + ")")
    for key in ("dim", "depth", "d_ff", "heads", "batch"):
        parser.add_argument(f"--{key.replace('_', '-')}", type=positive, default=None,
                            help="default: " + each_task(
                                lambda t, key=key: f"{t.sizes['cpu'][key]} (CPU), "
                                                   f"{t.sizes['cuda'][key]} (CUDA)"))
    for key, (kind, choices, what) in _RUN_OPTIONS.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind, choices=choices,
                            default=None, help=f"{what} (default: " + each_task(
                                lambda t, key=key: t.defaults[key]) + ")")
    output.add_out_arguments(parser, "speed_<device>.{json,md,png}")


# --- the child: one (mechanism, length) ------------------------------------------------

def _widths(spec: dict[str, Any]) -> dict[str, Any]:
    return {key: spec[key] for key in ("dim", "depth", "d_ff", "heads")}


def _build_lm(spec: dict[str, Any], device):
    """The matched language model of ``spec["mechanism"]`` (see :mod:`weirdnet.
    experiments.matching`), its step and its batches of random bytes."""
    import torch

    from weirdnet.train import enable_activation_checkpointing
    from weirdnet_lab import matching

    table = matching.matched_variant(spec["mechanism"], _widths(spec))[0]
    model = matching.build(table, max_len=spec["length"]).to(device)
    peer = hasattr(model, "peer")  # a transformers model: its own checkpointing, no chunks
    enable_activation_checkpointing(model, spec.get("checkpointing", "none"), 1,
                                    0 if peer else spec.get("ffn_chunk", 0))
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

    from weirdnet_lab.variants import get_variant

    if TASKS[spec.get("task", "classify")].lm:
        return _build_lm(spec, device)
    from weirdnet.models import WeirdNetClassifier

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


def in_precision(step, device):
    """``step`` run in the precision of a model-level row on ``device``
    (:func:`weirdnet_lab.gpu.sdpa.gpu_precision`: on CUDA bfloat16 autocast, SDPA limited
    to FlashAttention or cuDNN; on a CPU float32, as it is)."""
    from weirdnet_lab.gpu.sdpa import gpu_precision

    def run(*batch) -> None:
        with gpu_precision(device):
            step(*batch)

    return run


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Speed and memory of one (mechanism, length): see the module doc."""
    traced = spec.get("memory", "trace") == "trace"
    allocator = reuse_freed_memory() if traced else return_freed_memory()
    import time

    import torch

    from weirdnet_lab.gpu.sdpa import PRECISION, SDPARecorder, backends_text
    from weirdnet_lab.harness.memory import MIB, PeakMemory, allocator_peak_bytes
    from weirdnet_lab.harness.timing import synchronize, time_step

    device = torch.device(spec["device"])
    torch.manual_seed(0)
    model, step, batch = _build(spec, device)
    step = in_precision(step, device)
    step(*batch(min(16, spec["length"])))  # load kernels and thread pools
    tokens, labels = batch(spec["length"])
    meter = PeakMemory(device, since="model, optimizer and batch")
    meter.start()
    started = time.perf_counter()
    with SDPARecorder() as recorder:  # the metered step: which kernel SDPA ran
        step(tokens, labels)
    synchronize(device)
    first_s = time.perf_counter() - started
    memory_mib, rss_mib = meter.peak_mib()[0], None
    if device.type == "cpu":  # the trace's own buffers would count in the RSS: a 2nd model
        rss_mib = memory_mib
    if device.type == "cpu" and traced:
        torch.manual_seed(0)
        fresh_step = in_precision(_build(spec, device)[1], device)
        memory_mib = allocator_peak_bytes(lambda: fresh_step(tokens, labels)) / MIB
    if traced:
        times = time_step(lambda: step(tokens, labels), device, spec["steps"], spec["warmup"])
    else:  # the metered step is the first timed one (a long step is minutes)
        more = spec["steps"] - 1
        times = [first_s, *(time_step(lambda: step(tokens, labels), device, more,
                                      spec["warmup"]) if more > 0 else [])]
    seconds = statistics.median(times)
    return {"mechanism": spec["mechanism"], "length": spec["length"], "status": "ok",
            "step_s": seconds, "steps_per_s": 1.0 / seconds,
            "tokens_per_s": spec["batch"] * spec["length"] / seconds,
            "memory_mib": memory_mib, "rss_mib": rss_mib, "allocator": allocator,
            "precision": PRECISION.get(device.type, "fp32"),
            "sdpa_backend": backends_text(recorder.backends),
            "parameters": model.num_parameters(),
            "non_embedding_parameters": model.num_parameters(embeddings=False)}


def _run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One cell in a fresh process (the ``speed`` job of
    :mod:`weirdnet_lab.harness.child`), stopped with this one; a failure is a row with its
    status and error."""
    from weirdnet_lab.harness import children

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
    task = TASKS[args.task]
    sizes = dict(task.sizes["cuda" if device.startswith("cuda") else "cpu"])
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    chosen = {key: task.defaults[key] if getattr(args, key) is None else getattr(args, key)
              for key in task.defaults}
    if chosen["steps"] < 1 or chosen["warmup"] < 0 or chosen["ffn_chunk"] < 0:
        raise ValueError("--steps must be >= 1, --warmup and --ffn-chunk >= 0")
    return {"task": args.task, "reference": task.reference, "device": device,
            **sizes, **chosen}


def measure_all(base: dict[str, Any], mechanisms: list[str], lengths: list[int],
                max_step_s: float, rows: list[dict[str, Any]] | None = None
                ) -> list[dict[str, Any]]:
    """Measure every (mechanism, length): one length at a time, shortest first, the
    reference first at each (so a run stopped part-way holds whole ratios), skipping a
    mechanism's longer lengths after a step slower than ``max_step_s`` or after a
    failure, and those predicted (from the growth between its last two lengths) to be
    slower or to exceed the memory budget.

    Each row is appended to ``rows`` (a new list if None) as soon as it is known, so the
    caller keeps the measured ones when a stop signal ends the loop; returns ``rows``.
    """
    from tqdm.auto import tqdm

    rows = [] if rows is None else rows
    order = sorted(mechanisms, key=lambda name: name != base["reference"])
    stopped: dict[str, str] = {}
    done: dict[str, list[dict[str, Any]]] = {name: [] for name in order}
    with tqdm(total=len(order) * len(lengths), unit="cell", dynamic_ncols=True) as bar:
        for length in sorted(lengths):
            for mechanism in order:
                bar.set_postfix_str(f"{mechanism} L={length}")
                rows.append(_measure_or_skip(base, mechanism, length, max_step_s,
                                             stopped, done[mechanism]))
                bar.update(1)
    return rows


def _measure_or_skip(base: dict[str, Any], mechanism: str, length: int, max_step_s: float,
                     stopped: dict[str, str], done: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell's row: measured in a child, or skipped (why in its status).  Updates
    ``stopped`` (mechanism -> why its longer lengths are skipped) and ``done`` (the
    mechanism's measured rows)."""
    why = stopped.get(mechanism) or _predicted_over(done, length, max_step_s,
                                                    base["memory_budget_gib"])
    if why:
        stopped.setdefault(mechanism, why)
        return {"mechanism": mechanism, "length": length, "status": f"skipped ({why})"}
    timeout = 60 + max_step_s * (base["steps"] + base["warmup"] + 2) * 4
    row = _run_child({**base, "mechanism": mechanism, "length": length}, timeout)
    if row["status"] != "ok":
        stopped[mechanism] = f"{row['status'].split(' (')[0]} at L={length}"
    elif row["step_s"] > max_step_s:
        stopped[mechanism] = f"> {max_step_s:g} s/step at L={length}"
    else:
        done.append(row)
    return row


def in_report_order(rows: list[dict[str, Any]], mechanisms: list[str],
                    lengths: list[int], unmeasured: str | None = None
                    ) -> list[dict[str, Any]]:
    """``rows`` by mechanism (in ``mechanisms``' order), then length.  ``unmeasured``:
    the status of a row added for each (mechanism, length) without one (a stopped run),
    else those are left out."""
    have = {(r["mechanism"], r["length"]): r for r in rows}
    out = []
    for mechanism in mechanisms:
        for length in sorted(lengths):
            row = have.get((mechanism, length))
            if row is None and unmeasured is not None:
                row = {"mechanism": mechanism, "length": length, "status": unmeasured}
            if row is not None:
                out.append(row)
    return out


def _predicted_over(done: list[dict[str, Any]], length: int, max_step_s: float,
                    budget_gib: float | None) -> str | None:
    """Why ``length`` would not run, by a power law through the last two measured lengths
    (time and memory each), or None: a step over ``max_step_s`` or a peak RSS over
    ``budget_gib``.

    Each is extrapolated from the larger of its two values.  The time's exponent is
    floored at 0 (a fixed cost may dominate short steps); the memory's at 1, since a
    step's activations (embeddings, each block's input, the logits) grow at least
    linearly with length, while the RSS increase of a short step is a few MiB of
    page-level noise that can even shrink between two lengths."""
    import math

    if len(done) < 2:
        return None
    a, b = done[-2], done[-1]
    lengths_ratio = b["length"] / a["length"]
    grow = math.log(length / b["length"]) / math.log(lengths_ratio)

    def ahead(key: str, least_ratio: float) -> float:
        ratio = max(b[key] / a[key], least_ratio) if a[key] else least_ratio
        return max(b[key], a[key]) * ratio ** grow

    step_s = ahead("step_s", 1.0)
    if step_s > max_step_s:
        return f"predicted {step_s:,.0f} s/step > {max_step_s:g}"
    key = "rss_mib" if b.get("rss_mib") is not None else "memory_mib"
    if budget_gib is not None and b[key] is not None:
        need_gib = ahead(key, lengths_ratio) / 1024
        if need_gib > budget_gib:
            return f"predicted {need_gib:,.1f} GiB > the {budget_gib:g} GiB budget"
    return None


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure every cell, write and print the report (see :mod:`.output`); the exit
    status."""
    from weirdnet_lab.variants import MECHANISMS, get_variant

    task = TASKS[args.task]
    if args.lengths is None:
        args.lengths = list(task.lengths)
    if args.mechanisms is None:
        args.mechanisms = ",".join(task.mechanisms or [m.name for m in MECHANISMS])
    try:
        mechanisms = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
        for name in mechanisms:
            why = get_variant(name).unsupported("lm" if task.lm else "lra")
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
    from weirdnet.run import write_atomic
    from weirdnet_lab.speed_report import draw, markdown

    try:
        base = _resolve(args)
    except ValueError as error:
        print(f"weirdnet bench speed: {error}", file=sys.stderr)
        return 2
    if base["reference"] not in mechanisms:
        mechanisms.append(base["reference"])  # the reference of every ratio
    if TASKS[base["task"]].lm:
        try:  # every model matched before any is timed
            from weirdnet_lab import matching

            for name in mechanisms:
                matching.matched_variant(name, _widths(base))
        except (ValueError, ImportError) as error:
            print(f"weirdnet bench speed: {error}", file=sys.stderr)
            return 2
    rows: list[dict[str, Any]] = []
    command = ["weirdnet", *argv]
    try:
        measure_all(base, mechanisms, args.lengths, base["max_step_seconds"], rows)
    except (Interrupted, KeyboardInterrupt) as stop:
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        if any(row["status"] == "ok" for row in rows):
            _write_partial(base, command, in_report_order(
                rows, mechanisms, args.lengths,
                unmeasured=f"not run (stopped by {signal_name(signum)})"), out, session)
        raise
    result = _result(base, command, in_report_order(rows, mechanisms, args.lengths))
    stem = _report_stem(base)
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
        _remove_stale_partial(out, stem)
        session.kept = "the report was written whole: " + ", ".join(map(str, paths))
    print(text, flush=True)
    output.print_written(paths)
    return 0


def _report_stem(base: dict[str, Any]) -> str:
    """The report files' name before their suffix: e.g. ``speed_lm_cpu``."""
    import torch

    return TASKS[base["task"]].stem + torch.device(base["device"]).type


def _result(base: dict[str, Any], command: list[str], rows: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """The report's JSON: settings, machine (this process's) and rows."""
    import torch

    from weirdnet_lab.harness.machine import machine_info

    allocator = reuse_freed_memory() if base["memory"] == "trace" else \
        "in each measuring process: " + next(
            (r["allocator"] for r in rows if r.get("allocator")), "none ran")
    info = machine_info(torch.device(base["device"]), command, allocator)
    return {"settings": base, "machine": info, "rows": rows}


PARTIAL = ".partial"
"""A stopped run's report is ``<stem>.partial.{json,md}`` beside the full one's names, so
it never replaces a full report."""


def _write_partial(base: dict[str, Any], command: list[str], rows: list[dict[str, Any]],
                   out: Path, session: output.Writing) -> None:
    """Write the cells measured before a stop signal as ``<stem>.partial.{json,md}``
    (written whole; no plot), marked partial, and say so in ``session.kept``."""
    from weirdnet.run import write_atomic
    from weirdnet_lab.speed_report import markdown

    with output.write_whole():
        result = {**_result(base, command, rows), "partial": True}
        measured = sum(row["status"] == "ok" for row in rows)
        stem = _report_stem(base) + PARTIAL
        text = markdown(result, None)
        paths = [out / f"{stem}.json", out / f"{stem}.md"]
        write_atomic(paths[0], json.dumps(result, indent=2) + "\n")
        write_atomic(paths[1], text)
        session.kept = (f"the {measured} cell(s) measured before it were written to "
                        f"{paths[0]} and {paths[1]} (a partial report; any full report "
                        "there is unchanged); run the same command again for all")


def _remove_stale_partial(out: Path, stem: str) -> None:
    """Delete an earlier stopped run's ``<stem>.partial.*`` once a full report replaces it
    (only files this command wrote: a JSON marked partial, and its Markdown)."""
    json_path = out / f"{stem}{PARTIAL}.json"
    try:
        ours = json.loads(json_path.read_text(encoding="utf-8")).get("partial") is True
    except (OSError, ValueError, AttributeError):
        return
    if ours:
        (out / f"{stem}{PARTIAL}.md").unlink(missing_ok=True)
        json_path.unlink()
