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

__all__ = ["continue_schedule", "extend_phases", "lr_multiplier", "phased_multiplier"]

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


EXTEND_NOTES = {
    "keep": "the schedule is unchanged; past its end the rate stays at its last value",
    "rewarm": "warm up again to optim.lr, then decay over the remaining steps",
    "stretch": "the schedule is laid out again over all train.steps",
}
"""What each ``schedule.extend`` does, for the line a resumed run prints."""


def continue_schedule(schedule, phases: Phases, done: int, steps: int, optimizer,
                      scheduler) -> tuple[Phases, Callable[[int], float], str | None]:
    """A run resumed at step ``done`` with ``train.steps = steps``: the schedule laid out
    again as ``schedule.extend`` says (``schedule``: the config's table), its multiplier,
    and the line that says how the rate changed (None: it did not).  The optimizer's rate
    is set to the new schedule's at once."""
    how = schedule.extend
    laid = extend_phases(phases, done, steps, how)
    factor = phased_multiplier(schedule.name, schedule.warmup_steps, laid,
                               schedule.min_lr_ratio)
    if phases[-1][1] == steps or schedule.name != "cosine" and how == "keep":
        return laid, factor, None
    before = optimizer.param_groups[0]["lr"]
    for group, base in zip(optimizer.param_groups, scheduler.base_lrs, strict=True):
        group["lr"] = base * factor(scheduler.last_epoch)
    note = _keep_note(factor, schedule.warmup_steps, laid[-1][0], scheduler.base_lrs[0],
                      done, steps) if how == "keep" else EXTEND_NOTES[how]
    return laid, factor, (f"the learning-rate schedule was laid out for {phases[-1][1]} "
                          f"steps, now train.steps={steps}: schedule.extend={how!r} "
                          f"({note}); lr at step {done + 1}: {before:.3g} -> "
                          f"{optimizer.param_groups[0]['lr']:.3g}")


def _keep_note(factor: Callable[[int], float], warmup: int, start: int, base: float,
               done: int, steps: int) -> str:
    """What ``schedule.extend='keep'`` does from step ``done + 1`` to ``steps``: the
    rate stays at its final value, or, when the warmup outlasts the steps the
    schedule was laid out for, it first keeps rising (then falls to that value)."""
    # factor(k) is the rate of step k + 1; the peak comes by the end of the warmup
    ahead = range(done, min(steps, start + warmup + 1))
    peak = max(ahead, key=factor, default=done)
    if factor(peak) <= factor(done):
        return EXTEND_NOTES["keep"]
    return (f"the schedule is unchanged; its warmup (schedule.warmup_steps={warmup}) "
            f"outlasts the steps it was laid out for, so the rate keeps rising to "
            f"{base * factor(peak):.3g} at step {peak + 1}, then falls to "
            f"{base * factor(steps - 1):.3g} and stays there")
