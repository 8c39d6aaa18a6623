"""Sliding-window (local) softmax attention and its float64 reference.

Window of size ``w``:

- causal: query i sees keys j with i - w < j <= i (itself and the w - 1 before it);
- non-causal: query i sees keys j with |i - j| <= w // 2 (a symmetric window of
  2 * (w // 2) + 1 positions; w = 1 is the token alone).

Padded keys (``mask`` False) are dropped; a query with no real key in its window gets 0.
Shapes: q, k (B, H, L, d), v (B, H, L, dv), mask (B, L) bool, True = real token.

Blocked computation: the sequence is cut into blocks of b positions (b = w causal,
b = w // 2 non-causal); each query block attends to the keys of itself and of its
neighbour blocks (the previous one; and the next one when non-causal) under a band mask.
Time and memory O(L w), never an L x L matrix.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .softmax_attention import check_qkv, masked_sdpa, reference_attention


def check_window(window) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    return window


def window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int,
                causal: bool) -> torch.Tensor:
    """(Lq, Lk) bool: True where query at position q_pos[i] may see key at k_pos[j]."""
    dist = q_pos.unsqueeze(1) - k_pos.unsqueeze(0)
    if causal:
        return (dist >= 0) & (dist < window)
    return dist.abs() <= window // 2


def block_layout(window: int, causal: bool, length: int) -> tuple[int, int, int]:
    """(block size b, neighbour blocks before, neighbour blocks after) covering every
    window; one block of the whole sequence when it fits in one block."""
    if causal:
        b, before, after = window, math.ceil((window - 1) / window), 0
    else:
        half = window // 2
        b, before, after = (half, 1, 1) if half else (1, 0, 0)
    if length <= b:
        return max(length, 1), 0, 0
    return b, before, after


def _neighbours(x: torch.Tensor, b: int, before: int, after: int, n: int) -> torch.Tensor:
    """(B, H, L, e) -> (B, n, H, (before + 1 + after) * b, e): the keys each query block
    sees, zero- (or False-) padded at both ends."""
    B, H, L, e = x.shape
    x = F.pad(x, (0, 0, before * b, (n + after) * b - L))
    x = x.reshape(B, H, n + before + after, b, e).transpose(1, 2)
    return torch.cat([x[:, i : i + n] for i in range(before + 1 + after)], 3)


def local_attention(q, k, v, *, window: int, causal: bool, mask=None,
                    dropout_p: float = 0.0) -> torch.Tensor:
    """Sliding-window attention: (B, H, L, dv) (window definition in the module docstring)."""
    B, H, L, _ = check_qkv(q, k, v, mask, same_length=True)
    window = check_window(window)
    b, before, after = block_layout(window, causal, L)
    n = -(-L // b)
    qb = _neighbours(q, b, 0, 0, n)  # (B, n, H, b, d)
    kb, vb = (_neighbours(t, b, before, after, n) for t in (k, v))
    pos = torch.arange(kb.shape[3], device=q.device)
    band = window_mask(pos[:b] + before * b, pos, window, causal)  # (b, K)
    real = torch.ones(B, L, dtype=torch.bool, device=q.device) if mask is None else mask
    real = _neighbours(real[:, None, :, None], b, before, after, n)[:, :, 0, :, 0]  # (B, n, K)
    allowed = band & real.unsqueeze(2)
    out = masked_sdpa(qb.flatten(0, 1), kb.flatten(0, 1), vb.flatten(0, 1),
                      allowed.flatten(0, 1).unsqueeze(1), dropout_p)  # (B n, H, b, dv)
    dv = v.shape[-1]  # spelled out, not -1: an empty sequence (L = n = 0) leaves it ambiguous
    out = out.view(B, n, H, b, dv).transpose(1, 2).reshape(B, H, n * b, dv)
    return out[:, :, :L]


def local_attention_decode(q, k, v, past_k, past_v, past_mask, *, window: int, mask=None,
                           dropout_p: float = 0.0) -> torch.Tensor:
    """Causal local attention of n new tokens that continue a sequence whose last P
    keys/values are ``past_k``, ``past_v`` (B, H, P, .) with ``past_mask`` (B, P)
    (False: padding or an empty slot).  P >= window - 1 gives the exact windows.
    Returns (B, H, n, dv)."""
    B, H, n, _ = check_qkv(q, k, v, mask, same_length=True)
    check_qkv(q, past_k, past_v, past_mask)  # past: (B, H, P, d), (B, H, P, dv), (B, P)
    window, P = check_window(window), past_k.shape[2]
    new_mask = torch.ones(B, n, dtype=torch.bool, device=q.device) if mask is None else mask
    keys, values = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
    real = torch.cat([past_mask, new_mask], 1)
    if n <= window:  # a few tokens: one (n, P + n) banded attention
        pos = torch.arange(P + n, device=q.device)
        allowed = window_mask(pos[P:], pos, window, True) & real[:, None, None, :]
        return masked_sdpa(q, keys, values, allowed, dropout_p)
    queries = torch.cat([q.new_zeros(B, H, P, q.shape[-1]), q], 2)
    out = local_attention(queries, keys, values, window=window, causal=True, mask=real,
                          dropout_p=dropout_p)
    return out[:, :, P:]


def local_attention_reference(q, k, v, *, window: int, causal: bool,
                              mask=None) -> torch.Tensor:
    """Float64 reference for :func:`local_attention`: the full L x L score matrix under
    a band mask (and the key mask)."""
    B, H, L, _ = check_qkv(q, k, v, mask, same_length=True)
    window = check_window(window)
    ones = torch.ones(L, L, dtype=torch.bool, device=q.device)
    if causal:
        band = ones.tril().triu(-(window - 1))
    else:
        band = ones.tril(window // 2).triu(-(window // 2))
    allowed = band.expand(B, 1, L, L)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return reference_attention(q, k, v, allowed)
