"""Inputs of the scan tests: random (a, v, log_w, mask) and where outputs are defined."""

import torch

from weirdnet.ops import levels_needed

from .numerics import random_log_w


def make_inputs(B, L, D, mode="cumexp", seed=0, masked=True, scale=2.0):
    """Random float64 (a, v, log_w, mask); the mask drops ~25% of tokens at random."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(B, L, D, dtype=torch.float64, generator=g) * scale
    v = torch.randn(B, L, D, dtype=torch.float64, generator=g)
    log_w = random_log_w(max(1, levels_needed(L)), D, mode, generator=g)
    mask = torch.rand(B, L, generator=g) > 0.25 if masked else None
    return a, v, log_w, mask


def reach_mask(mask, B, L, reverse):
    """(B, L, 1) True where an output has a real token in its window (reference finite)."""
    if mask is None:
        return torch.ones(B, L, 1, dtype=torch.bool)
    m = mask.flip(1) if reverse else mask
    reach = m.cumsum(1) > 0
    return (reach.flip(1) if reverse else reach).unsqueeze(-1)
