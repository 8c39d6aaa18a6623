"""Float64 references of the DBA ops: explicit per-(batch, head) matrices, for tests.

Memory O(n^2) per batch row and head; differentiable with autograd.
"""

from __future__ import annotations

import math

import torch

from .checks import check_cross_inputs, check_dba_inputs


def _weights_reference(keys, z, real) -> torch.Tensor:
    """Explicit d_p × n softmax over the real positions (0 elsewhere, all 0 if none)."""
    w = torch.zeros(z.shape[0], keys.shape[0], dtype=torch.float64, device=keys.device)
    idx = real.nonzero().flatten()
    if len(idx):
        s = z @ keys[idx].T
        e = torch.exp(s - s.max(dim=1, keepdim=True).values)
        w[:, idx] = e / e.sum(dim=1, keepdim=True)
    return w


def _attention_map(q_l, k_l, r) -> torch.Tensor:
    """P' = softmax((Q_l R)(K_l R)ᵀ / √d_in), d_p × d_p."""
    return torch.softmax((q_l @ r) @ (k_l @ r).T / math.sqrt(r.shape[1]), dim=1)


def _real(mask, B: int, n: int, device) -> torch.Tensor:
    return torch.ones(B, n, dtype=torch.bool, device=device) if mask is None else mask


def _z_for(z, b: int, h: int):
    return z[h] if z.dim() == 3 else z[b, h]


def dba_reference(q, k, v, z, wr, wc, r, mask=None) -> torch.Tensor:
    """Float64 reference for :func:`dba_attention`: the full n × n map of eqs. 6–7,

        P_φ = W'_r P' W'_cᵀ,  out = P_φ V,

    built per batch row and head.  Memory O(n²); differentiable.
    """
    B, H, n, d, d_p, d_in = check_dba_inputs(q, k, v, z, wr, wc, r, mask)
    q, k, v, z, wr, wc, r = (t.to(torch.float64) for t in (q, k, v, z, wr, wc, r))
    real = _real(mask, B, n, q.device)
    rows = []
    for b in range(B):
        heads = []
        for h in range(H):
            zb = _z_for(z, b, h)
            q_l = _weights_reference(q[b, h], zb, real[b]) @ q[b, h]
            k_l = _weights_reference(k[b, h], zb, real[b]) @ k[b, h]
            wc_bh = wc[b, h] * real[b].to(torch.float64).unsqueeze(1)
            full = wr[b, h] @ _attention_map(q_l, k_l, r[h]) @ wc_bh.T  # n × n
            heads.append(full @ v[b, h])
        rows.append(torch.stack(heads))
    return torch.stack(rows)


def dba_compress_reference(keys, values, z, mask=None) -> torch.Tensor:
    """Float64 reference for :func:`dba_compress` (explicit per-(batch, head) softmax)."""
    B, H, n, _ = keys.shape
    keys, values, z = (t.to(torch.float64) for t in (keys, values, z))
    real = _real(mask, B, n, keys.device)
    out = [[_weights_reference(keys[b, h], _z_for(z, b, h), real[b])
            @ values[b, h if values.shape[1] > 1 else 0] for h in range(H)] for b in range(B)]
    return torch.stack([torch.stack(row) for row in out])


def dba_cross_reference(q, k_c, v_c, z_q, wr, r, mask=None) -> torch.Tensor:
    """Float64 reference for :func:`dba_cross_attention`: the explicit n × d_p map
    W'_r P' applied to V_2, per batch row and head.  Differentiable."""
    B, H, n, d, d_p, d_in = check_cross_inputs(q, k_c, v_c, z_q, wr, r, mask)
    q, k_c, v_c, z_q, wr, r = (t.to(torch.float64) for t in (q, k_c, v_c, z_q, wr, r))
    real = _real(mask, B, n, q.device)
    out = [[(wr[b, h] @ _attention_map(
        _weights_reference(q[b, h], z_q[b, h], real[b]) @ q[b, h], k_c[b, h], r[h]))
        @ v_c[b, h] for h in range(H)] for b in range(B)]
    return torch.stack([torch.stack(row) for row in out])
