"""Student's t intervals on a mean, for the core's own tables (``weirdnet eval
--truncation``) and the lab's reports (:mod:`weirdnet_lab.sweep.intervals`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

Z95 = 1.959963984540054
# Two-sided 95% quantiles of Student's t with 1 .. 30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with ``dof`` degrees of freedom (the
    table to 30, then the first terms of its expansion around the normal quantile)."""
    if dof < 1:
        raise ValueError(f"t95 needs dof >= 1, got {dof}")
    if dof <= len(_T95):
        return _T95[dof - 1]
    return Z95 + (Z95 ** 3 + Z95) / (4 * dof)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95% t interval (low = high = mean for a single
    value, where no spread is known)."""
    if not values:
        raise ValueError("mean_interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
