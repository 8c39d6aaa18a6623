"""95% intervals for the reports: a test-set binomial interval (Wilson) and an interval
on a mean over seeds (Student's t)."""

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


def wilson(accuracy: float, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval (low, high) of a proportion ``accuracy`` observed on
    ``trials`` independent trials (e.g. test items); (0, 1) when there are none."""
    if trials <= 0:
        return 0.0, 1.0
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must be in [0, 1], got {accuracy}")
    z2 = Z95 * Z95
    centre = (accuracy + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z95 * math.sqrt(accuracy * (1 - accuracy) / trials + z2 / (4 * trials * trials))
    half /= 1 + z2 / trials
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean over seeds and its 95% t interval (low = high = mean
    for a single value, where no spread is known)."""
    if not values:
        raise ValueError("mean_interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def accuracy_interval(values: Sequence[float], trials: int | None) -> tuple[float, float,
                                                                          float]:
    """(mean, low, high) of accuracies in [0, 1] over seeds: the t interval over the
    seeds, never narrower than the Wilson interval of ``trials`` test items at the mean
    (every seed reads the same test items, so their sampling error does not shrink with
    seeds, and seeds that agree exactly would otherwise give a zero-width interval).
    One value with ``trials``: the Wilson interval; no ``trials``: the t interval alone."""
    mean, low, high = mean_interval(values)
    if trials:
        wilson_low, wilson_high = wilson(min(max(mean, 0.0), 1.0), trials)
        low, high = min(low, wilson_low), max(high, wilson_high)
    return mean, low, high
