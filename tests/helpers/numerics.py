"""Numerical helpers shared by the tests: relative errors, random weights and masks."""

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere gives inf (never passes)."""
    out, ref = out.double(), ref.double()
    if torch.isnan(out).any() or torch.isnan(ref).any():
        return float("inf")
    denom = ref.norm().item()
    diff = (out - ref).norm().item()
    return diff if denom == 0 else diff / denom


def random_log_w(levels: int, dim: int, mode: str = "cumexp", dtype=torch.float64,
                 generator=None) -> torch.Tensor:
    """log W as each weight mode passes it: cumsum(w), w, or zeros; w ~ N(0, 1)."""
    w = torch.randn(levels, dim, dtype=dtype, generator=generator)
    if mode == "cumexp":
        return w.cumsum(0)
    if mode == "exp":
        return w
    return torch.zeros_like(w)


def random_padding_mask(B: int, L: int, g: torch.Generator) -> torch.Tensor:
    """(B, L) bool, ~25% padding at random; row 0 fully real, the last row fully padded
    (B >= 3)."""
    mask = torch.rand(B, L, generator=g) > 0.25
    mask[0] = True
    mask[-1] = False
    return mask
