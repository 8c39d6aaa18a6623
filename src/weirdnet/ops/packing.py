"""Packed sequences: several documents in one row, told apart by ``doc_ids``.

The convention, the same in every op, mixer, model and data path of weirdnet:

    doc_ids: an integer tensor (B, L).  A document starts at position 0 of each row and
    wherever ``doc_ids[b, i] != doc_ids[b, i - 1]``; it runs until the next start.

So only changes of the id matter: ``[7, 7, 7, 2, 2]`` and ``[0, 0, 0, 1, 1]`` pack the same
two documents, and a row that repeats an id after another one (``[0, 0, 1, 0]``) holds three
documents.  Nothing is ever mixed across a start: each document's outputs (and gradients)
are those of the document alone, at relative positions that restart at 0.  ``mask`` keeps
its meaning beside ``doc_ids`` (False: padding, which contributes nothing).

Users who hold flash-attention's ``cu_seqlens`` (cumulative lengths of the documents of one
flattened row) convert with :func:`doc_ids_from_cu_seqlens` and back with
:func:`cu_seqlens_from_doc_ids`.

Everything here is a pure function of tensors; :func:`unpack` / :func:`repack` are the
exact fallback of the mixers without a native packed path (each document becomes a row of
a padded batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

INTEGER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def check_doc_ids(doc_ids, batch: int, length: int, device=None, name: str = "doc_ids") -> None:
    """``doc_ids`` must be None or an integer tensor of shape (batch, length) on ``device``."""
    if doc_ids is None:
        return
    if not isinstance(doc_ids, torch.Tensor) or doc_ids.dtype not in INTEGER_DTYPES:
        got = doc_ids.dtype if isinstance(doc_ids, torch.Tensor) else type(doc_ids).__name__
        raise ValueError(f"{name} must be an integer tensor (one document id per position), "
                         f"got {got}")
    if tuple(doc_ids.shape) != (batch, length):
        raise ValueError(f"{name} must have shape (batch, length) = {(batch, length)}, "
                         f"got {tuple(doc_ids.shape)}")
    if device is not None and doc_ids.device != torch.device(device):
        raise ValueError(f"{name} must be on {device}, got {doc_ids.device}")


def document_starts(doc_ids: torch.Tensor) -> torch.Tensor:
    """(B, L) bool: True where a document starts (position 0 and every change of id)."""
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    return starts


def segment_ids(doc_ids: torch.Tensor) -> torch.Tensor:
    """(B, L) int64 canonical ids 0, 1, 2, ... counting the documents of each row: two
    positions share an id exactly when they lie in the same document (the form the
    kernels compare)."""
    return document_starts(doc_ids).to(torch.int64).cumsum(1) - 1


def positions_in_document(doc_ids: torch.Tensor, mask: torch.Tensor | None = None
                          ) -> torch.Tensor:
    """(B, L) int64 positions that restart at 0 in each document.  With ``mask`` they
    count real tokens only, as the backbone's positions do (a padded position gets the
    position of the next real token, clamped at 0)."""
    B, L = doc_ids.shape
    real = torch.ones(B, L, dtype=torch.int64, device=doc_ids.device) if mask is None \
        else mask.to(torch.int64)
    seen = real.cumsum(1)  # real tokens up to and including each position
    before = torch.where(document_starts(doc_ids), seen - real, torch.zeros_like(seen))
    return (seen - before.cummax(1).values - 1).clamp(min=0)


def same_document(segments: torch.Tensor, shift: int) -> torch.Tensor:
    """(B, L - shift) bool: position i + shift lies in the document of position i."""
    return segments[:, shift:] == segments[:, :-shift]


def within_documents(targets: torch.Tensor, token_doc_ids: torch.Tensor,
                     ignore_index: int = -100) -> torch.Tensor:
    """Next-token targets (B, L) with ``ignore_index`` wherever the target is the first
    token of the next document: ``token_doc_ids`` (B, L + 1) are the ids of the tokens
    the inputs (``[:, :-1]``) and targets (``[:, 1:]``) were cut from."""
    return targets.masked_fill(document_starts(token_doc_ids)[:, 1:], ignore_index)


def doc_ids_from_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """``transformers``' packing convention (``DataCollatorWithFlattening``: position ids
    that restart at each sequence) -> ``doc_ids`` (B, L): a document starts wherever a
    position does not follow the one before it."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    return starts.to(torch.int64).cumsum(1)


