"""Softmax attention through ``scaled_dot_product_attention``, and its float64 reference.

Shapes: queries ``q`` (B, H, Lq, d), keys ``k`` (B, H, Lk, d), values ``v`` (B, H, Lk, dv);
``mask`` (B, Lk) bool, True = real key.  With ``causal=True`` the queries are the *last*
Lq positions of the key sequence (bottom-right alignment): query i sees keys
j <= i + (Lk - Lq).  That is the plain causal mask when Lq == Lk, and decoding against a
KV cache when Lq < Lk.

A query row with no real key in reach gets output 0 (never NaN), with zero gradient.

This module also holds the helpers every attention op and layer of weirdnet shares:
:func:`split_heads` / :func:`merge_heads`, :func:`check_qkv` and :func:`masked_sdpa`, and
:func:`packed_softmax_attention` (block-diagonal over packed documents).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .checks import check_float_tensor, check_mask, on_host


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, L, H * d) -> (B, H, L, d) (a view of a contiguous x)."""
    B, L, D = x.shape
    return x.reshape(B, L, heads, D // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, d) -> (B, L, H * d)."""
    B, H, L, d = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d)


def check_qkv(q, k, v, mask=None, *, same_length: bool = False) -> tuple[int, int, int, int]:
    """Validate (B, H, Lq, d) queries, (B, H, Lk, d) keys, (B, H, Lk, dv) values and a
    (B, Lk) key mask; returns (B, H, Lq, Lk)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float_tensor(t, name, 4)
    B, H, Lq, d = q.shape
    if k.shape[:2] != (B, H) or k.shape[3] != d:
        raise ValueError(f"k must have shape (B, H, Lk, d) = ({B}, {H}, Lk, {d}), "
                         f"got {tuple(k.shape)}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must have shape (B, H, Lk, dv) with (B, H, Lk) = "
                         f"{tuple(k.shape[:3])}, got {tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, "
                         f"{v.device}")
    if same_length and k.shape[2] != Lq:
        raise ValueError(f"q and k must have the same length, got {Lq} and {k.shape[2]}")
    check_mask(mask, B, k.shape[2])
    if mask is not None and mask.device != q.device:
        raise ValueError(f"mask must be on {q.device}, got {mask.device}")
    return B, H, Lq, k.shape[2]


def check_step_mask(mask_t, batch: int) -> None:
    """``mask_t`` must be None or a bool tensor of shape (batch,)."""
    if mask_t is None:
        return
    if (not isinstance(mask_t, torch.Tensor) or mask_t.dtype != torch.bool
            or tuple(mask_t.shape) != (batch,)):
        got = (f"{mask_t.dtype} {tuple(mask_t.shape)}" if isinstance(mask_t, torch.Tensor)
               else type(mask_t).__name__)
        raise ValueError(f"mask_t must be a bool tensor of shape (batch,) = ({batch},), "
                         f"got {got}")


def check_dropout(p) -> float:
    """A dropout probability in [0, 1)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {p!r}")
    return float(p)


def causal_mask(Lq: int, Lk: int, device=None) -> torch.Tensor:
    """(Lq, Lk) bool, True where query i (the last Lq of Lk positions) may see key j."""
    i = torch.arange(Lq, device=device).unsqueeze(1) + (Lk - Lq)
    return torch.arange(Lk, device=device).unsqueeze(0) <= i


def attention_mask(mask, Lq: int, Lk: int, causal: bool, device=None):
    """The boolean ``attn_mask`` for SDPA: (B, 1, Lq | 1, Lk), (Lq, Lk), or None."""
    allowed = causal_mask(Lq, Lk, device) if causal else None
    if mask is None:
        return allowed
    keys = mask[:, None, None, :]
    return keys if allowed is None else keys & allowed


def masked_sdpa(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False):
    """SDPA with a boolean ``attn_mask`` (True = may attend) broadcastable to
    (..., Lq, Lk); query rows whose mask is all False give 0 instead of NaN."""
    if attn_mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    empty = ~attn_mask.any(-1, keepdim=True)
    if on_host(q) and not empty.any():  # the common case: no copy of the mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask | empty,
                                         dropout_p=dropout_p)
    return out.masked_fill(empty, 0.0)


def softmax_attention(q, k, v, *, causal: bool = False, mask=None, dropout_p: float = 0.0):
    """softmax(q k^T / sqrt(d) + masks) v: (B, H, Lq, dv).

    ``mask`` (B, Lk) drops padded keys; ``causal`` aligns queries to the end of the keys
    (see the module docstring).  ``dropout_p`` is the attention-probability dropout.
    """
    _, _, Lq, Lk = check_qkv(q, k, v, mask)
    if causal and Lq > Lk:
        raise ValueError(f"causal attention needs at least as many keys as queries, "
                         f"got Lq={Lq} > Lk={Lk}")
    if mask is None and (not causal or Lq == 1):  # nothing to mask (one query sees all)
        return masked_sdpa(q, k, v, dropout_p=dropout_p)
    if causal and mask is None and Lq == Lk:
        return masked_sdpa(q, k, v, dropout_p=dropout_p, is_causal=True)
    return _masked_in_query_blocks(q, k, v, mask, causal, dropout_p)


