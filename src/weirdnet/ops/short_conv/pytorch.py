"""The short convolution as PyTorch's depthwise ``conv1d``: the path for every device and
dtype the C kernel does not take (CUDA, half precision), differentiated by autograd."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def short_conv_torch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     state: torch.Tensor | None) -> torch.Tensor:
    """x (B, L, D), weight (D, k), bias (D,) or None, state (B, k-1, D) or None (zeros)
    -> y (B, L, D); see :func:`~weirdnet.ops.short_conv.reference.short_conv_reference`."""
    B, _, D = x.shape
    k = weight.shape[1]
    past = x.new_zeros(B, k - 1, D) if state is None else state
    full = torch.cat((past, x), dim=1)
    return F.conv1d(full.transpose(1, 2), weight[:, None], bias, groups=D).transpose(1, 2)
