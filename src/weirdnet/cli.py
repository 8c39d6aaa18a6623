"""The ``weirdnet`` command line (also ``python -m weirdnet``).

Each subcommand is registered by one function ``_add_<name>(subparsers)`` listed in
:data:`COMMANDS`; it creates its parser and sets ``handler``, a function
``handler(args, argv) -> exit status``.  Heavy imports (torch) happen in the handlers:
building the parser imports no torch (the command modules it reads, ``weirdnet.bench.*``
and ``weirdnet.experiments.*`` included, import torch inside their functions), so
``--help``, ``--version`` and every subcommand's ``--help`` take a fraction of a second
(tests/test_cli_startup.py checks it).
"""

from __future__ import annotations

import argparse
import atexit
import signal
import sys
from collections.abc import Callable

from weirdnet import __version__
from weirdnet._signals import STOP, Interrupted

_FORMATTER = argparse.RawDescriptionHelpFormatter

_SCAN_DESCRIPTION = """\
Benchmark the weighted log-step scan (weirdnet.ops.weird_scan) against PyTorch's
scaled_dot_product_attention (SDPA), side by side in one process.

For every length L and method it reports the median time of an inference forward and of
a forward+backward (all inputs require grad, fixed random grad_out), and the peak extra
memory of one forward+backward (CPU: peak RSS in a fresh child process per row; CUDA:
torch.cuda.max_memory_allocated). Then the ratios SDPA/scan per L and PASS/FAIL of the
targets: fwd+bwd at L=16384 >= 10x faster than SDPA causal, at L=1024 no slower, the
custom-op wrapper at most 5% of the forward at L=1024, and peak memory at L=16384 <= 3x
SDPA causal's (only for lengths that were measured).

Methods: scan (weird_scan causal), scan-kernel (the same kernels called without the
custom op and checks: what the wrapper costs), scan-rev (reverse=True, anti-causal), scan-bidir
(weird_scan_bidirectional: half the channels each way), scan-torch (backend="torch",
the pure-PyTorch fallback), sdpa-causal, sdpa (non-causal); SDPA uses D/64 heads of 64.

glibc is told to keep freed memory in the heap (no mmap/munmap per big tensor) in the
timing process and in each memory child, so timings are not dominated by page faults.

Output: a Markdown report on stdout and in OUT/scan_<device>.md, all raw numbers and
machine info in OUT/scan_<device>.json. Progress goes to stderr. OUT is --out DIR, else
$WEIRDNET_BENCH_DIR, else ~/.cache/weirdnet/bench (a scratch folder); the committed
results are rewritten only with --out benchmarks/results, and a --quick run refuses a
folder that holds a full run's report (unless --force). One run writes into OUT at a
time; Ctrl-C or SIGTERM ends the run without a report (OUT left as it was).

examples:
  weirdnet bench scan                          # full run (a few minutes on CPU)
  weirdnet bench scan --out benchmarks/results # full run, into the committed results
  weirdnet bench scan --lengths 1024 4096 --methods scan,sdpa-causal
  weirdnet bench scan --quick                  # seconds-long smoke run
"""


