"""``weirdnet bench scan``: speed and memory of ``weird_scan`` against SDPA, in one run.

For every length L and method it measures, side by side in one process, the median time
of an inference forward and of a forward+backward, and then the peak extra memory of one
forward+backward (CPU: a fresh child process per row; CUDA: the caching allocator's peak)
(the machinery is :mod:`.runner`'s).  It prints a Markdown report (results, ratios,
targets) and writes it with the raw numbers to ``<out>/scan_<device>.md`` and ``.json``.

This module defines the suite: its methods (weird_scan causal, reverse, bidirectional,
the causal kernels called without the custom op, the pure-PyTorch fallback, SDPA causal
and non-causal), lengths, ratios and targets.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from weirdnet_lab.opbench import runner
from weirdnet_lab.opbench.spec import Cap, OpBench, Ratio, Target, Variants

if TYPE_CHECKING:  # pragma: no cover
    from weirdnet_lab.opbench.methods import Method

DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
LOG_W = Variants(
    "--log-w", {"typical": "-typical", "wide": ""}, "both",
    "input class of the weird_scan methods' log_w = cumsum(step N(0, 1)) over the levels: "
    "typical (step 0.1), wide (step 1, the default initialisation of WeirdAttention: "
    "log-weights spread over tens, the backward's running-max form) or both (default: "
    "both; each scan method NAME runs as NAME-typical and NAME; ratios and targets use "
    "the wide rows, but for the typical class's backward cost)")
LOG_W_STEP = {"typical": 0.1, "wide": 1.0}
DEFAULT_METHODS = ("scan", "scan-kernel", "scan-rev", "scan-bidir", "scan-torch", "sdpa-causal",
                   "sdpa")


@functools.cache
def methods() -> dict[str, Method]:
    """All methods by CLI name, in table order (imports torch)."""
    from weirdnet_lab.opbench.methods import (
        Method,
        direct_scan_builder,
        scan_builder,
        scan_ops_check,
        sdpa_builder,
    )

    scan_ok, bidir_ok = scan_ops_check("weird_scan"), scan_ops_check("weird_scan_bidirectional")
    scans = []
    for cls, suffix in LOG_W.classes.items():
        step, tag = LOG_W_STEP[cls], f", {cls} log_w"
        scans += [
            Method("scan" + suffix, "weird_scan causal" + tag, "scan",
                   scan_builder(False, None, step=step), check=scan_ok),
            Method("scan-kernel" + suffix,
                   "weird_scan causal, kernels called without the custom op" + tag, "scan",
                   direct_scan_builder(step), check=scan_ok),
            Method("scan-rev" + suffix, "weird_scan reverse" + tag, "scan",
                   scan_builder(True, None, step=step), check=scan_ok),
            Method("scan-bidir" + suffix, "weird_scan bidirectional" + tag, "scan",
                   scan_builder(False, None, bidirectional=True, step=step), check=bidir_ok),
            Method("scan-torch" + suffix, "weird_scan causal, backend=torch" + tag, "scan",
                   scan_builder(False, "torch", step=step), capped=True, check=scan_ok),
        ]
    return {
        m.name: m
        for m in (
            *scans,
            Method("sdpa-causal", "SDPA causal", "sdpa", sdpa_builder(True)),
            Method("sdpa", "SDPA non-causal", "sdpa", sdpa_builder(False)),
        )
    }


RATIOS: tuple[Ratio, ...] = (
    Ratio("fwdbwd_speedup_causal", "fwd+bwd: SDPA causal / scan", "fwdbwd_ms", "sdpa-causal",
          "scan"),
    Ratio("fwdbwd_speedup_reverse", "fwd+bwd: SDPA / scan reverse", "fwdbwd_ms", "sdpa",
          "scan-rev"),
    Ratio("fwdbwd_speedup_bidir", "fwd+bwd: SDPA / scan bidir", "fwdbwd_ms", "sdpa",
          "scan-bidir"),
    Ratio("fwd_speedup_causal", "fwd: SDPA causal / scan", "fwd_ms", "sdpa-causal", "scan"),
    Ratio("fwd_speedup_reverse", "fwd: SDPA / scan reverse", "fwd_ms", "sdpa", "scan-rev"),
    Ratio("op_overhead_fwd", "fwd: scan / scan-kernel (custom-op wrapper)", "fwd_ms", "scan",
          "scan-kernel"),
    Ratio("op_overhead_fwdbwd", "fwd+bwd: scan / scan-kernel (custom-op wrapper)",
          "fwdbwd_ms", "scan", "scan-kernel"),
    Ratio("mem_causal", "memory: scan / SDPA causal", "mem_mib", "scan", "sdpa-causal"),
    Ratio("mem_reverse", "memory: scan reverse / SDPA", "mem_mib", "scan-rev", "sdpa"),
    Ratio("mem_bidir", "memory: scan bidir / SDPA", "mem_mib", "scan-bidir", "sdpa"),
    Ratio("backward_cost_wide", "scan fwd+bwd / its fwd, wide log_w", "fwdbwd_ms", "scan",
          "scan", group="Backward cost: fwd+bwd / fwd of the causal scan",
          column="wide log_w", den_metric="fwd_ms"),
    Ratio("backward_cost_typical", "scan fwd+bwd / its fwd, typical log_w", "fwdbwd_ms",
          "scan-typical", "scan-typical", group="Backward cost: fwd+bwd / fwd of the causal scan",
          column="typical log_w", den_metric="fwd_ms"),
)
"""Speed ratios are "how many times faster the scan is"; memory ratios "how many times more
memory the scan takes"."""

