"""Relation's position mixing (Relation paper §3.1.2, docs/design.md §3): a masked mean gating G.

Bidirectional (the paper)::

    out_i = h̄ ⊙ G_i,    h̄ = Σ_j m_j H_j / max(1, Σ_j m_j)

Causal (extension)::

    out_i = h̄_i ⊙ G_i,  h̄_i = Σ_{j≤i} m_j H_j / max(1, Σ_{j≤i} m_j)

``m_j`` is the mask (1 = real token).  A sequence (or prefix) without a real token has
h̄ = 0, so every output is finite.  Padded positions contribute nothing, whatever they hold
(even inf/NaN): they are selected out, not multiplied by 0.  Cost O(B·L·d).

The causal prefix sum is a sequential ``cumsum`` (on CPU float32 it accumulates in float64
and rounds each prefix), so an output never depends on later positions, and
:func:`relation_mix_continue` (the decoder) keeps a float64 running sum to reproduce it.
"""

from __future__ import annotations

import torch

from .checks import check_float_tensor, check_mask, check_same_layout

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def check_relation_inputs(h, g, mask=None) -> tuple[int, int, int]:
    """Validate ``relation_mix`` arguments; returns (B, L, d)."""
    check_float_tensor(h, "h", 3)
    check_float_tensor(g, "g", 3)
    check_same_layout(h, g, "h", "g")
    if g.device != h.device:
        raise ValueError(f"h and g must be on one device, got {h.device} and {g.device}")
    B, L, d = h.shape
    check_mask(mask, B, L)
    if mask is not None and mask.device != h.device:
        raise ValueError(f"mask must be on {h.device}, got {mask.device}")
    return B, L, d


def _masked(h: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """h with padded rows set to 0 (selected, so inf/NaN there cannot leak)."""
    if mask is None:
        return h
    return torch.where(mask.unsqueeze(-1), h, h.new_zeros(()))


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype the sums and the division are done in: float32 for 16-bit inputs."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def _counts(mask: torch.Tensor | None, B: int, L: int, causal: bool, like: torch.Tensor):
    """Number of real tokens averaged at each output, at least 1: (B or 1, L or 1, 1)."""
    if mask is None:
        if causal:
            n = torch.arange(1, L + 1, device=like.device, dtype=like.dtype)
            return n.view(1, L, 1)
        return like.new_full((1, 1, 1), float(max(L, 1)))
    n = mask.cumsum(1) if causal else mask.sum(1, keepdim=True)
    return n.clamp(min=1).to(like.dtype).unsqueeze(-1)


def relation_mean(h: torch.Tensor, mask: torch.Tensor | None = None,
                  causal: bool = False) -> torch.Tensor:
    """h̄: the masked mean of ``h`` (B, L, d) over the sequence, (B, 1, d), or over each
    prefix when ``causal``, (B, L, d).  0 where no real token is averaged."""
    B, L, _ = h.shape
    hm, acc = _masked(h, mask), _acc_dtype(h.dtype)
    if causal:
        total = torch.cumsum(hm, dim=1, dtype=acc)
    else:
        total = hm.sum(1, keepdim=True, dtype=acc)
    return (total / _counts(mask, B, L, causal, total)).to(h.dtype)


def relation_mix(h: torch.Tensor, g: torch.Tensor, mask: torch.Tensor | None = None,
                 causal: bool = False) -> torch.Tensor:
    """Relation's mixing step h̄ ⊙ G.

    Args:
        h, g: (B, L, d) floating, same dtype and device (H = X W_h + b_h, G = X W_g + b_g).
        mask: optional (B, L) bool, True = real token.
        causal: prefix means (decoder, extension) instead of one mean per sequence.

    Returns (B, L, d) in ``h``'s dtype.
    """
    check_relation_inputs(h, g, mask)
    return relation_mean(h, mask, causal) * g


def relation_mix_continue(h: torch.Tensor, g: torch.Tensor, mask: torch.Tensor | None,
                          total: torch.Tensor, count: torch.Tensor):
    """Causal ``relation_mix`` for T tokens continuing a sequence (incremental decoding).

    Args:
        h, g: (B, T, d); mask: optional (B, T) bool.
        total: (B, d) float64, Σ m_j H_j over the tokens already seen.
        count: (B,) int64, their number of real tokens.

    Returns ``(out, total, count)``: out (B, T, d) equals the full causal pass at these T
    positions; ``total`` and ``count`` are new tensors that include the T tokens.
    """
    B, T, d = check_relation_inputs(h, g, mask)
    if tuple(total.shape) != (B, d) or tuple(count.shape) != (B,):
        raise ValueError(
            f"running state must have shapes total (B, d) = {(B, d)} and count (B,) = {(B,)},"
            f" got {tuple(total.shape)} and {tuple(count.shape)}"
        )
    hm = _masked(h, mask).to(torch.float64)
    # one sequential float64 sum from the stored total: the same additions as the full pass
    sums = torch.cumsum(torch.cat([total.unsqueeze(1), hm], 1), dim=1)[:, 1:]
    real = torch.ones(B, T, dtype=torch.long, device=h.device) if mask is None else mask.long()
    counts = count.unsqueeze(1) + real.cumsum(1)
    acc = _acc_dtype(h.dtype)
    hbar = (sums.to(acc) / counts.clamp(min=1).to(acc).unsqueeze(-1)).to(h.dtype)
    return hbar * g, sums[:, -1] if T else total, counts[:, -1] if T else count


def relation_reference(h, g, mask=None, causal: bool = False) -> torch.Tensor:
    """Float64 reference for :func:`relation_mix`, with the explicit (B, L, L) averaging matrix

        A[b, i, j] = k_bij / max(1, Σ_j k_bij),  k_bij = m_bj [and j ≤ i if causal],

    out = (A @ H) ⊙ G.  Padded rows of ``h`` are zeroed first (0 · inf would be NaN).
    Memory O(B·L²): for tests.  Differentiable.
    """
    B, L, _ = check_relation_inputs(h, g, mask)
    h, g = h.to(torch.float64), g.to(torch.float64)
    real = torch.ones(B, L, dtype=torch.bool, device=h.device) if mask is None else mask
    keep = real.unsqueeze(1).expand(B, L, L)
    if causal:
        keep = keep & torch.ones(L, L, dtype=torch.bool, device=h.device).tril()
    keep = keep.to(torch.float64)
    weights = keep / keep.sum(-1, keepdim=True).clamp(min=1)
    h = torch.where(real.unsqueeze(-1), h, torch.zeros((), dtype=h.dtype, device=h.device))
    return (weights @ h) * g
