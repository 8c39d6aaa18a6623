"""The direct O(L^2) Weird-attention formula, in float64: the ground truth for tests.

    O_i = sum_{j <= i} a_{i-j} e^{A_j} V_j / sum_{j <= i} a_{i-j} e^{A_j},
    a_d = prod_{k in bits(d)} W_k,  log W_k = log_w[k]

(anti-causal when ``reverse``: j >= i and a_{j-i}).  The kernel ``a_d`` is materialised for
every distance d < L and the weights are normalised with a softmax over j, which is exact
in float64 for any magnitudes.  Padded sources (``mask`` False) are left out, whatever
their values; an output whose window holds no real token is NaN (0/0), as the formula says
(the fast backends return 0 there).  With ``doc_ids`` (packed documents, see
:mod:`weirdnet.ops.packing`) j must also lie in i's document.

Non-finite values: this function is the specification the backends follow.
  * A NaN or +inf logit A_j, or a NaN or infinite V_j, makes every output with j in its
    window NaN (the softmax over j is NaN, as ``torch.softmax`` is for +inf; V enters the
    logits as ``A + 0 V``, so an infinite value gives NaN, not inf).
  * A -inf logit is a zero weight: outputs with a finite-A real token in their window are
    those of the sequence without j; an output whose real tokens are all -inf is NaN (0/0).
  * Gradients are autograd's through this formula: every real input in the window of a NaN
    output gets NaN dA and dV, padded inputs get 0, and every level of ``log_w`` enters every
    distance's log-weight (``0 * sum(log_w)`` is added), so d log_w of a channel is NaN as
    soon as one output of that channel is NaN.  ``log_w`` itself must be finite: a
    non-finite entry in a level the scan uses is refused with a ValueError (on the CPU).

Memory is O(rows * L * D) per block of output rows, so it is practical up to a few
thousand positions.  It is differentiable with autograd (all of a, v, log_w).
"""

from __future__ import annotations

import torch

from ..checks import check_finite_log_w, check_scan_inputs, levels_needed, on_host
from ..packing import segment_ids

_ROW_BLOCK_ELEMENTS = 1 << 24


def log_kernel(log_w: torch.Tensor, length: int) -> torch.Tensor:
    """log a_d for d = 0 .. length-1: (length, D), float64, differentiable in log_w.

    Only the levels a sequence of ``length`` uses (none for length 1) get a gradient; the
    ``0 * sum`` term makes a NaN gradient of any distance reach every level of its channel.
    """
    nbits = levels_needed(length)
    d = torch.arange(length, device=log_w.device)
    bits = ((d.unsqueeze(1) >> torch.arange(nbits, device=log_w.device)) & 1).to(torch.float64)
    used = log_w[:nbits].to(torch.float64)
    return bits @ used + 0 * used.sum(0)


def weird_scan_reference(a, v, log_w, *, reverse=False, mask=None, doc_ids=None):
    """Float64 reference for :func:`weirdnet.ops.weird_scan`; same arguments.

    Returns O (B, L, D) in float64.
    """
    B, L, D = check_scan_inputs(a, v, log_w, mask, doc_ids)
    if on_host(log_w):
        check_finite_log_w(log_w, levels_needed(L))
    a, v = a.to(torch.float64), v.to(torch.float64)
    segments = None if doc_ids is None else segment_ids(doc_ids)
    if reverse:
        a, v = a.flip(1), v.flip(1)
        mask = None if mask is None else mask.flip(1)
        segments = None if segments is None else segments.flip(1)
    if mask is not None:  # padding contributes nothing, not even a NaN
        v = torch.where(mask.unsqueeze(-1), v, torch.zeros((), dtype=v.dtype, device=v.device))
    score = a + 0 * v  # a NaN or infinite V poisons its logit: NaN weights, NaN gradients
    log_a = log_kernel(log_w, L)  # (L, D)
    i = torch.arange(L, device=a.device)
    rows = max(1, _ROW_BLOCK_ELEMENTS // max(1, B * L * D))
    outs = []
    for start in range(0, L, rows):
        ii = i[start : start + rows]
        dist = ii.unsqueeze(1) - i.unsqueeze(0)  # (r, L): i - j
        causal = dist >= 0
        logits = score.unsqueeze(1) + log_a[dist.clamp(min=0)].unsqueeze(0)  # (B, r, L, D)
        keep = causal.view(1, len(ii), L, 1)
        if mask is not None:
            keep = keep & mask.view(B, 1, L, 1)
        if segments is not None:
            same = segments[:, start : start + rows].unsqueeze(2) == segments.unsqueeze(1)
            keep = keep & same.unsqueeze(-1)
        logits = logits.masked_fill(~keep, float("-inf"))
        empty = ~keep.any(2, keepdim=True)  # no real token in reach: 0/0
        p = torch.softmax(logits.masked_fill(empty, 0.0), dim=2)  # NaN-free gradients
        vals = v.unsqueeze(1).masked_fill(~keep, 0.0)  # out of reach: not even 0 * NaN
        out = (p * vals).sum(2)
        outs.append(torch.where(empty.squeeze(2), torch.full_like(out, float("nan")), out))
    out = torch.cat(outs, 1) if outs else a.new_zeros((B, 0, D))
    return out.flip(1) if reverse else out
