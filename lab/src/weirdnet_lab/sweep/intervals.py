"""95% intervals for the reports: a test-set binomial interval (Wilson) and an interval
on a mean over seeds (Student's t, from the core's :mod:`weirdnet.train.intervals`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from weirdnet.train import Z95, mean_interval, t95

__all__ = ["Z95", "accuracy_interval", "mean_interval", "t95", "wilson"]


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
