"""``mqar``: multi-query associative recall (Arora et al., Zoology, 2023).

A sequence of ``seq_len`` tokens opens with ``num_pairs`` key-value pairs
``k1 v1 k2 v2 ...``; in the rest, every key is asked once, at a random position, in a
random order, among filler tokens.  At a query position the model must predict the value
that followed that key in the pairs::

    tokens:   k1 v1 k2 v2 k3 v3  0  k2  0  0  k1  k3  0
    targets:   .  .  .  .  .  .  .  v2  .  .  v1  v3  .      (. = not asked, -100)

Ids: 0 is the filler (and padding); keys are ``1 .. K`` with ``K = (vocab_size - 1) // 2``,
distinct within a sequence; values are ``K + 1 .. vocab_size - 1``, drawn with
replacement.  Chance accuracy: ``1 / (vocab_size - 1 - K)``.  Needs ``seq_len >= 3 *
num_pairs`` and ``K >= num_pairs``.

What it tests: the answer depends on the *query*, so a mixer must route by content.
Softmax attention does it in one layer (the query matches its key); a mixer whose
weights do not depend on the query (Weird-attention's position-and-exp(A) weighted
average, linear attention's fixed-size state) must store every pair in its state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from weirdnet.data.registry import register

from .dataset import IGNORE, SPLITS, RecallDataset, check_int


def mqar_sample(rng: np.random.Generator, *, seq_len: int = 128, num_pairs: int = 8,
                vocab_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """One (tokens, targets) pair of int64 arrays of length ``seq_len`` (module doc)."""
    seq_len = check_int("seq_len", seq_len, 3)
    num_pairs = check_int("num_pairs", num_pairs, 1)
    vocab_size = check_int("vocab_size", vocab_size, 5)
    keys_available = (vocab_size - 1) // 2
    if seq_len < 3 * num_pairs:
        raise ValueError(f"seq_len={seq_len} is too short for {num_pairs} pairs and their "
                         f"queries: it must be >= 3 * num_pairs = {3 * num_pairs}")
    if keys_available < num_pairs:
        raise ValueError(f"vocab_size={vocab_size} has {keys_available} keys, fewer than "
                         f"num_pairs={num_pairs}: it must be >= {2 * num_pairs + 1}")
    keys = rng.choice(np.arange(1, keys_available + 1), size=num_pairs, replace=False)
    values = rng.integers(keys_available + 1, vocab_size, size=num_pairs)
    tokens = np.zeros(seq_len, dtype=np.int64)
    targets = np.full(seq_len, IGNORE, dtype=np.int64)
    tokens[0:2 * num_pairs:2], tokens[1:2 * num_pairs:2] = keys, values
    slots = 2 * num_pairs + rng.choice(seq_len - 2 * num_pairs, size=num_pairs, replace=False)
    order = rng.permutation(num_pairs)
    tokens[slots], targets[slots] = keys[order], values[order]
    return tokens, targets


@register("mqar", splits=SPLITS, task="recall",
          summary="multi-query associative recall (Zoology): key-value pairs, then queries")
def _mqar(split: str, root: Path | None = None, *, seq_len: int = 128, num_pairs: int = 8,
          vocab_size: int = 64, num_samples: int | None = None, seed: int = 0
          ) -> RecallDataset:
    """Generated on the fly (root is not used)."""
    if root is not None:
        raise ValueError("dataset 'mqar' is generated; it takes no root=")
    chance = 1.0 / (vocab_size - 1 - (vocab_size - 1) // 2)
    return RecallDataset(mqar_sample, split, chance=chance, num_samples=num_samples,
                         seed=seed, seq_len=seq_len, num_pairs=num_pairs,
                         vocab_size=vocab_size)