_MIXERS_DESCRIPTION = """\
Benchmark every registered sequence mixer (weirdnet.layers) as a full layer, with raw
PyTorch scaled_dot_product_attention (SDPA) as the baseline, side by side in one process.

Methods are found in the registry at run time: NAME is a mixer's non-causal form
(build(NAME, D, causal=False)), NAME-causal its causal form; a form whose build raises
ValueError does not exist and is left out. Constructors with a max_len parameter get
max_len=L, with a heads parameter heads=D/head-dim; other options keep their defaults.
sdpa and sdpa-causal are the raw op (no projections) with D/64 heads of 64.

For every length L and method it reports the median time of an inference forward and of
a forward+backward (x and all layer parameters require grad, fixed random grad_out), and
the peak extra memory of one forward+backward (CPU: peak RSS in a fresh child process per
row; CUDA: torch.cuda.max_memory_allocated). Ratios per L compare each method with the
softmax mixer layer and with raw SDPA of the same form. Targets (only for lengths that
were measured): DBA fwd+bwd at L=4096 >= 4x faster than SDPA and with less peak memory,
Relation fwd+bwd at L=16384 >= 20x faster than SDPA (all non-causal; SDPA = the softmax
layer when it was measured, else raw sdpa; the report says which).

Output: a Markdown report on stdout and in OUT/mixers_<device>.md, all raw numbers and
machine info in OUT/mixers_<device>.json. Progress goes to stderr. OUT is --out DIR, else
$WEIRDNET_BENCH_DIR, else ~/.cache/weirdnet/bench (a scratch folder); the committed
results are rewritten only with --out benchmarks/results, and a --quick run refuses a
folder that holds a full run's report (unless --force). One run writes into OUT at a
time; Ctrl-C or SIGTERM ends the run without a report (OUT left as it was).

examples:
  weirdnet bench mixers                        # full run (long on CPU: softmax at 16K)
  weirdnet bench mixers --out benchmarks/results   # full run, into the committed results
  weirdnet bench mixers --lengths 4096 --methods dba,softmax,sdpa
  weirdnet bench mixers --softmax-max-len 4096 # skip the slow quadratic rows above 4K
  weirdnet bench mixers --quick                # seconds-long smoke run
"""

_BENCHMARKS = (
    ("scan", "weird_scan vs SDPA: time and peak memory of forward(+backward)",
     _SCAN_DESCRIPTION),
    ("mixers", "every registered mixer layer vs SDPA: time and peak memory",
     _MIXERS_DESCRIPTION),
)
"""``weirdnet bench`` subcommands: (suite name, help, description)."""


RENAMED = {("bench", "generate"): "bench decode", ("data", "generate"): "data build"}
"""Old spellings still parsed (hidden from --help) for one release, with a note."""


def _note_renamed(argv: list[str]) -> None:
    new = RENAMED.get(tuple(argv[:2]))
    if new is not None:
        print(f"note: `weirdnet {' '.join(argv[:2])}` is now `weirdnet {new}`; the old "
              "spelling goes in the next release", file=sys.stderr)


# Benchmarks with their own command module (DESCRIPTION, optional EXAMPLES,
# add_arguments(parser), run(args, argv)): name, one-line help, module.
_COMMAND_BENCHMARKS = (
    ("decode", "tokens/s of cached decoding vs context: Weird-Net A and B vs softmax",
     "weirdnet.bench.decode"),
    ("speed", "training steps/s and peak memory of each model vs the Transformer",
     "weirdnet.bench.speed"),
    ("compile", "training steps/s eager vs torch.compile(fullgraph=True)",
     "weirdnet.bench.compile"),
    ("lm", "byte-level LMs trained for the same minutes: quality per CPU-minute",
     "weirdnet.experiments.lm_compute"),
    ("recall", "recall diagnostics (MQAR, selective copying, induction) vs width",
     "weirdnet.experiments.recall"),
    ("suite", "the papers' tables: every mechanism on every task, one budget",
     "weirdnet.experiments.command"),
    ("gpu", "the GPU path in one command: tests, scan, models, decoding, suite pilot",
     "weirdnet.bench.gpu"),
)


def _add_bench(subparsers: argparse._SubParsersAction) -> None:
    """``weirdnet bench <benchmark>``, one subcommand per suite of :data:`_BENCHMARKS`."""
    bench = subparsers.add_parser(
        "bench", help="run a benchmark", formatter_class=_FORMATTER,
        description="Run one of weirdnet's benchmarks; see `weirdnet bench BENCHMARK --help`.",
    )
    benchmarks = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    from weirdnet.bench.opbench import get_opbench
    from weirdnet.bench.runner import add_arguments

    for name, help_text, description in _BENCHMARKS:
        parser = benchmarks.add_parser(name, help=help_text, description=description,
                                       formatter_class=_FORMATTER)
        add_arguments(parser, get_opbench(name))
        parser.set_defaults(handler=_run_bench)
    import importlib

    from weirdnet._argparse import hidden_alias

    for name, help_text, module_name in _COMMAND_BENCHMARKS:
        module = importlib.import_module(module_name)
        parser = benchmarks.add_parser(
            name, help=help_text, description=module.DESCRIPTION,
            epilog=getattr(module, "EXAMPLES", None), formatter_class=_FORMATTER)
        module.add_arguments(parser)
        parser.set_defaults(handler=module.run)
    hidden_alias(benchmarks, "generate", "decode")


