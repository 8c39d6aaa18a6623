"""``selective-copy``: copy the data tokens scattered among blanks, in order (the
selective copying task of Gu & Dao, Mamba, 2023).

The first ``seq_len - num_tokens`` positions hold ``num_tokens`` data tokens at random
positions (in order of position) among blanks; then ``num_tokens`` copy markers follow.
At the j-th marker the model must predict the j-th data token::

    tokens:   0  7  0  0  4  0  9  0  1  1  1
    targets:  .  .  .  .  .  .  .  .  7  4  9      (. = not asked, -100)

Ids: 0 blank (and padding), 1 marker, data tokens ``2 .. vocab_size - 1`` (with
replacement).  Chance accuracy: ``1 / (vocab_size - 2)``.

What it tests: which tokens to keep depends on their content (blank or not), and where
they were; a time-invariant mixer cannot skip the blanks, a content-aware one can.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from weirdnet.data.registry import NO_ROOT, register

from .dataset import IGNORE, SPLITS, RecallDataset, check_int

BLANK, MARKER = 0, 1


def selective_copy_sample(rng: np.random.Generator, *, seq_len: int = 128,
                          num_tokens: int = 8, vocab_size: int = 16
                          ) -> tuple[np.ndarray, np.ndarray]:
    """One (tokens, targets) pair of int64 arrays of length ``seq_len`` (module doc)."""
    seq_len = check_int("seq_len", seq_len, 2)
    num_tokens = check_int("num_tokens", num_tokens, 1)
    vocab_size = check_int("vocab_size", vocab_size, 3)
    context = seq_len - num_tokens
    if context < num_tokens:
        raise ValueError(f"seq_len={seq_len} is too short to copy {num_tokens} tokens: it "
                         f"must be >= 2 * num_tokens = {2 * num_tokens}")
    data = rng.integers(2, vocab_size, size=num_tokens)
    where = np.sort(rng.choice(context, size=num_tokens, replace=False))
    tokens = np.full(seq_len, BLANK, dtype=np.int64)
    targets = np.full(seq_len, IGNORE, dtype=np.int64)
    tokens[where] = data
    tokens[context:] = MARKER
    targets[context:] = data
    return tokens, targets


@register("selective-copy", splits=SPLITS, task="recall",
          summary="selective copying (Mamba): data tokens among blanks, copied in order",
          root=NO_ROOT)
def _selective_copy(split: str, root: Path | None = None, *, seq_len: int = 128,
                    num_tokens: int = 8, vocab_size: int = 16,
                    num_samples: int | None = None, seed: int = 0) -> RecallDataset:
    """Generated on the fly (no root: the registry refuses one)."""
    return RecallDataset(selective_copy_sample, split, chance=1.0 / (vocab_size - 2),
                         num_samples=num_samples, seed=seed, seq_len=seq_len,
                         num_tokens=num_tokens, vocab_size=vocab_size)
