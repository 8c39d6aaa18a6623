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

Zoology's own recipe (its Figure 2; ``placement="power-law"``, ``distinct_values=True``,
a vocabulary of 8,192) differs in two ways, both options here:

- values are distinct within a sequence too (drawn without replacement);
- a query sits at an even offset ``2g`` after the pairs, the gap index ``g`` drawn
  without replacement from ``0 .. (seq_len - 2 * num_pairs) // 2 - 1`` with probability
  proportional to ``(g + 1) ** (power_a - 1)``: with ``power_a = 0.01`` most queries come
  soon after the pairs, as a repeated bigram does in text (Zoology §3).  It needs
  ``seq_len >= 4 * num_pairs``.

What it tests: the answer depends on the *query*, so a mixer must route by content.
Softmax attention does it in one layer (the query matches its key); a mixer whose
weights do not depend on the query (Weird-attention's position-and-exp(A) weighted
average, linear attention's fixed-size state) must store every pair in its state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from weirdnet.data.registry import NO_ROOT, register

from .dataset import IGNORE, SPLITS, RecallDataset, check_int

PLACEMENTS = ("uniform", "power-law")


def mqar_sample(rng: np.random.Generator, *, seq_len: int = 128, num_pairs: int = 8,
                vocab_size: int = 64, placement: str = "uniform", power_a: float = 0.01,
                distinct_values: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One (tokens, targets) pair of int64 arrays of length ``seq_len`` (module doc)."""
    seq_len = check_int("seq_len", seq_len, 3)
    num_pairs = check_int("num_pairs", num_pairs, 1)
    vocab_size = check_int("vocab_size", vocab_size, 5)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if not 0 < power_a <= 1:
        raise ValueError(f"power_a must be in (0, 1], got {power_a!r}")
    keys_available = (vocab_size - 1) // 2
    values_available = vocab_size - 1 - keys_available
    room = 4 * num_pairs if placement == "power-law" else 3 * num_pairs
    if seq_len < room:
        raise ValueError(f"seq_len={seq_len} is too short for {num_pairs} pairs and their "
                         f"queries ({placement} placement): it must be >= {room}")
    if keys_available < num_pairs or (distinct_values and values_available < num_pairs):
        raise ValueError(f"vocab_size={vocab_size} has {keys_available} keys and "
                         f"{values_available} values, fewer than num_pairs={num_pairs}: it "
                         f"must be >= {2 * num_pairs + 1}")
    keys = rng.choice(np.arange(1, keys_available + 1), size=num_pairs, replace=False)
    if distinct_values:
        values = rng.choice(np.arange(keys_available + 1, vocab_size), size=num_pairs,
                            replace=False)
    else:
        values = rng.integers(keys_available + 1, vocab_size, size=num_pairs)
    tokens = np.zeros(seq_len, dtype=np.int64)
    targets = np.full(seq_len, IGNORE, dtype=np.int64)
    tokens[0:2 * num_pairs:2], tokens[1:2 * num_pairs:2] = keys, values
    slots = 2 * num_pairs + query_offsets(rng, seq_len - 2 * num_pairs, num_pairs,
                                          placement, power_a)
    order = rng.permutation(num_pairs)
    tokens[slots], targets[slots] = keys[order], values[order]
    return tokens, targets


def query_offsets(rng: np.random.Generator, space: int, count: int, placement: str,
                  power_a: float) -> np.ndarray:
    """``count`` distinct offsets in ``[0, space)`` after the pairs: uniform, or even
    offsets ``2g`` with ``P(g) ~ (g + 1) ** (power_a - 1)`` (Zoology's power law)."""
    if placement == "uniform":
        return rng.choice(space, size=count, replace=False)
    gaps = np.arange(space // 2)
    weights = (gaps + 1.0) ** (power_a - 1.0)
    return 2 * rng.choice(gaps, size=count, replace=False, p=weights / weights.sum())


@register("mqar", splits=SPLITS, task="recall",
          summary="multi-query associative recall (Zoology): key-value pairs, then queries",
          root=NO_ROOT)
def _mqar(split: str, root: Path | None = None, *, seq_len: int = 128, num_pairs: int = 8,
          vocab_size: int = 64, placement: str = "uniform", power_a: float = 0.01,
          distinct_values: bool = False, num_samples: int | None = None, seed: int = 0
          ) -> RecallDataset:
    """Generated on the fly (no root: the registry refuses one)."""
    chance = 1.0 / (vocab_size - 1 - (vocab_size - 1) // 2)
    return RecallDataset(mqar_sample, split, chance=chance, num_samples=num_samples,
                         seed=seed, seq_len=seq_len, num_pairs=num_pairs,
                         vocab_size=vocab_size, placement=placement, power_a=power_a,
                         distinct_values=distinct_values)
