"""Running a benchmark suite: options, plan, timings, memory children, report.

For every length L and method of a :class:`~.opbench.OpBench` it measures, side by side in
one process, the median time of an inference forward and of a forward+backward, and then
the peak extra memory of one forward+backward (CPU: a fresh child process per row, see
:mod:`.memory`; CUDA: the caching allocator's peak).  It prints a Markdown report
(results, ratios, targets) and writes it with the raw numbers to
``<out>/<suite>_<device>.md`` and ``.json`` (see :mod:`.output`: where, one writer, no
quick run over full results, stop signals).
"""

from __future__ import annotations

import argparse
import gc
from dataclasses import asdict, dataclass
from pathlib import Path

from weirdnet.cli import check_seed
from weirdnet_lab.harness import output
from weirdnet_lab.harness.arguments import at_least, positive, positive_list
from weirdnet_lab.opbench.spec import OpBench

QUICK = {"batch": 1, "dim": 32, "lengths": (64, 128), "repeats": 1}
"""--quick shapes; --quick also runs 1 torch thread (tiny ops gain nothing from more)."""
DEFAULTS = {"batch": 4, "dim": 256, "repeats": None}


def _method_list(suite: OpBench):
    """argparse ``type`` parsing ``"a,b"`` into method names of ``suite``, checking each."""

    def parse(text: str) -> list[str]:
        names = [x.strip() for x in text.split(",") if x.strip()]
        known = suite.method_names()
        unknown = [n for n in names if n not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(known)}")
        return names

    return parse


