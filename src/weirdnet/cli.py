"""The ``weirdnet`` command line (also ``python -m weirdnet``).

Each subcommand is registered by one function ``_add_<name>(subparsers)`` listed in
:data:`COMMANDS`; it creates its parser and sets ``handler``, a function
``handler(args, argv) -> exit status``.  Heavy imports (torch) happen in the handlers, so
``--help`` and ``--version`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from weirdnet import __version__

_FORMATTER = argparse.RawDescriptionHelpFormatter

_SCAN_DESCRIPTION = """\
Benchmark the weighted log-step scan (weirdnet.ops.weird_scan) against PyTorch's
scaled_dot_product_attention (SDPA), side by side in one process.

For every length L and method it reports the median time of an inference forward and of
a forward+backward (all inputs require grad, fixed random grad_out), and the peak extra
memory of one forward+backward (CPU: peak RSS in a fresh child process per row; CUDA:
torch.cuda.max_memory_allocated). Then the ratios SDPA/scan per L and PASS/FAIL of the
targets: fwd+bwd at L=16384 >= 10x faster than SDPA causal, at L=1024 no slower, and
peak memory at L=16384 <= 3x SDPA causal's (only for lengths that were measured).

Methods: scan (weird_scan causal), scan-rev (reverse=True, anti-causal), scan-bidir
(weird_scan_bidirectional: half the channels each way), scan-torch (backend="torch",
the pure-PyTorch fallback), sdpa-causal, sdpa (non-causal); SDPA uses D/64 heads of 64.

glibc is told to keep freed memory in the heap (no mmap/munmap per big tensor) in the
timing process and in each memory child, so timings are not dominated by page faults.

Output: a Markdown report on stdout and in OUT/scan_<device>.md, all raw numbers and
machine info in OUT/scan_<device>.json. Progress goes to stderr.

examples:
  weirdnet bench scan                          # full run (a few minutes on CPU)
  weirdnet bench scan --lengths 1024 4096 --methods scan,sdpa-causal
  weirdnet bench scan --quick --out /tmp/bench # seconds-long smoke run
"""


def _add_bench(subparsers: argparse._SubParsersAction) -> None:
    """``weirdnet bench <benchmark>``."""
    bench = subparsers.add_parser(
        "bench", help="run a benchmark", formatter_class=_FORMATTER,
        description="Run one of weirdnet's benchmarks; see `weirdnet bench BENCHMARK --help`.",
    )
    benchmarks = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    scan = benchmarks.add_parser(
        "scan", help="weird_scan vs SDPA: time and peak memory of forward(+backward)",
        description=_SCAN_DESCRIPTION, formatter_class=_FORMATTER,
    )
    from weirdnet.bench.scan import add_arguments

    add_arguments(scan)
    scan.set_defaults(handler=_run_bench_scan)


def _run_bench_scan(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.bench import scan

    return scan.run(args, argv)


COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (_add_bench,)
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
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the command; its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    return args.handler(args, argv)
