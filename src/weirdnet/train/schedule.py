"""Learning-rate schedules as multipliers of the base rate (for ``LambdaLR``).

``step`` counts optimizer steps from 0.  Warmup is linear: ``(step + 1) / warmup`` for
``step < warmup`` (so the first step is not taken at rate 0).  After warmup:

- "cosine" (the papers' LM training): ``min + (1 - min)·(1 + cos(π·t)) / 2`` with ``t`` the
  fraction of the post-warmup steps done, reaching ``min_lr_ratio`` at the last step;
- "rsqrt" (LRA's ``linear_warmup * rsqrt_decay``): ``sqrt(warmup / step)``, i.e. LRA's
  ``1/sqrt(max(step, warmup))`` scaled so the peak is the base rate;
- "constant": 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["lr_multiplier"]


def lr_multiplier(name: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0
                  ) -> Callable[[int], float]:
    """The multiplier function ``step -> factor`` of schedule ``name``."""
    if name not in ("cosine", "rsqrt", "constant"):
        raise ValueError(f"unknown schedule {name!r}; use cosine, rsqrt or constant")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if name == "constant":
            return 1.0
        if name == "rsqrt":
            return math.sqrt(max(warmup_steps, 1) / max(step, 1))
        span = max(total_steps - 1 - warmup_steps, 1)
        progress = min((step - warmup_steps) / span, 1.0)
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
