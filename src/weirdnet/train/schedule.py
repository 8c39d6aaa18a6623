"""Learning-rate schedules as multipliers of the base rate (for ``LambdaLR``).

``step`` counts optimizer steps from 0.  Warmup is linear: ``(step + 1) / warmup`` for
``step < warmup`` (so the first step is not taken at rate 0).  After warmup:

- "cosine" (the papers' LM training): ``min + (1 - min)·(1 + cos(π·t)) / 2`` with ``t`` the
  fraction of the post-warmup steps done, reaching ``min_lr_ratio`` at the last step and
  staying there after it;
- "rsqrt" (LRA's ``linear_warmup * rsqrt_decay``): ``sqrt(warmup / step)``, i.e. LRA's
  ``1/sqrt(max(step, warmup))`` scaled so the peak is the base rate;
- "constant": 1.

A run that is continued with another ``train.steps`` changes its schedule as
``schedule.extend`` says (:func:`extend_phases`).  The schedule is a list of *phases*
``[start, end]``: the first starts at step 0 and warms up from 0; a later one ("rewarm")
warms up from the rate its start step had, back to the base rate, and decays again
towards its own end.  The phases are saved in every checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["extend_phases", "lr_multiplier", "phased_multiplier"]

Phases = list[list[int]]


def lr_multiplier(name: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0
                  ) -> Callable[[int], float]:
    """The multiplier function ``step -> factor`` of schedule ``name`` over
    ``total_steps`` steps (one phase)."""
    return phased_multiplier(name, warmup_steps, [[0, total_steps]], min_lr_ratio)


def _decay(name: str, warmup_steps: int, local: int, span_steps: int,
           min_lr_ratio: float) -> float:
    """The factor after warmup, ``local`` steps into a phase of ``span_steps`` steps."""
    if name == "constant":
        return 1.0
    if name == "rsqrt":
        return math.sqrt(max(warmup_steps, 1) / max(local, 1))
    span = max(span_steps - 1 - warmup_steps, 1)
    progress = min((local - warmup_steps) / span, 1.0)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def phased_multiplier(name: str, warmup_steps: int, phases: Phases,
                      min_lr_ratio: float = 0.0) -> Callable[[int], float]:
    """The multiplier of a schedule laid out in ``phases`` (see the module doc)."""
    if name not in ("cosine", "rsqrt", "constant"):
        raise ValueError(f"unknown schedule {name!r}; use cosine, rsqrt or constant")
    if not phases or phases[0][0] != 0:
        raise ValueError(f"the schedule's phases must start at step 0, got {phases}")

    def factor(step: int) -> float:
        index = max(i for i, (start, _) in enumerate(phases) if start <= step)
        start, end = phases[index]
        local = step - start
        if local < warmup_steps:
            origin = 0.0 if index == 0 else factor(start - 1)
            return origin + (1.0 - origin) * (local + 1) / warmup_steps
        return _decay(name, warmup_steps, local, end - start, min_lr_ratio)

    return factor


def extend_phases(phases: Phases, done_steps: int, new_total: int, how: str) -> Phases:
    """The phases of a run resumed at ``done_steps`` with ``train.steps = new_total``:
    "keep" leaves them, "stretch" moves the last phase's end, "rewarm" adds a phase
    from ``done_steps`` to ``new_total``.  No change when the total is the same."""
    phases = [list(p) for p in phases]
    if new_total == phases[-1][1]:
        return phases
    if how == "keep":
        return phases
    if how == "stretch":
        phases[-1][1] = new_total
        return phases
    if how == "rewarm":
        if done_steps <= phases[-1][0]:  # nothing run in the last phase yet: re-lay it
            phases[-1][1] = new_total
            return phases
        return [*phases, [done_steps, new_total]]
    raise ValueError(f"unknown schedule.extend {how!r}; use keep, rewarm or stretch")
