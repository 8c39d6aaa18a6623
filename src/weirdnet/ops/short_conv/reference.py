"""The specification of the short causal depthwise convolution, in plain tensor ops.

Any dtype and device; the tests run it in float64 against the fast paths.
"""

from __future__ import annotations

import torch


def short_conv_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                         state: torch.Tensor | None = None,
                         doc_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``y_t = bias + Σ_{i<k} weight[:, i] ⊙ x_{t-k+1+i}`` per channel.

    x (B, L, D); weight (D, k) (``weight[:, k-1]`` multiplies the current position, as in
    ``Conv1d`` over the left-padded sequence); bias (D,) or None; state (B, k-1, D), the
    k - 1 inputs before the sequence, or None for zeros.  With packed documents
    (``doc_ids`` (B, L), no state) each document is convolved alone: a tap before the
    document's first position counts for nothing.  Returns y (B, L, D)."""
    if doc_ids is not None:
        return _documents_alone(x, weight, bias, doc_ids)
    B, L, D = x.shape
    k = weight.shape[1]
    past = x.new_zeros(B, k - 1, D) if state is None else state
    full = torch.cat((past, x), dim=1)  # (B, k - 1 + L, D)
    y = sum(full[:, i:i + L] * weight[:, i] for i in range(k))
    return y if bias is None else y + bias


def _documents_alone(x, weight, bias, doc_ids) -> torch.Tensor:
    """Each document of each row through the unpacked form by itself, put back in place."""
    rows = []
    for b in range(x.shape[0]):
        starts = [0] + [t for t in range(1, x.shape[1]) if doc_ids[b, t] != doc_ids[b, t - 1]]
        ends = starts[1:] + [x.shape[1]]
        rows.append(torch.cat([short_conv_reference(x[b:b + 1, s:e], weight, bias)
                               for s, e in zip(starts, ends)], dim=1))
    return torch.cat(rows, dim=0)
