"""The direct O(L^2) Weird-attention formula, in float64: the ground truth for tests.

    O_i = sum_{j <= i} a_{i-j} e^{A_j} V_j / sum_{j <= i} a_{i-j} e^{A_j},
    a_d = prod_{k in bits(d)} W_k,  log W_k = log_w[k]

(anti-causal when ``reverse``: j >= i and a_{j-i}).  The kernel ``a_d`` is materialised for
every distance d < L and the weights are normalised with a softmax over j, which is exact
in float64 for any magnitudes.  Padded sources (``mask`` False) get weight 0; an output
whose window holds no real token is NaN (0/0), as the formula says.

Memory is O(rows * L * D) per block of output rows, so it is practical up to a few
thousand positions.  It is differentiable with autograd (all of a, v, log_w).
"""

from __future__ import annotations

import torch

from .scan_checks import check_scan_inputs, levels_needed

_ROW_BLOCK_ELEMENTS = 1 << 24


def log_kernel(log_w: torch.Tensor, length: int) -> torch.Tensor:
    """log a_d for d = 0 .. length-1: (length, D), float64, differentiable in log_w."""
    nbits = max(1, levels_needed(length))
    d = torch.arange(length, device=log_w.device)
    bits = ((d.unsqueeze(1) >> torch.arange(nbits, device=log_w.device)) & 1).to(torch.float64)
    return bits @ log_w[:nbits].to(torch.float64)


def weird_scan_reference(a, v, log_w, *, reverse=False, mask=None):
    """Float64 reference for :func:`weirdnet.ops.weird_scan`; same arguments.

    Returns O (B, L, D) in float64.
    """
    B, L, D = check_scan_inputs(a, v, log_w, mask)
    a, v = a.to(torch.float64), v.to(torch.float64)
    if reverse:
        a, v = a.flip(1), v.flip(1)
        mask = None if mask is None else mask.flip(1)
    log_a = log_kernel(log_w, L)  # (L, D)
    i = torch.arange(L, device=a.device)
    rows = max(1, _ROW_BLOCK_ELEMENTS // max(1, B * L * D))
    outs = []
    for start in range(0, L, rows):
        ii = i[start : start + rows]
        dist = ii.unsqueeze(1) - i.unsqueeze(0)  # (r, L): i - j
        causal = dist >= 0
        logits = a.unsqueeze(1) + log_a[dist.clamp(min=0)].unsqueeze(0)  # (B, r, L, D)
        keep = causal.view(1, len(ii), L, 1)
        if mask is not None:
            keep = keep & mask.view(B, 1, L, 1)
        logits = logits.masked_fill(~keep, float("-inf"))
        empty = ~keep.any(2, keepdim=True)  # no real token in reach: 0/0
        p = torch.softmax(logits.masked_fill(empty, 0.0), dim=2)  # NaN-free gradients
        out = (p * v.unsqueeze(1)).sum(2)
        outs.append(torch.where(empty.squeeze(2), torch.full_like(out, float("nan")), out))
    out = torch.cat(outs, 1) if outs else a.new_zeros((B, 0, D))
    return out.flip(1) if reverse else out
