"""The short convolution as PyTorch's depthwise ``conv1d``: the path for every device and
dtype the C kernel does not take (CUDA, half precision), differentiated by autograd."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..packing import same_document


def short_conv_torch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     state: torch.Tensor | None) -> torch.Tensor:
    """x (B, L, D), weight (D, k), bias (D,) or None, state (B, k-1, D) or None (zeros)
    -> y (B, L, D); see :func:`~weirdnet.ops.short_conv.reference.short_conv_reference`."""
    B, _, D = x.shape
    k = weight.shape[1]
    past = x.new_zeros(B, k - 1, D) if state is None else state
    full = torch.cat((past, x), dim=1)
    return F.conv1d(full.transpose(1, 2), weight[:, None], bias, groups=D).transpose(1, 2)


def short_conv_packed_torch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                            segments: torch.Tensor) -> torch.Tensor:
    """The convolution of packed documents (``segments`` (B, L): canonical segment ids),
    each tap x_{t-j} kept only inside t's document: a sum of k shifted, gated copies."""
    L, k = x.shape[1], weight.shape[1]
    y = x * weight[:, k - 1]
    for j in range(1, min(k, L)):
        same = same_document(segments, j).unsqueeze(-1)
        tap = (x[:, :-j] * weight[:, k - 1 - j]).masked_fill(~same, 0.0)
        y = y + F.pad(tap, (0, 0, j, 0))
    return y if bias is None else y + bias
