"""``induction``: the induction-head task (Olsson et al., 2022; as in H3 and Mamba).

Random tokens, with one trigger token at a random position followed by the answer
token; the last position holds the trigger again, and there the model must predict the
answer::

    tokens:   5  9  1  6  3  8  2  7  1
    targets:  .  .  .  .  .  .  .  .  6      (. = not asked, -100)

Ids: 0 padding (never in a sequence), 1 the trigger, other tokens ``2 .. vocab_size - 1``
(uniform).  The first trigger is at a position in ``[0, seq_len - 3]``.  Chance accuracy:
``1 / (vocab_size - 2)``.

What it tests: one lookup by content ("what followed this token last time?"), the
mechanism behind in-context copying in Transformers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from weirdnet.data.registry import NO_ROOT, register

from .dataset import IGNORE, SPLITS, RecallDataset, check_int

TRIGGER = 1


def induction_sample(rng: np.random.Generator, *, seq_len: int = 128, vocab_size: int = 16
                     ) -> tuple[np.ndarray, np.ndarray]:
    """One (tokens, targets) pair of int64 arrays of length ``seq_len`` (module doc)."""
    seq_len = check_int("seq_len", seq_len, 3)
    vocab_size = check_int("vocab_size", vocab_size, 3)
    tokens = rng.integers(2, vocab_size, size=seq_len)
    first = int(rng.integers(0, seq_len - 2))
    tokens[first] = tokens[-1] = TRIGGER
    targets = np.full(seq_len, IGNORE, dtype=np.int64)
    targets[-1] = tokens[first + 1]
    return tokens.astype(np.int64), targets


@register("induction", splits=SPLITS, task="recall",
          summary="induction heads: a trigger seen before, predict the token that followed",
          root=NO_ROOT)
def _induction(split: str, root: Path | None = None, *, seq_len: int = 128,
               vocab_size: int = 16, num_samples: int | None = None, seed: int = 0
               ) -> RecallDataset:
    """Generated on the fly (no root: the registry refuses one)."""
    return RecallDataset(induction_sample, split, chance=1.0 / (vocab_size - 2),
                         num_samples=num_samples, seed=seed, seq_len=seq_len,
                         vocab_size=vocab_size)
