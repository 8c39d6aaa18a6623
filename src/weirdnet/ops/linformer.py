"""Linformer attention (Wang et al. 2020) and its float64 reference.

Keys and values are mapped along the sequence axis from n positions to ``k`` with learned
matrices E, F (k, max_len), shared by all heads:

    out = softmax(q (E_n K)^T / sqrt(d)) (F_n V),   E_n = E[:, :n],  F_n = F[:, :n].

A sequence shorter than max_len uses only the first n columns of E and F, which is
exactly zero-padding K and V to max_len positions.  Padded tokens (``mask`` False) have
their key and value rows zeroed before the projection, so they contribute nothing (the
softmax still runs over all k projected keys, as in the paper).  Not causal.

Shapes: q, k (B, H, n, d), v (B, H, n, dv), E, F (k, max_len), mask (B, n) bool.
Memory O(n k) per head: linear in n.
"""

from __future__ import annotations

import math

import torch

from .checks import check_float_tensor
from .softmax_attention import check_qkv, masked_sdpa


def check_projections(proj_k, proj_v, n: int, like: torch.Tensor) -> None:
    """E, F must be (k, max_len) matrices with max_len >= n, of ``like``'s dtype/device."""
    check_float_tensor(proj_k, "proj_k", 2)
    check_float_tensor(proj_v, "proj_v", 2)
    if proj_v.shape != proj_k.shape:
        raise ValueError(f"proj_v must have proj_k's shape {tuple(proj_k.shape)}, "
                         f"got {tuple(proj_v.shape)}")
    max_len = proj_k.shape[1]
    if n > max_len:
        raise ValueError(f"sequence length {n} exceeds max_len={max_len} of the Linformer "
                         f"projections; build the layer with max_len >= {n}")
    for name, p in (("proj_k", proj_k), ("proj_v", proj_v)):
        if p.dtype != like.dtype or p.device != like.device:
            raise ValueError(f"{name} must be {like.dtype} on {like.device}, got "
                             f"{p.dtype} on {p.device}")


def _project(x: torch.Tensor, proj: torch.Tensor, mask) -> torch.Tensor:
    """proj[:, :n] @ x with padded rows of x zeroed: (B, H, n, e) -> (B, H, k, e)."""
    if mask is not None:
        x = x.masked_fill(~mask[:, None, :, None], 0.0)
    return torch.matmul(proj[:, : x.shape[2]], x)


def linformer_attention(q, k, v, proj_k, proj_v, *, mask=None,
                        dropout_p: float = 0.0) -> torch.Tensor:
    """Linformer attention: (B, H, n, dv).  ``proj_k`` = E, ``proj_v`` = F: (k, max_len)."""
    check_qkv(q, k, v, mask, same_length=True)
    check_projections(proj_k, proj_v, q.shape[2], q)
    return masked_sdpa(q, _project(k, proj_k, mask), _project(v, proj_v, mask),
                       dropout_p=dropout_p)


def linformer_reference(q, k, v, proj_k, proj_v, *, mask=None) -> torch.Tensor:
    """Float64 reference for :func:`linformer_attention`: E, F zero-padding written out
    (K, V padded to max_len rows), explicit score matrix and softmax."""
    B, H, n, _ = check_qkv(q, k, v, mask, same_length=True)
    check_projections(proj_k, proj_v, n, q)
    q, k, v = q.double(), k.double(), v.double()
    if mask is not None:
        keep = mask[:, None, :, None].double()
        k, v = k * keep, v * keep
    pad = proj_k.shape[1] - n
    k_full = torch.cat([k, k.new_zeros(B, H, pad, k.shape[-1])], 2)
    v_full = torch.cat([v, v.new_zeros(B, H, pad, v.shape[-1])], 2)
    kp = torch.einsum("rm,bhmd->bhrd", proj_k.double(), k_full)
    vp = torch.einsum("rm,bhmd->bhrd", proj_v.double(), v_full)
    scores = torch.einsum("bhid,bhrd->bhir", q, kp) / math.sqrt(q.shape[-1])
    return torch.einsum("bhir,bhre->bhie", torch.softmax(scores, -1), vp)
