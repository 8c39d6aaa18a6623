"""Wall-clock timing: warm-up runs, then the median of ``repeats`` timed runs.

The one timing helper of the benchmarks: :func:`time_step` times a step (a forward, a
forward+backward, a training step) for ``bench scan``/``mixers`` (the runner), ``bench
speed`` and ``bench compile``.  The trained runs of ``bench suite``, ``lm`` and ``recall``
report the rate of the training itself instead, read from the run's log
(:func:`weirdnet_lab.sweep.cell.median_rates`): the steps/s of a real run, with
its data and evaluations around it.

The steps of an operator benchmark's :class:`~weirdnet_lab.opbench.methods.Case` (its
forward, its forward+backward) are built by :func:`weirdnet_lab.opbench.methods.forward_step`
and :func:`~weirdnet_lab.opbench.methods.forward_backward_step`.

On CUDA the device is synchronised before reading the clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels on ``device`` (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_step(
    step: Callable[[], None], device: torch.device, repeats: int, warmup: int = 1
) -> list[float]:
    """Seconds of each of ``repeats`` timed calls of ``step``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def median_ms(times: list[float]) -> float:
    """Median of ``times`` (seconds) in milliseconds."""
    return 1000.0 * statistics.median(times)