TARGETS: tuple[Target, ...] = (
    Target("speed_16k", "fwd+bwd at L=16384 at least 10x faster than SDPA causal", 16384,
           "fwdbwd_speedup_causal", ">=", 10.0),
    Target("parity_1k", "fwd+bwd at L=1024 no slower than SDPA causal", 1024,
           "fwdbwd_speedup_causal", ">=", 1.0),
    Target("op_overhead_1k", "custom-op wrapper costs at most 5% of the forward at L=1024",
           1024, "op_overhead_fwd", "<=", 1.05),
    Target("memory_16k", "peak extra memory of fwd+bwd at L=16384 at most 3x SDPA causal's",
           16384, "mem_causal", "<=", 3.0),
    Target("backward_cost_16k", "causal scan fwd+bwd at L=16384 on wide-spread log_w at most "
           "3.5x its forward (issue 61: it had regressed to 10x)", 16384, "backward_cost_wide",
           "<=", 3.5),
)


def _ratios(_methods: Sequence[str]) -> tuple[Ratio, ...]:
    return RATIOS


def _describe(doc: dict) -> list[str]:
    c = doc["config"]
    return [f"- shapes: B={c['batch']}, D={c['dim']}, dtype {c['dtype']}; scan: a, v (B, L, D), "
            f"log_w (K, D), K = ceil(log2 L); SDPA: q, k, v (B, {c['heads']}, L, "
            f"{c['dim'] // c['heads']})",
            f"- log_w classes (--log-w {c.get('variant') or 'wide'}): "
            "typical = cumsum(0.1 N(0, 1)), wide = cumsum(N(0, 1)) over the K levels "
            "(WeirdAttention's default initialisation); rows without a class are SDPA's"]


OPBENCH = OpBench(
    name="scan",
    title="weird_scan vs SDPA",
    method_names=lambda: tuple(methods()),
    method=lambda name: methods()[name],
    default_lengths=DEFAULT_LENGTHS,
    ratios=_ratios,
    targets=TARGETS,
    describe=_describe,
    default_methods=DEFAULT_METHODS,
    grad_inputs="all inputs (log_w too)",
    ratio_note="Speed: SDPA time / scan time (above 1: the scan is faster). "
               "Memory: scan / SDPA peak extra memory.",
    variants=LOG_W,
    cap=Cap("--torch-max-len", 4096,
            "longest L for the slow backend='torch' scan row, 0 for no limit (default: 4096)"),
)


# --- the command: ``weirdnet bench scan`` --------------------------------------------

HELP = "weird_scan vs SDPA: time and peak memory of forward(+backward)"
DESCRIPTION = """\
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

Input classes (--log-w): each weird_scan method runs on log_w = cumsum(0.1 N(0, 1))
("typical", as NAME-typical) and on log_w = cumsum(N(0, 1)) ("wide", as NAME: the
default initialisation of WeirdAttention, whose spread sends most channels' backward to
the running-max form); --log-w typical or wide runs one class only.

glibc is told to keep freed memory in the heap (no mmap/munmap per big tensor) in the
timing process and in each memory child, so timings are not dominated by page faults.

Output: a Markdown report on stdout and in OUT/scan_<device>.md, all raw numbers and
machine info in OUT/scan_<device>.json. Progress goes to stderr. OUT is --out DIR, else
$WEIRDNET_BENCH_DIR, else ~/.cache/weirdnet/bench (a scratch folder); the committed
results are rewritten only with --out lab/results, and a --quick run refuses a
folder that holds a full run's report (unless --force). One run writes into OUT at a
time; Ctrl-C or SIGTERM ends the run without a report (OUT left as it was).

examples:
  weirdnet bench scan                          # full run (a few minutes on CPU)
  weirdnet bench scan --out lab/results # full run, into the committed results
  weirdnet bench scan --lengths 1024 4096 --methods scan,sdpa-causal
  weirdnet bench scan --log-w wide --methods scan,sdpa-causal
  weirdnet bench scan --quick                  # seconds-long smoke run
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of every operator benchmark (:mod:`.runner`), for this one."""
    runner.add_arguments(parser, OPBENCH)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure, report and write the records (:func:`.runner.run`); the exit status."""
    return runner.run(OPBENCH, args, argv)