def doc_ids_from_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """flash-attention's ``cu_seqlens`` (N + 1,) -> ``doc_ids`` (1, cu_seqlens[-1])."""
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or \
            cu_seqlens.dtype not in INTEGER_DTYPES or len(cu_seqlens) < 1:
        raise ValueError("cu_seqlens must be a 1-D integer tensor [0, len0, len0 + len1, ...]")
    lengths = cu_seqlens.diff()
    if int(cu_seqlens[0]) != 0 or bool((lengths <= 0).any()):
        raise ValueError("cu_seqlens must start at 0 and increase strictly, "
                         f"got {cu_seqlens.tolist()}")
    ids = torch.arange(len(lengths), device=cu_seqlens.device)
    return ids.repeat_interleave(lengths).unsqueeze(0)


def cu_seqlens_from_doc_ids(doc_ids: torch.Tensor) -> torch.Tensor:
    """``doc_ids`` (B, L) -> int32 ``cu_seqlens`` of the rows laid end to end."""
    starts = document_starts(doc_ids).flatten().nonzero().flatten()
    total = torch.tensor([doc_ids.numel()], device=doc_ids.device)
    return torch.cat([starts, total]).to(torch.int32)


@dataclass(frozen=True)
class Unpacked:
    """Where each document of a packed batch went in the padded batch of documents.

    index: (N, Lmax) int64 flat positions (b * L + i) of each document's tokens, 0 where
        the document is shorter than Lmax.
    valid: (N, Lmax) bool, True on a document's tokens.
    batch, length: the packed batch's (B, L).
    """

    index: torch.Tensor
    valid: torch.Tensor
    batch: int
    length: int


def unpack_layout(doc_ids: torch.Tensor) -> Unpacked:
    """The padded layout of the documents of ``doc_ids`` (B, L): one row per document,
    right-padded to the longest.  Reads the lengths on the host (one sync on a GPU)."""
    B, L = doc_ids.shape
    starts = document_starts(doc_ids).flatten()
    doc_of = starts.to(torch.int64).cumsum(0) - 1  # global document index of each position
    lengths = torch.bincount(doc_of)
    first = starts.nonzero().flatten()
    longest = int(lengths.max()) if len(lengths) else 0
    offset = torch.arange(longest, device=doc_ids.device)
    valid = offset.unsqueeze(0) < lengths.unsqueeze(1)
    index = torch.where(valid, first.unsqueeze(1) + offset, torch.zeros((), dtype=torch.int64,
                                                                      device=doc_ids.device))
    return Unpacked(index, valid, B, L)


def unpack(x: torch.Tensor, layout: Unpacked) -> torch.Tensor:
    """x (B, L, ...) -> (N, Lmax, ...): the documents as rows (padding repeats position 0)."""
    flat = x.reshape(layout.batch * layout.length, *x.shape[2:])
    return flat[layout.index]


def repack(y: torch.Tensor, layout: Unpacked) -> torch.Tensor:
    """y (N, Lmax, ...) -> (B, L, ...): the inverse of :func:`unpack` on the real tokens."""
    out = y.new_zeros(layout.batch * layout.length, *y.shape[2:])
    out = out.index_copy(0, layout.index[layout.valid], y[layout.valid])
    return out.reshape(layout.batch, layout.length, *y.shape[2:])


def per_document(fn, x: torch.Tensor, mask: torch.Tensor | None,
                 doc_ids: torch.Tensor) -> torch.Tensor:
    """``fn(x, mask)`` with each packed document run alone: the documents of x (B, L, ...)
    become the rows of a right-padded batch (N, Lmax, ...) with padding masked, go through
    ``fn``, and come back to their places (B, L, ...).  Exact for any ``fn`` whose real
    outputs padding never changes: the fallback of every mixer and model without a
    native packed path."""
    layout = unpack_layout(doc_ids)
    docs_mask = layout.valid if mask is None else layout.valid & unpack(mask, layout)
    return repack(fn(unpack(x, layout), docs_mask), layout)
