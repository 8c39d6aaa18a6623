"""Argument checks of the DBA ops: every problem is a ValueError naming the argument."""

from __future__ import annotations

import torch

from ..checks import check_float_tensor, check_mask


def check_same(name: str, t: torch.Tensor, ref: torch.Tensor, ref_name: str = "q") -> None:
    if t.dtype != ref.dtype or t.device != ref.device:
        raise ValueError(f"{name} must have the dtype and device of {ref_name} ({ref.dtype}, "
                         f"{ref.device}), got {t.dtype} on {t.device}")


def check_shape(name: str, t: torch.Tensor, want: tuple, meaning: str) -> None:
    if tuple(t.shape) != want:
        raise ValueError(f"{name} must have shape {meaning} = {want}, got {tuple(t.shape)}")


def _check_z(z: torch.Tensor, B: int, H: int, d: int, name: str = "z") -> int:
    """z: (H, d_p, d) learned or (B, H, d_p, d) per sample; returns d_p."""
    if not isinstance(z, torch.Tensor) or z.dim() not in (3, 4):
        got = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        raise ValueError(f"{name} must be a tensor (heads, d_p, d) or (batch, heads, d_p, d), "
                         f"got {got}")
    check_float_tensor(z, name, z.dim())
    lead = (H,) if z.dim() == 3 else (B, H)
    if tuple(z.shape[:-2]) != lead or z.shape[-1] != d or z.shape[-2] < 1:
        raise ValueError(f"{name} must have shape {(*lead, 'd_p', d)} with d_p >= 1, "
                         f"got {tuple(z.shape)}")
    return z.shape[-2]


def _check_r(r: torch.Tensor, H: int, d: int) -> int:
    """r: (H, d, d_in); returns d_in."""
    check_float_tensor(r, "r", 3)
    if r.shape[:2] != (H, d) or r.shape[2] < 1:
        raise ValueError(f"r must have shape (heads, d, d_in) = {(H, d, 'd_in')} with "
                         f"d_in >= 1, got {tuple(r.shape)}")
    return r.shape[2]


def check_mask_on(mask, B: int, n: int, ref: torch.Tensor, name: str = "mask") -> None:
    check_mask(mask, B, n, name)
    if mask is not None and mask.device != ref.device:
        raise ValueError(f"{name} must be on {ref.device}, got {mask.device}")


def check_dba_inputs(q, k, v, z, wr, wc, r, mask=None) -> tuple[int, ...]:
    """Validate :func:`dba_attention` arguments; returns (B, H, n, d, d_p, d_in)."""
    check_float_tensor(q, "q", 4)
    B, H, n, d = q.shape
    for name, t in (("k", k), ("v", v)):
        check_float_tensor(t, name, 4)
        check_shape(name, t, (B, H, n, d), "(batch, heads, n, d) like q")
        check_same(name, t, q)
    d_p = _check_z(z, B, H, d)
    for name, t in (("wr", wr), ("wc", wc)):
        check_float_tensor(t, name, 4)
        check_shape(name, t, (B, H, n, d_p), "(batch, heads, n, d_p)")
        check_same(name, t, q)
    d_in = _check_r(r, H, d)
    for name, t in (("z", z), ("r", r)):
        check_same(name, t, q)
    check_mask_on(mask, B, n, q)
    return B, H, n, d, d_p, d_in


def check_cross_inputs(q, k_c, v_c, z_q, wr, r, mask=None) -> tuple[int, ...]:
    """Validate :func:`dba_cross_attention` arguments; returns (B, H, n, d, d_p, d_in)."""
    check_float_tensor(q, "q", 4)
    B, H, n, d = q.shape
    d_p = _check_z(z_q, B, H, d, "z_q")
    for name, t in (("k_c", k_c), ("v_c", v_c)):
        check_float_tensor(t, name, 4)
        check_shape(name, t, (B, H, d_p, d), "(batch, heads, d_p, d)")
        check_same(name, t, q)
    check_float_tensor(wr, "wr", 4)
    check_shape("wr", wr, (B, H, n, d_p), "(batch, heads, n, d_p)")
    d_in = _check_r(r, H, d)
    for name, t in (("z_q", z_q), ("wr", wr), ("r", r)):
        check_same(name, t, q)
    check_mask_on(mask, B, n, q)
    return B, H, n, d, d_p, d_in


def _check_weight(name: str, t, shape: tuple, x: torch.Tensor) -> None:
    check_float_tensor(t, f"w.{name}", len(shape))
    check_shape(f"w.{name}", t, shape, "for this width, d_in and d_p")
    check_same(f"w.{name}", t, x, "x")


def check_authors_inputs(x, z, w, heads, mask=None) -> tuple[int, ...]:
    """Validate :func:`dba_authors_attention` arguments; returns (B, n, D, d_p, d_in)."""
    check_float_tensor(x, "x", 3)
    B, n, D = x.shape
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or D % heads:
        raise ValueError(f"heads must be a positive int dividing D={D}, got {heads!r}")
    if not isinstance(z, torch.Tensor) or z.dim() not in (2, 3):
        got = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        raise ValueError(f"z must be a tensor (d_p, {D}) or ({B}, d_p, {D}), got {got}")
    check_float_tensor(z, "z", z.dim())
    if tuple(z.shape[:-2]) not in ((), (B,)) or z.shape[-1] != D or z.shape[-2] < 1:
        raise ValueError(f"z must have shape (d_p, {D}) or ({B}, d_p, {D}) with d_p >= 1, "
                         f"got {tuple(z.shape)}")
    check_same("z", z, x, "x")
    d_p, d_in = z.shape[-2], w.pq_w.shape[0] if isinstance(w.pq_w, torch.Tensor) else 0
    if d_in < 1 or d_in % heads:
        raise ValueError(f"d_in (rows of w.pq_w) must be a positive multiple of heads="
                         f"{heads}, got {d_in}")
    shapes = {"pq_w": (d_in, D), "pq_b": (d_in,), "pk_w": (d_in, D), "pv_w": (D, D),
              "pv_b": (D,), "q_w": (d_in, D), "q_b": (d_in,), "k_w": (d_in, D),
              "k_b": (d_in,), "v_w": (D, D), "v_b": (D,), "ln_w": (D,), "ln_b": (D,),
              "rec_w": (heads * d_p, D), "rec_b": (heads * d_p,), "o_w": (D, D), "o_b": (D,)}
    for name, shape in shapes.items():
        _check_weight(name, getattr(w, name), shape, x)
    check_mask_on(mask, B, n, x)
    return B, n, D, d_p, d_in
