"""Helpers shared by the dataset modules: byte tokens, seeded splits, cache files, errors.

Conventions used by every module of :mod:`weirdnet.data`:

- **Byte tokens.**  Language-model data are raw bytes, ids 0..255 (:data:`BYTE_VOCAB`);
  their windows have a fixed length, so no padding id is needed (a shorter last evaluation
  window is masked by :func:`weirdnet.data.collate.pad_collate`).  Classification and
  retrieval texts follow LRA (TFDS ``ByteTextEncoder``): id = byte + 1, 0 is padding,
  vocabulary 257 (:data:`SHIFTED_BYTE_VOCAB`), so byte 0 and padding never collide.
- **Seeded splits.**  A validation split carved out of an official training split is a
  fixed fraction of a permutation drawn from ``numpy.random.default_rng(seed)``; the
  training split is the rest, so the two never overlap and never depend on the machine.
- **Cache.**  Derived files live under :func:`weirdnet.data.registry.data_root`, written to
  a temporary name and renamed, so an interrupted build never leaves half a file.  A file
  built from a source (an archive, a folder) has that source's fingerprint in its name
  (:func:`source_cached`), so another root never reads what was built from the first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from weirdnet.data.registry import DataMissingError, data_root
from weirdnet.run.files import write_atomic

__all__ = ["BYTE_VOCAB", "SHIFTED_BYTE_VOCAB", "byte_tokens", "cache_path",
           "cached_bytes", "check_option", "contiguous_bounds", "require_path",
           "seeded_split", "source_cached", "split_fractions"]

BYTE_VOCAB = 256
"""Token ids of raw bytes (language modelling, pixels): 0..255."""

SHIFTED_BYTE_VOCAB = 257
"""Token ids of byte + 1 (LRA text/retrieval): 1..256 are bytes, 0 is padding."""


def byte_tokens(data: bytes | np.ndarray, *, shift: int = 0,
                max_len: int | None = None) -> torch.Tensor:
    """Bytes as a LongTensor (L,), each id ``byte + shift``, cut to the first ``max_len``."""
    array = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray) else data
    if max_len is not None:
        array = array[:max_len]
    tokens = torch.from_numpy(np.asarray(array, dtype=np.int64))
    return tokens + shift if shift else tokens


def check_option(name: str, value, allowed: Sequence) -> None:
    """Raise ValueError naming the option unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, allowed))}")


def seeded_split(n: int, split: str, *, val_fraction: float, seed: int) -> np.ndarray:
    """Indices of ``split`` ("train" or "val") when val is carved out of ``n`` train items.

    val: the first ``round(n * val_fraction)`` entries of a seeded permutation (sorted);
    train: the others (sorted).  val_fraction in [0, 1).
    """
    check_option("split", split, ("train", "val"))
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * val_fraction))
    chosen = order[:n_val] if split == "val" else order[n_val:]
    return np.sort(chosen)


def split_fractions(n: int, split: str, fractions: Sequence[float], *,
                    seed: int) -> np.ndarray:
    """Indices of train/val/test when ``n`` items are split by a seeded permutation.

    fractions: (train, val, test), summing to 1; test takes the remainder after rounding.
    """
    check_option("split", split, ("train", "val", "test"))
    n_train, n_val = _counts(n, fractions)
    order = np.random.default_rng(seed).permutation(n)
    parts = {"train": order[:n_train], "val": order[n_train:n_train + n_val],
             "test": order[n_train + n_val:]}
    return np.sort(parts[split])


def contiguous_bounds(n: int, split: str, fractions: Sequence[float]) -> tuple[int, int]:
    """[start, stop) of ``split`` when ``n`` items are cut, in order, into train/val/test."""
    check_option("split", split, ("train", "val", "test"))
    n_train, n_val = _counts(n, fractions)
    bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val),
              "test": (n_train + n_val, n)}
    return bounds[split]


def _counts(n: int, fractions: Sequence[float]) -> tuple[int, int]:
    if len(fractions) != 3 or not math.isclose(sum(fractions), 1.0, abs_tol=1e-9):
        raise ValueError(f"fractions must be (train, val, test) summing to 1, got {fractions}")
    return int(round(n * fractions[0])), int(round(n * fractions[1]))


def cache_path(*parts: str) -> Path:
    """``data_root()/parts...``; the parent directory is created."""
    path = data_root().joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def cached_bytes(path: Path, build: Callable[[], bytes]) -> bytes:
    """The bytes cached at ``path``; built by ``build()`` and written there on first use."""
    if path.is_file():
        return path.read_bytes()
    data = build()
    write_atomic(path, data)
    return data


def source_cached(stem: str, source: str, build: Callable[[], bytes],
                  suffix: str = ".bin") -> bytes:
    """The bytes cached at ``data_root()/corpora/<stem>-<source><suffix>``, built by
    ``build()`` on first use; ``source``: the fingerprint of what they are built from
    (:func:`weirdnet.data.sources.fingerprint.fingerprint`, ``Archive.fingerprint()``)."""
    return cached_bytes(cache_path("corpora", f"{stem}-{source}{suffix}"), build)


def require_path(path: Path, what: str, how: str) -> Path:
    """``path`` if it exists, else DataMissingError: "<what> not found at <path>. <how>"."""
    if not path.exists():
        raise DataMissingError(f"{what} not found at {path}. {how}")
    return path
