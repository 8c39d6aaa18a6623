"""Rotary position embedding (RoPE; Su et al. 2021), in the half-split layout of Llama and
GPT-NeoX: channel i of the first half pairs with channel i of the second.

For a head vector x (width d, even) at position p, with frequencies
``f_i = theta ** (-2 i / d)`` (i < d / 2) and angles ``a_i = p · f_i``::

    rotary(x)[:d/2] = x[:d/2] cos a - x[d/2:] sin a
    rotary(x)[d/2:] = x[d/2:] cos a + x[:d/2] sin a

so that ``<rotary(q, p), rotary(k, s)>`` depends on p and s only through p - s.
"""

from __future__ import annotations

import torch


def rotary_angles(positions: torch.Tensor, head_dim: int, theta: float = 10000.0,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of the angles, each (B, 1, L, head_dim), for positions (B, L) (integers).
    The angles are computed in float32 (float64 for float64 outputs), as Llama does."""
    if head_dim % 2:
        raise ValueError(f"rotary positions need an even head width, got {head_dim}")
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                             dtype=torch.int64).to(work) / head_dim))
    angles = positions.to(work)[..., None] * inv_freq  # (B, L, d/2)
    angles = torch.cat((angles, angles), dim=-1)[:, None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, d) rotated by the angles of :func:`rotary_angles`: (B, H, L, d)."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


def token_positions(mask: torch.Tensor | None, batch: int, length: int,
                    device: torch.device, start: torch.Tensor | None = None) -> torch.Tensor:
    """Positions (B, L) that count real tokens only (as the backbone's learned positions
    do): a token's position is the number of real tokens before it, plus ``start`` (B,)."""
    if mask is None:
        pos = torch.arange(length, device=device).expand(batch, length)
    else:
        pos = (mask.long().cumsum(1) - 1).clamp(min=0)
    return pos if start is None else pos + start.unsqueeze(1)
