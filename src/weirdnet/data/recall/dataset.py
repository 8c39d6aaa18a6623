"""The dataset shared by the recall diagnostics: seeded items of one split.

Item ``i`` of split ``s`` is drawn from ``numpy.random.default_rng([seed, SPLIT_CODE[s],
i])``: reproducible and independent of reading order.  The splits draw from different
streams (with the default sizes, a repeated item is practically impossible).  An item is
kept after its first draw (in the smallest integer type that holds the vocabulary), so
later epochs read it instead of drawing it again: drawing costs about 90 µs an item, a
tenth of a small model's training step at batch 512.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from weirdnet.data.registry import DatasetInfo

IGNORE = -100
"""Target of a position where nothing is asked (``cross_entropy``'s ignore_index)."""
SPLITS = ("train", "val", "test")
SPLIT_CODE = {"train": 0, "val": 1, "test": 2}
DEFAULT_NUM_SAMPLES = {"train": 20_000, "val": 500, "test": 1_000}
KEEP_BYTES = 1 << 29
"""A split keeps its drawn items while they fit in this many bytes (512 MiB)."""

Sampler = Callable[..., tuple[np.ndarray, np.ndarray]]
"""``sampler(rng, **options) -> (tokens (L,), targets (L,))``, int64 arrays."""


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int, or ValueError naming ``name`` and the bound."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class RecallDataset(Dataset):
    """``num_samples`` items of ``sampler`` (one split), all of length ``seq_len``.

    ``options`` go to the sampler (which checks them once, here); ``vocab_size`` and
    ``seq_len`` are among them.  ``chance`` is the accuracy of guessing uniformly among
    the tokens a target can take.
    """

    def __init__(self, sampler: Sampler, split: str, *, chance: float,
                 num_samples: int | None = None, seed: int = 0, **options: Any):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        num_samples = DEFAULT_NUM_SAMPLES[split] if num_samples is None else num_samples
        self.num_samples = check_int("num_samples", num_samples, 1)
        self.seed = check_int("seed", seed, 0)
        self.split, self.sampler, self.options, self.chance = split, sampler, options, chance
        self.sample(0)  # the sampler's own checks, once
        self._kept = _ItemStore.for_split(self.num_samples, options["seq_len"],
                                          options["vocab_size"])
        self.info = DatasetInfo(task="recall", vocab_size=options["vocab_size"],
                                max_len=options["seq_len"], pad_id=0)

    def __len__(self) -> int:
        return self.num_samples

    def sample(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, targets) of item ``index`` as int64 arrays."""
        rng = np.random.default_rng([self.seed, SPLIT_CODE[self.split], index])
        return self.sampler(rng, **self.options)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        kept = self._kept.get(index) if self._kept is not None else None
        if kept is None:
            kept = self.sample(index)
            if self._kept is not None:
                self._kept.put(index, *kept)
        tokens, targets = kept
        return {"tokens": torch.from_numpy(tokens), "targets": torch.from_numpy(targets)}


class _ItemStore:
    """The items of one split drawn so far: tokens and targets (N, L) in ``dtype``."""

    def __init__(self, num_samples: int, seq_len: int, dtype: np.dtype):
        self.tokens = np.empty((num_samples, seq_len), dtype)
        self.targets = np.empty((num_samples, seq_len), dtype)
        self.drawn = np.zeros(num_samples, bool)

    @classmethod
    def for_split(cls, num_samples: int, seq_len: int, vocab_size: int) -> _ItemStore | None:
        """A store for the split, or None when it would exceed :data:`KEEP_BYTES`."""
        dtype = np.dtype(np.int16 if vocab_size <= np.iinfo(np.int16).max else np.int32)
        too_large = 2 * num_samples * seq_len * dtype.itemsize > KEEP_BYTES
        if too_large or vocab_size > np.iinfo(np.int32).max:
            return None
        return cls(num_samples, seq_len, dtype)

    def get(self, index: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Item ``index`` as int64 arrays (L,), or None if it was not drawn yet."""
        if not self.drawn[index]:
            return None
        return self.tokens[index].astype(np.int64), self.targets[index].astype(np.int64)

    def put(self, index: int, tokens: np.ndarray, targets: np.ndarray) -> None:
        self.tokens[index], self.targets[index] = tokens, targets
        self.drawn[index] = True
