"""The short causal depthwise convolution: :func:`short_conv` (fused C kernels on CPU,
``conv1d`` elsewhere) and its specification :func:`short_conv_reference`."""

from .op import short_conv
from .reference import short_conv_reference

__all__ = ["short_conv", "short_conv_reference"]