def _run_bench(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.bench import runner
    from weirdnet.bench.opbench import get_opbench

    return runner.run(get_opbench(args.benchmark), args, argv)


def _add_data(subparsers: argparse._SubParsersAction) -> None:
    """``weirdnet data <subcommand>`` (see :mod:`weirdnet.data.commands`)."""
    from weirdnet.data.commands import add_data_command

    add_data_command(subparsers, _FORMATTER)


_INFO_DESCRIPTION = """\
Print a model's structure (mixer of every layer, widths, lengths) and its parameter count
by part, built on the meta device (no memory is allocated, even for the 700M presets).
For the GPT-2-size presets it compares the count with Weird-Net Table VII and explains
the difference.

TARGET is a preset name (see --list) or a directory written by model.save().

examples:
  weirdnet info --list
  weirdnet info weirdnet-small
  weirdnet info lra-listops
  weirdnet info runs/my-run/best
"""


def _add_info(subparsers: argparse._SubParsersAction) -> None:
    """``weirdnet info PRESET|DIR``: structure and parameter count."""
    parser = subparsers.add_parser("info", help="describe a model preset or a saved model",
                                   description=_INFO_DESCRIPTION, formatter_class=_FORMATTER)
    parser.add_argument("target", nargs="?", metavar="TARGET",
                        help="preset name or saved-model directory")
    parser.add_argument("--list", action="store_true", help="list the presets and exit")
    parser.set_defaults(handler=_run_info)


def _run_info(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.models import PRESETS
    from weirdnet.models.info import TargetError, describe_target

    if args.list or args.target is None:
        width = max(map(len, PRESETS))
        for name, preset in PRESETS.items():
            print(f"{name:<{width}}  {preset.model:<20} {preset.source}")
        return 0
    try:  # missing paths, files, damaged or foreign models, unknown presets: one line
        text = describe_target(args.target)
    except TargetError as error:
        print(f"weirdnet info: {error}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _add_configs(subparsers: argparse._SubParsersAction) -> None:
    """``weirdnet configs``: the training configs shipped with the package."""
    parser = subparsers.add_parser(
        "configs", help="list the training configs shipped with weirdnet",
        description="List the training configs shipped with weirdnet, each with the paper "
                    "table it follows. Train one by name from any directory: `weirdnet "
                    "train lra/listops-cpu`.", formatter_class=_FORMATTER)
    parser.add_argument("pattern", nargs="?", default="",
                        help="only names containing this text (e.g. lra/, -cpu)")
    parser.add_argument("--path", action="store_true",
                        help="print the folder that holds them and exit")
    parser.set_defaults(handler=_run_configs)


def _run_configs(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.train.named_configs import config_dir, summaries
    from weirdnet.typed_config import ConfigError

    try:
        if args.path:
            print(config_dir())
            return 0
        chosen = [c for c in summaries() if args.pattern in c.name]
    except ConfigError as error:
        print(f"weirdnet configs: {error}", file=sys.stderr)
        return 2
    if not chosen:
        print(f"weirdnet configs: no config name contains {args.pattern!r}", file=sys.stderr)
        return 2
    width = max(len(c.name) for c in chosen)
    for config in chosen:
        print(f"{config.name:<{width}}  {config.summary}")
    return 0


_EXPORT_HF_DESCRIPTION = """\
Export a trained weirdnet language model as a Hugging Face model folder (needs the hf
extra: pip install "weirdnet[hf]"). SOURCE is a run directory (its best/ model), its best/,
a checkpoints/step-* directory or a folder written by model.save(). OUT gets config.json,
model.safetensors (the same weights, the same names), generation_config.json, the byte
tokenizer, a README and the two small remote-code modules, written into a temporary folder
and renamed into place. OUT loads with

  import weirdnet.hf; AutoModelForCausalLM.from_pretrained(OUT)
  AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)   # no import first
  AutoTokenizer.from_pretrained(OUT)
  weirdnet.models.load(OUT)

An existing non-empty OUT is replaced only with --overwrite, and only when it holds an
earlier export and nothing else.

examples:
  weirdnet export-hf runs/quickstart hf/quickstart
  lm_eval --model hf --model_args pretrained=hf/quickstart,trust_remote_code=True ...
"""

_HARNESS_DESCRIPTION = """\
Write two offline lm-evaluation-harness tasks into DIR (YAML + JSON lines), built from the
held-out test split of the python-stdlib corpus: weirdnet_stdlib_nextline (multiple
choice: the true next line of Python source among four; acc, acc_norm) and
weirdnet_stdlib_bpb (rolling log-likelihood of held-out passages; bits_per_byte). Needs
the hf extra. Six lines of context often exceed a small model's context, and lm_eval
then cuts the start of the request without a word: --max-len (the model's max_len)
keeps only the whole lines that fit.

examples:
  weirdnet harness-tasks tasks/ --max-len 256   # sized to the quickstart model
  lm_eval --model hf --model_args pretrained=hf/quickstart,trust_remote_code=True \\
      --include_path tasks/ --tasks weirdnet_stdlib_nextline,weirdnet_stdlib_bpb
  python -m weirdnet.hf.harness --model hf --model_args pretrained=hf/quickstart \\
      --include_path tasks/ --tasks weirdnet_stdlib_nextline   # no trust_remote_code
"""


def _add_hf(subparsers: argparse._SubParsersAction) -> None:
    """``weirdnet export-hf`` and ``weirdnet harness-tasks`` (see :mod:`weirdnet.hf`)."""
    export = subparsers.add_parser("export-hf", help="export an LM as a Hugging Face folder",
                                   description=_EXPORT_HF_DESCRIPTION,
                                   formatter_class=_FORMATTER)
    export.add_argument("source", metavar="SOURCE", help="run, best/, checkpoint or model dir")
    export.add_argument("out", metavar="OUT", help="the folder to write")
    export.add_argument("--overwrite", action="store_true",
                        help="replace OUT if it holds an earlier export")
    export.set_defaults(handler=_run_export_hf)
    tasks = subparsers.add_parser("harness-tasks", help="write offline lm_eval tasks",
                                  description=_HARNESS_DESCRIPTION, formatter_class=_FORMATTER)
    tasks.add_argument("directory", metavar="DIR", help="folder for the task files")
    tasks.add_argument("--items", type=int, default=500,
                       help="multiple-choice items (500)")
    tasks.add_argument("--passages", type=int, default=50, help="bits-per-byte passages (50)")
    tasks.add_argument("--seed", type=int, default=0, help="draw of the items (0)")
    tasks.add_argument("--max-len", type=int, default=None, metavar="BYTES",
                       help="the model's context in bytes (its max_len): each multiple-"
                            "choice item keeps only as many whole context lines as fit "
                            "beside its longest choice, so lm_eval cuts no request (default: "
                            "6 lines, whatever their length)")
    tasks.set_defaults(handler=_run_harness_tasks)


def _run_export_hf(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.models.base import CheckpointError

    try:
        from weirdnet.hf import export_hf

        out = export_hf(args.source, args.out, overwrite=args.overwrite)
    except (ImportError, CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"weirdnet export-hf: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out}: load it with AutoModelForCausalLM.from_pretrained({str(out)!r}) "
          "after `import weirdnet.hf`, or with trust_remote_code=True")
    return 0


def _run_harness_tasks(args: argparse.Namespace, argv: list[str]) -> int:
    from pathlib import Path

    if args.items < 1 or args.passages < 1:
        print("weirdnet harness-tasks: --items and --passages must be >= 1", file=sys.stderr)
        return 2
    directory = Path(args.directory)
    if directory.exists() and not directory.is_dir():
        print(f"weirdnet harness-tasks: {directory} is a file; DIR must be a folder (new or "
              "existing)", file=sys.stderr)
        return 2
    try:
        from weirdnet.hf.harness import write_tasks

        written = write_tasks(directory, items=args.items, passages_count=args.passages,
                              seed=args.seed, max_len=args.max_len)
    except (ImportError, OSError, ValueError) as error:
        print(f"weirdnet harness-tasks: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def _add_training(subparsers: argparse._SubParsersAction) -> None:
    """``weirdnet train|eval|generate|plot`` (see :mod:`weirdnet.train.commands`)."""
    from weirdnet.train import commands

    for add in (commands.add_train, commands.add_eval, commands.add_generate,
                commands.add_plot):
        add(subparsers, _FORMATTER)


COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_training, _add_configs, _add_bench, _add_data, _add_info, _add_hf)
"""Functions registering one subcommand each, in ``--help`` order."""


def build_parser() -> argparse.ArgumentParser:
    """The ``weirdnet`` parser with every subcommand of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="weirdnet", formatter_class=_FORMATTER,
        description="weirdnet: fast, exact, numerically stable long-sequence layers "
                    "(Weird-/AIB-attention).",
        epilog="Run `weirdnet COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"weirdnet {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the command; its exit status.

    The SIGINT/SIGTERM handlers come first, before the parser is built: a stop signal at
    any moment ends the command with one line on stderr and exit status 130/143, never a
    traceback.  Called as the program (``argv`` None: the ``weirdnet`` script, ``python -m
    weirdnet``), a signal that arrives after the command has returned still gives one
    line and 130/143 (:meth:`~weirdnet._signals.StopRequest.exit_on_signal`), and one in
    the interpreter's last moments is ignored (the command has ended with its own status);
    called with ``argv`` (tests, other code), the handlers that were there before are put
    back.
    """
    installed = STOP.install()
    program = argv is None
    if program:  # runs after every exit function registered later (torch's included)
        atexit.register(STOP.ignore)
    argv = list(sys.argv[1:] if argv is None else argv)
    where = ["weirdnet"]  # "weirdnet COMMAND" once the command is known
    try:
        return _run(argv, where)
    except (Interrupted, KeyboardInterrupt) as stop:
        STOP.hold()  # a second signal while the line is written is only recorded
        if not isinstance(stop, Interrupted):
            stop = Interrupted(signal.SIGINT)
        if not stop.quiet:
            _close_progress_bars()
            print(f"{where[0]}: {stop.message}", file=sys.stderr, flush=True)
        return stop.exit_status
    finally:
        if installed and program:
            STOP.exit_on_signal(where[0])
        elif installed:
            STOP.uninstall()
            STOP.reset()


def _close_progress_bars() -> None:
    """Close the tqdm bars a stopped command left open (ours or a library's, such as
    ``transformers``' "Writing model shards"), so the last line starts a line of its own."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        try:
            bar.close()
        except Exception:  # a bar half torn down by the signal: its line stays as it is
            pass


def _run(argv: list[str], where: list[str]) -> int:
    """Parse ``argv`` and run its command's handler (``where[0]`` becomes the command's
    name for the last line); the handler's exit status."""
    args = build_parser().parse_args(argv)
    where[0] = f"weirdnet {args.command}"
    _note_renamed(argv)
    try:
        return args.handler(args, argv)
    except BrokenPipeError:  # e.g. `weirdnet info --list | head`
        sys.stderr.close()
        return 0
