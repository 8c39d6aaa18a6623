"""Batching of dataset items of different lengths: :func:`pad_collate`."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["pad_collate"]


def pad_collate(items: Sequence[Mapping[str, Any]], pad_id: int = 0,
                multiple: int = 1, max_len: int | None = None) -> dict[str, Any]:
    """Stack a list of dict items into a batch, padding variable lengths.

    For every key whose values are tensors with at least one dimension, item ``i`` of
    shape (L_i, *rest) is padded at the end of dim 0 with ``pad_id`` (cast to the tensor's
    dtype: 0.0 for float ``values``) to L = max_i L_i rounded up to a multiple of
    ``multiple`` but not past ``max_len`` (the dataset's longest item, which models are
    sized for), giving (B, L, *rest), and the key ``<key>_mask`` is added: BoolTensor
    (B, L), True at real positions.  ``rest`` must agree across items.  A ``multiple``
    above 1 gives batches few distinct lengths, for kernels that compile or plan per
    shape (on a GPU); the masks keep the padding out of every result.

    0-dim tensors are stacked to (B,); ``label`` and any other key of Python ints/bools
    becomes a LongTensor (B,), of Python floats a FloatTensor (B,); anything else is
    returned as a list.  Example: items ``{"tokens": (L_i,), "label": int}`` give
    ``{"tokens": (B, L), "tokens_mask": (B, L), "label": (B,)}``.
    """
    if not items:
        raise ValueError("pad_collate needs at least one item")
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"multiple must be a positive int, got {multiple!r}")
    keys = list(items[0])
    for i, item in enumerate(items):
        if list(item) != keys:
            raise ValueError(f"item {i} has keys {sorted(item)}, item 0 has {sorted(keys)}")
    batch: dict[str, Any] = {}
    for key in keys:
        values = [item[key] for item in items]
        if all(isinstance(v, torch.Tensor) and v.dim() > 0 for v in values):
            batch[key], batch[f"{key}_mask"] = _pad(key, values, pad_id, multiple, max_len)
        else:
            batch[key] = _stack_scalars(values)
    return batch


def _pad(key: str, values: list[torch.Tensor], pad_id: int, multiple: int,
         max_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L, *rest) padded tensor and (B, L) bool mask of the real positions."""
    rest = values[0].shape[1:]
    for i, v in enumerate(values):
        if v.shape[1:] != rest:
            raise ValueError(f"{key!r}: item {i} has shape {tuple(v.shape)}, "
                             f"item 0 has (L, {', '.join(map(str, rest))})")
    lengths = torch.tensor([v.shape[0] for v in values])
    longest = int(lengths.max())
    rounded = -(-longest // multiple) * multiple
    longest = max(longest, rounded if max_len is None else min(rounded, max_len))
    out = values[0].new_full((len(values), longest, *rest), pad_id)
    for i, v in enumerate(values):
        out[i, :v.shape[0]] = v
    mask = torch.arange(longest)[None, :] < lengths[:, None]
    return out, mask


def _stack_scalars(values: list[Any]) -> Any:
    """0-dim tensors stacked; integers -> LongTensor, reals -> FloatTensor; else a list."""
    if all(isinstance(v, torch.Tensor) for v in values):
        return torch.stack(values)
    if all(isinstance(v, numbers.Integral) for v in values):
        return torch.tensor(values, dtype=torch.long)
    if all(isinstance(v, numbers.Real) for v in values):
        return torch.tensor(values, dtype=torch.float32)
    return list(values)
