"""The block step in plain PyTorch ops: the specification the fused C step is tested
against (in float64), and what it computes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..weird_scan import pytorch as scan_torch
from .weights import BlockWeights


def levels_of_ring(ring: torch.Tensor) -> int:
    """K for scan ring buffers of 2^K - 1 rows."""
    return (ring.shape[0] + 1).bit_length() - 1


def block_step_reference(weights: BlockWeights, x: torch.Tensor, ring_m: torch.Tensor,
                         ring_h: torch.Tensor, ring_u: torch.Tensor, t0: int) -> torch.Tensor:
    """x (B, D), the residual stream at the token of position ``t0``; ring_* (2^K - 1, B,
    D), the scan's decoding state (updated in place).  Returns the block's output (B, D)."""
    w = weights
    h = F.layer_norm(x, (w.dim,), w.norm_mix_weight, w.norm_mix_bias, w.eps_mix)
    a, v = F.linear(h, w.a_weight, w.a_bias), F.linear(h, w.v_weight, w.v_bias)
    # the C step's rings hold natural-log states (H = e^m h), not the PyTorch backend's
    # powers of two: its own step's operations (pytorch.extend_at, pow2_scale=False)
    o = scan_torch.extend_at(a[:, None], v[:, None], w.log_w, None, ring_m, ring_h, ring_u,
                             levels_of_ring(ring_m), torch.tensor(t0),
                             pow2_scale=False)[:, 0]
    x = x + F.linear(o, w.o_weight, w.o_bias)
    h = F.layer_norm(x, (w.dim,), w.norm_ffn_weight, w.norm_ffn_bias, w.eps_ffn)
    h = F.linear(h, w.inner_weight, w.inner_bias)
    h = F.gelu(h) if w.activation == "gelu" else F.leaky_relu(h, 0.01)
    return x + F.linear(h, w.outer_weight, w.outer_bias)