def add_arguments(p: argparse.ArgumentParser, suite: OpBench) -> None:
    """Options of ``weirdnet bench <suite>``."""
    lengths = ",".join(map(str, suite.default_lengths))
    methods_help = suite.methods_help or (
        f"from {', '.join(suite.default_methods or ())} (default: all)")
    p.add_argument("--lengths", type=positive_list, nargs="+", metavar="L",
                   help=f"sequence lengths, space or comma separated (default: {lengths})")
    p.add_argument("--batch", type=positive, help="batch size B (default: 4)")
    p.add_argument("--dim", type=positive, help="channels D (default: 256)")
    p.add_argument("--head-dim", type=positive, default=64,
                   help="SDPA head width; SDPA runs D / head-dim heads (default: 64, i.e. "
                        "4 heads for D=256; one head of width D when D is smaller)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="input dtype (default: float32)")
    p.add_argument("--device", choices=("cpu", "cuda"),
                   help="device (default: cuda if available, else cpu)")
    p.add_argument("--methods", type=_method_list(suite), nargs="+", metavar="NAME",
                   help=f"methods to compare, space or comma separated, {methods_help}")
    p.add_argument("--repeats", type=positive,
                   help="timed runs per measurement, the median is reported (default: 15 for "
                        "L <= 2048, 7 for L <= 4096, 3 above)")
    p.add_argument("--warmup", type=at_least(0), default=1,
                   help="untimed runs before each timing (default: 1)")
    if suite.cap is not None:
        p.add_argument(suite.cap.option, dest="cap_max_len", type=at_least(0), metavar="L",
                       default=suite.cap.default, help=suite.cap.help)
    if suite.variants is not None:
        v = suite.variants
        p.add_argument(v.option, dest="variant", choices=v.choices, default=v.default,
                       help=v.help)
    p.add_argument("--threads", type=positive,
                   help="torch threads (default: torch's default); memory children use the same")
    p.add_argument("--no-memory", dest="memory", action="store_false",
                   help="skip the peak-memory measurement")
    p.add_argument("--mem-jobs", type=positive,
                   help="CPU memory children run at once after all timings; they measure "
                        "their own RSS, so this changes no number (default: 1, --quick: 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    output.add_out_arguments(p, f"{suite.name}_<device>.md and .json", quick="--quick")
    p.add_argument("--quick", action="store_true",
                   help="tiny smoke run: B=1, D=32, L in {64, 128}, 1 timed run, 1 thread, "
                        "2 memory jobs (explicit options still win); refuses a folder that "
                        "holds a full run's report unless --force")
    p.add_argument("--check-targets", action="store_true",
                   help="exit with status 1 if a measured target fails")


@dataclass
class Config:
    """Resolved settings of one benchmark run.

    ``cap_max_len``: longest L of the suite's capped methods (0: no cap; see ``OpBench.cap``).
    """

    batch: int
    dim: int
    head_dim: int
    heads: int
    lengths: list[int]
    methods: list[str]
    dtype: str
    device: str
    repeats: int | None
    warmup: int
    cap_max_len: int
    threads: int
    memory: bool
    mem_jobs: int
    seed: int
    memory_how: str = ""
    variant: str = ""


def _flatten(values: list[list] | None) -> list | None:
    return None if values is None else [x for group in values for x in group]


def _width(args: argparse.Namespace) -> tuple[int, int]:
    """(D, head dim) of the run; BenchError when D is not a multiple of the head dim."""
    dim = args.dim or (QUICK if args.quick else DEFAULTS)["dim"]
    head_dim = min(args.head_dim, dim)
    if dim % head_dim:
        raise output.BenchError(f"--dim {dim} is not a multiple of --head-dim {head_dim}")
    return dim, head_dim


def check_arguments(args: argparse.Namespace) -> None:
    """BenchError (one line) for the arguments no run can take, before the output folder
    is touched: a width D that the head dim does not divide, a seed over 64 bits."""
    _width(args)
    try:
        check_seed(args.seed)
    except ValueError as error:
        raise output.BenchError(str(error)) from None


def resolve_config(args: argparse.Namespace, suite: OpBench) -> Config:
    """Defaults (or the ``--quick`` ones) for every option not given."""
    import torch

    base = QUICK if args.quick else {**DEFAULTS, "lengths": suite.default_lengths}
    dim, head_dim = _width(args)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    default_methods = suite.default_methods or suite.method_names()
    methods = _flatten(args.methods) or list(default_methods)
    variant = getattr(args, "variant", "") or ""
    if suite.variants is not None:
        methods = suite.variants.expand(methods, suite.method_names(), variant)
    return Config(
        batch=args.batch or base["batch"], dim=dim, head_dim=head_dim, heads=dim // head_dim,
        lengths=_flatten(args.lengths) or list(base["lengths"]),
        methods=methods, dtype=args.dtype,
        device=device, repeats=args.repeats or base["repeats"], warmup=args.warmup,
        cap_max_len=getattr(args, "cap_max_len", 0) or 0,
        threads=args.threads or (1 if args.quick else torch.get_num_threads()),
        memory=args.memory, mem_jobs=args.mem_jobs or (2 if args.quick else 1), seed=args.seed,
        variant=variant,
    )


def repeats_for(config: Config, L: int) -> int:
    """Timed runs at length ``L``: ``--repeats``, else fewer for long (slow) lengths."""
    if config.repeats:
        return config.repeats
    return 15 if L <= 2048 else 7 if L <= 4096 else 3


def plan(config: Config, suite: OpBench) -> tuple[list[tuple[str, int]], list[str]]:
    """(method, L) pairs to measure, in order, and notes on what was left out.

    Methods that do not exist at the configured width (``Method.missing``) are left out;
    capped methods (the slow ones, see ``OpBench.cap``) run only up to the cap.
    """
    pairs, notes = [], []
    for name in config.methods:
        method = suite.method(name)
        reason = method.missing(config.dim, config.head_dim, max(config.lengths))
        if reason:
            notes.append(f"{method.label} not run: {reason}")
            continue
        capped = method.capped and suite.cap is not None and config.cap_max_len > 0
        kept = [L for L in config.lengths if not capped or L <= config.cap_max_len]
        pairs += [(name, L) for L in kept]
        if len(kept) < len(config.lengths):
            skipped = [L for L in config.lengths if L not in kept]
            notes.append(f"{method.label} not run at L={skipped} "
                         f"({suite.cap.option} {config.cap_max_len}).")
    order = {L: i for i, L in enumerate(config.lengths)}
    pairs.sort(key=lambda p: order[p[1]])  # stable: methods keep their order per length
    return pairs, notes


def _empty_row(suite: OpBench, name: str, L: int, repeats: int) -> dict:
    return {"method": name, "label": suite.method(name).label, "L": L, "repeats": repeats,
            "fwd_ms": None, "fwdbwd_ms": None, "fwd_times_ms": [], "fwdbwd_times_ms": [],
            "mem_mib": None, "memory": None, "error": None}


def _prepare_row(config: Config, suite: OpBench, name: str, L: int, progress):
    """(row, case): the row of one method at one length and its built inputs (None, with
    the reason in ``row["error"]``, when the method cannot run)."""
    import torch

    from weirdnet_lab.opbench.methods import Shape

    method, device = suite.method(name), torch.device(config.device)
    row = _empty_row(suite, name, L, repeats_for(config, L))
    shape = Shape(config.batch, L, config.dim, config.head_dim)
    if method.options is not None:
        row["options"] = method.options(shape)
    reason = method.available()
    if reason:
        row["error"] = reason
        progress.done(f"{name} L={L}", f"unavailable ({reason})")
        progress.skip(1)
        return row, None
    try:
        return row, method.build(shape, getattr(torch, config.dtype), device, config.seed)
    except Exception as exc:  # noqa: BLE001 - one failing row must not stop the run
        row["error"] = f"{type(exc).__name__}: {exc}"
        progress.done(f"{name} L={L}", f"error: {row['error']}")
        progress.skip(1)
        return row, None


def _fail(row: dict, exc: Exception, what: str, progress, left: int) -> None:
    row["error"] = f"{type(exc).__name__}: {exc}"
    progress.done(what, f"error: {row['error']}")
    progress.skip(left)


def _time_length(config: Config, suite: OpBench, names: list[str], L: int, progress
                 ) -> list[dict]:
    """Timings (and, on CUDA, memory) of every method at one length, interleaved.

    The timed runs of the methods alternate (round robin, the order reversed every other
    round), so a change of machine load during the measurement reaches every method alike
    and the ratios stay fair; each method first gets its warm-up runs.
    """
    import torch

    from weirdnet_lab.harness import memory
    from weirdnet_lab.opbench.methods import forward_backward_step, forward_step

    device = torch.device(config.device)
    prepared = [_prepare_row(config, suite, name, L, progress) for name in names]
    rows = [row for row, _ in prepared]
    live = [(row, case) for row, case in prepared if case is not None]
    try:
        for key, make_step in (("fwd", forward_step),
                               ("fwdbwd", forward_backward_step)):
            label = "fwd" if key == "fwd" else "fwd+bwd"
            steps = []
            for row, case in live:
                if row["error"] is None:
                    progress.start(f"{row['method']} L={L} {label}")
                    steps.append((row, make_step(case)))
            _interleaved(steps, key, label, device, config.warmup, progress,
                         left=1 if key == "fwd" else 0)
        if config.memory and device.type == "cuda":
            for row, case in live:
                if row["error"] is None:
                    for t in case.inputs:  # the baseline must not hold the last grads
                        t.grad = None
                    row["memory"] = memory.measure_cuda(
                        forward_backward_step(case), device)
                    row["mem_mib"] = row["memory"]["extra_mib"]
    finally:
        live = prepared = steps = None  # free the inputs before the next length
        gc.collect()
    return rows


def _interleaved(steps: list, key: str, label: str, device, warmup: int, progress,
                 left: int) -> None:
    """Time each (row, step) ``row["repeats"]`` times in alternating order; store the
    times and medians under ``key``; a step that raises marks its row failed."""
    from weirdnet_lab.harness import timing

    running = []
    for row, step in steps:
        try:
            timing.time_step(step, device, 0, warmup)
            running.append((row, step))
        except Exception as exc:  # noqa: BLE001
            _fail(row, exc, f"{row['method']} L={row['L']} {label}", progress, left)
    repeats = max((row["repeats"] for row, _ in running), default=0)
    for rnd in range(repeats):
        for row, step in (running if rnd % 2 == 0 else running[::-1]):
            if row["error"] is not None:
                continue
            try:
                row[f"{key}_times_ms"] += [1000.0 * t for t in
                                           timing.time_step(step, device, 1, 0)]
            except Exception as exc:  # noqa: BLE001
                _fail(row, exc, f"{row['method']} L={row['L']} {label}", progress, left)
    for row, _ in running:
        if row["error"] is None:
            times = row[f"{key}_times_ms"]
            row[f"{key}_ms"] = timing.median_ms([t / 1000.0 for t in times])
            progress.done(f"{row['method']} L={row['L']} {label}",
                          f"{row[f'{key}_ms']:.2f} ms (median of {len(times)})")


def _cpu_memory(config: Config, suite: OpBench, rows: list[dict], progress) -> None:
    """Fill ``mem_mib`` of every error-free row from a child process per row (up to
    ``mem_jobs`` at once; a stop signal stops them, see :mod:`.children`)."""
    from weirdnet_lab.harness import children, memory

    todo = [r for r in rows if r["error"] is None]
    commands = [memory.child_command(r["method"], config.batch, r["L"], config.dim,
                                     config.head_dim, config.dtype, config.threads,
                                     config.seed, suite=suite.name) for r in todo]
    progress.skip(len(rows) - len(todo))
    if config.mem_jobs <= 1:
        for row, command in zip(todo, commands, strict=True):
            progress.start(f"{row['method']} L={row['L']} memory")
            _record_memory(row, memory.measure_cpu_in_child(command), progress)
        return
    children.run_all(
        commands, config.mem_jobs,
        lambda i, result: _record_memory(todo[i], memory.child_result(result), progress),
        timeout_s=memory.CHILD_TIMEOUT_S, env=memory.child_env())


def _record_memory(row: dict, result: dict, progress) -> None:
    """Store a memory child's ``result`` in ``row`` and report it."""
    row["memory"] = result
    what = f"{row['method']} L={row['L']} memory"
    if "error" in result:
        progress.done(what, result["error"])
        return
    row["mem_mib"] = result["extra_mib"]
    progress.done(what, f"{row['mem_mib']:.1f} MiB")


def _memory_notes(rows: list[dict]) -> list[str]:
    notes = []
    for r in rows:
        mem = r["memory"] or {}
        if "error" in mem:
            notes.append(f"{r['label']} L={r['L']}: memory not measured: {mem['error']}")
        elif mem.get("baseline_is_high_water") is False:
            notes.append(f"{r['label']} L={r['L']}: the child's high-water mark "
                         f"({mem['high_water_before_bytes']} B) exceeded its baseline "
                         f"({mem['baseline_bytes']} B); memory figure is unreliable.")
        if r["error"]:
            notes.append(f"{r['label']} L={r['L']}: {r['error']}")
    return notes


def _load_notes(load: list[float] | None, usage: dict | None) -> list[str]:
    """Warnings when other processes used the CPU before or during the run."""
    notes = []
    if load is not None and load[0] >= 0.5:
        notes.append(f"1-minute load average was {load[0]:.2f} when the run started: other "
                     "processes were using the CPU, so timings may be disturbed.")
    if usage is not None and usage["other_processes_cores"] + usage["steal_cores"] >= 0.05:
        notes.append(f"During the run other processes kept {usage['other_processes_cores']:.2f} "
                     f"cores busy on average (steal: {usage['steal_cores']:.2f}); timings may "
                     "be disturbed.")
    return notes


def _memory_how(config: Config) -> str:
    if not config.memory:
        return "not measured (--no-memory)"
    if config.device == "cuda":
        return "torch.cuda.max_memory_allocated during one fwd+bwd - allocated before it"
    return ("peak RSS (VmHWM, reset after the baseline) - RSS after allocating inputs and "
            "grad_out (the baseline), in a fresh child process per row")


def run(suite: OpBench, args: argparse.Namespace, argv: list[str]) -> int:
    """Run ``suite`` as described by ``args``; ``argv`` is recorded as the command line.

    Prints the Markdown report, writes ``<suite>_<device>.md``/``.json`` into the output
    folder (:func:`.output.out_dir` of ``args.out``) and returns the exit status (1 only
    with ``--check-targets`` and a failed target; 2 when the folder is busy, or holds a
    full report and this is a ``--quick`` run without ``--force``).
    """
    out = output.out_dir(args.out)

    def refuse() -> None:
        if args.quick:
            output.refuse_quick_over_full(output.full_reports(out, suite.name), "--quick",
                                          args.force)

    try:
        check_arguments(args)
        refuse()
        with output.writing(out, f"weirdnet bench {suite.name}") as session:
            refuse()  # again, now that no one else can write there
            return _run(suite, args, argv, out, session)
    except output.BenchError as error:
        return output.fail(error)


def _run(suite: OpBench, args: argparse.Namespace, argv: list[str], out: Path,
         session: output.Writing) -> int:
    import torch

    from weirdnet_lab.harness import alloc, machine
    from weirdnet_lab.harness.contention import CpuMeter

    load_at_start, meter = machine.load_average(), CpuMeter.start()
    allocator = alloc.reuse_freed_memory()
    config = resolve_config(args, suite)
    config.memory_how = _memory_how(config)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        rows, notes = _measure(config, suite)
    finally:
        torch.set_num_threads(previous_threads)
    info = machine.machine_info(torch.device(config.device), ["weirdnet", *argv], allocator)
    info["torch_threads"] = config.threads
    info["load_average_at_start"] = load_at_start
    info["cpu_use_during_run"] = usage = meter.report()
    doc = _document(config, suite, info, rows, notes + _load_notes(load_at_start, usage),
                    quick=args.quick)
    return _emit(doc, suite, out, args.check_targets, session)


def _measure(config: Config, suite: OpBench) -> tuple[list[dict], list[str]]:
    """All rows of the run (timings, then CPU memory) and notes on skipped ones."""
    from weirdnet_lab.harness.progress import Progress

    pairs, notes = plan(config, suite)
    cpu_mem = config.memory and config.device == "cpu"
    progress = Progress(len(pairs) * (3 if cpu_mem else 2))
    try:
        rows = []
        for L in dict.fromkeys(L for _, L in pairs):
            names = [name for name, length in pairs if length == L]
            rows += _time_length(config, suite, names, L, progress)
        if cpu_mem:
            _cpu_memory(config, suite, rows, progress)
    finally:
        progress.close()
    return rows, notes


def _document(config: Config, suite: OpBench, info: dict, rows: list[dict],
              notes: list[str], quick: bool = False) -> dict:
    """The JSON document of the run: machine, config, rows, ratios, targets, notes;
    ``quick``: a ``--quick`` run (:mod:`.output` never lets one replace a full report)."""
    from weirdnet_lab.opbench import analysis

    ratios = analysis.compute_ratios(rows, suite)
    return {
        "benchmark": suite.name,
        "quick": quick,
        "machine": info,
        "config": asdict(config),
        "results": rows,
        "ratios": ratios,
        "targets": analysis.evaluate_targets(ratios, suite),
        "notes": notes + _memory_notes(rows),
    }


def _emit(doc: dict, suite: OpBench, out: Path, check_targets: bool,
          session: output.Writing | None = None) -> int:
    """Write (whole: a stop signal waits) and print the report; the exit status."""
    from weirdnet_lab.opbench import report

    markdown = report.render_markdown(doc, suite)
    name = f"{suite.name}_{doc['machine']['device'].split(':')[0]}"
    with output.write_whole():
        paths = report.write_report(out, name, doc, markdown)
        if session is not None:
            session.kept = f"the report was written whole: {paths[0]} and {paths[1]}"
    print(markdown, end="", flush=True)
    output.print_written(paths)
    failed = any(not t["passed"] for t in doc["targets"])
    return 1 if check_targets and failed else 0
