"""Float64 references of the DBA ops: explicit per-(batch, head) matrices, for tests.

Memory O(n^2) per batch row and head; differentiable with autograd.
"""

from __future__ import annotations

import math

import torch

from .checks import check_authors_inputs, check_cross_inputs, check_dba_inputs


def _weights_reference(keys, z, real) -> torch.Tensor:
    """Explicit d_p × n softmax over the real positions (0 elsewhere, all 0 if none)."""
    w = torch.zeros(z.shape[0], keys.shape[0], dtype=keys.dtype, device=keys.device)
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


def _layer_norm_reference(t, weight, bias, eps: float):
    """LayerNorm over the last axis written out (biased variance)."""
    centred = t - t.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + eps) * weight + bias


def _authors_one(x, z, w, heads: int, real, eps: float):
    """One sequence of :func:`dba_authors_reference`: x (n, D), z (d_p, D) -> (Y, C)."""
    D, d_p, d_in = x.shape[1], z.shape[0], w.pq_w.shape[0]
    e, d = d_in // heads, D // heads
    p_q = (z @ w.pq_w.T + w.pq_b) / math.sqrt(e)            # d_p × d_in
    p_k, p_v = x @ w.pk_w.T, x @ w.pv_w.T + w.pv_b           # n × d_in, n × D
    c = torch.cat([_weights_reference(p_k[:, h * e:(h + 1) * e], p_q[:, h * e:(h + 1) * e],
                                      real) @ p_v[:, h * d:(h + 1) * d]
                   for h in range(heads)], 1)                # d_p × D
    q = (c @ w.q_w.T + w.q_b) / math.sqrt(e)
    k, v = c @ w.k_w.T + w.k_b, c @ w.v_w.T + w.v_b
    o = torch.cat([torch.softmax(q[:, h * e:(h + 1) * e] @ k[:, h * e:(h + 1) * e].T, 1)
                   @ v[:, h * d:(h + 1) * d] for h in range(heads)], 1)
    m = _layer_norm_reference(o, w.ln_w, w.ln_b, eps)
    rec = x @ w.rec_w.T + w.rec_b                            # n × H·d_p
    y = torch.cat([torch.softmax(rec[:, h * d_p:(h + 1) * d_p], 1) @ m[:, h * d:(h + 1) * d]
                   for h in range(heads)], 1)
    return y @ w.o_w.T + w.o_b, c


def dba_authors_reference(x, z, w, heads: int, mask=None, eps: float = 1e-5):
    """Float64 reference for :func:`dba_authors_attention`, in the authors' order: project
    X to keys and values first, then compress with an explicit d_p × n softmax per head,
    a d_p × d_p attention, a written-out LayerNorm and an explicit n × d_p softmax
    reconstruction, per batch row.  Returns (Y (B, n, D), C (B, d_p, D)); differentiable."""
    B, n, _, _, _ = check_authors_inputs(x, z, w, heads, mask)
    x, z = x.to(torch.float64), z.to(torch.float64)
    w = type(w)(*(t.to(torch.float64) for t in w))
    real = _real(mask, B, n, x.device)
    outs = [_authors_one(x[b], z if z.dim() == 2 else z[b], w, heads, real[b], eps)
            for b in range(B)]
    return torch.stack([y for y, _ in outs]), torch.stack([c for _, c in outs])