MASKED_SCORES_LIMIT = 2**26
"""Most score elements (all batch rows and heads together) that one call with an explicit
mask may hold.  SDPA falls back to its math path for a boolean mask on a CPU and holds
the whole (B, H, Lq, Lk) score matrix: a Transformer++ scored in 64K-byte windows was
killed by the out-of-memory killer at 21.7 GB.  Longer query ranges go in blocks of
rows (each row's softmax is its own, so the result is the same up to rounding)."""


def _masked_in_query_blocks(q, k, v, mask, causal: bool, dropout_p: float, segments=None):
    """:func:`masked_sdpa` with the explicit mask of (``mask``, ``causal``, and with
    ``segments`` (B, L) the same-document rule), in blocks of query rows that keep each
    call within :data:`MASKED_SCORES_LIMIT` score elements; with ``causal`` a block sees
    only the keys its last row reaches."""
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    if B * H * Lq * Lk <= MASKED_SCORES_LIMIT:  # one call (straight-line code for tracers)
        return _masked_block(q, k, v, mask, causal, dropout_p, segments, 0, Lq)
    rows = max(1, MASKED_SCORES_LIMIT // (B * H * Lk))
    return torch.cat([_masked_block(q, k, v, mask, causal, dropout_p, segments, start,
                                    min(Lq, start + rows))
                      for start in range(0, Lq, rows)], 2)


def _masked_block(q, k, v, mask, causal: bool, dropout_p: float, segments, start: int,
                  stop: int):
    """Query rows [start, stop) of :func:`_masked_in_query_blocks`: (B, H, stop - start, dv)."""
    Lq, Lk = q.shape[2], k.shape[2]
    keys = Lk - Lq + stop if causal else Lk  # bottom-right alignment: see the docstring
    allowed = attention_mask(None if mask is None else mask[:, :keys], stop - start, keys,
                             causal, q.device)
    if segments is not None:
        same = (segments[:, start:stop, None] == segments[:, None, :keys]).unsqueeze(1)
        allowed = same if allowed is None else allowed & same
    return masked_sdpa(q[:, :, start:stop], k[:, :, :keys], v[:, :, :keys], allowed,
                       dropout_p)


def packed_softmax_attention(q, k, v, segments, *, causal: bool = False, mask=None,
                             dropout_p: float = 0.0):
    """Block-diagonal softmax attention over packed documents: (B, H, L, dv).

    q, k, v: (B, H, L, d | dv) of one sequence of length L; ``segments`` (B, L) int
    document ids (equal = same document, e.g. ``ops.packing.segment_ids``): a query sees
    the keys of its own document only, with ``mask`` (B, L) and ``causal`` as in
    :func:`softmax_attention`.  The mask is built a block of query rows at a time
    (:data:`MASKED_SCORES_LIMIT`), never as a whole (B, 1, L, L) tensor.
    """
    _, _, Lq, Lk = check_qkv(q, k, v, mask, same_length=True)
    if not isinstance(segments, torch.Tensor) or tuple(segments.shape) != (q.shape[0], Lq):
        got = tuple(segments.shape) if isinstance(segments, torch.Tensor) else segments
        raise ValueError(f"segments must be a (B, L) = ({q.shape[0]}, {Lq}) tensor, got {got}")
    if segments.dtype.is_floating_point or segments.dtype.is_complex:
        raise TypeError(f"segments must hold integer (or bool) document ids, got "
                        f"{segments.dtype}")
    if segments.device != q.device:
        raise ValueError(f"segments are on {segments.device}, q on {q.device}")
    return _masked_in_query_blocks(q, k, v, mask, causal, dropout_p, segments)


def reference_attention(q, k, v, allowed: torch.Tensor) -> torch.Tensor:
    """Float64 softmax attention with an explicit boolean mask ``allowed`` broadcastable
    to (B, H, Lq, Lk); rows with nothing allowed give 0.  Differentiable."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    allowed = allowed.expand_as(scores)
    empty = ~allowed.any(-1, keepdim=True)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(empty, 0.0)
    return (torch.softmax(scores, -1) @ v).masked_fill(empty, 0.0)


def softmax_attention_reference(q, k, v, *, causal: bool = False, mask=None) -> torch.Tensor:
    """Float64 reference for :func:`softmax_attention` (full score matrix); same arguments."""
    B, H, Lq, Lk = check_qkv(q, k, v, mask)
    allowed = torch.ones(B, 1, Lq, Lk, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed.tril(Lk - Lq)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return reference_attention(q, k, v, allowed)
