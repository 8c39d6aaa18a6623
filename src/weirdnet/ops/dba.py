"""Dynamic Bilinear Low-Rank Attention (DBA paper §3, eqs. 7–12 and 14; docs/design.md §4).

Per batch row and head, on already projected tensors (n positions, width d)::

    W_r = softmax_n(Z Qᵀ),  W_c = softmax_n(Z Kᵀ)           (d_p × n; eqs. 11, 12)
    Q_DBA = (W_r Q) R,      K_DBA = (W_c K) R               (d_p × d_in; R: d × d_in)
    V_DBA = W'_cᵀ V                                         (d_p × d; W'_c: n × d_p)
    out   = W'_r (softmax(Q_DBA K_DBAᵀ / √d_in) V_DBA)      (n × d; eq. 10)

Padded positions (mask False) get -inf logits in both softmaxes (weight exactly 0) and
zero rows of W'_c, so they never reach a real token's output.  A sequence without a real
token has W_r = W_c = 0 and V_DBA = 0: its outputs are 0.  Padded positions must hold
finite values (0 · inf is NaN); every output of these functions is finite.

Nothing n × n is built: the cost is O(n · d_p · d) per head, for any n.

Cross-attention (eq. 14): the context is compressed to d_p rows beforehand (see
``DBACrossAttention`` in :mod:`weirdnet.layers.dba`), so keys and values arrive already
compressed (d_p × d) and only the queries are compressed, with a per-sample Z = Z_1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .checks import check_float_tensor, check_mask


def _check_same(name: str, t: torch.Tensor, ref: torch.Tensor) -> None:
    if t.dtype != ref.dtype or t.device != ref.device:
        raise ValueError(f"{name} must have the dtype and device of q ({ref.dtype}, "
                         f"{ref.device}), got {t.dtype} on {t.device}")


def _check_shape(name: str, t: torch.Tensor, want: tuple, meaning: str) -> None:
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


def _check_mask(mask, B: int, n: int, ref: torch.Tensor, name: str = "mask") -> None:
    check_mask(mask, B, n, name)
    if mask is not None and mask.device != ref.device:
        raise ValueError(f"{name} must be on {ref.device}, got {mask.device}")


def check_dba_inputs(q, k, v, z, wr, wc, r, mask=None) -> tuple[int, ...]:
    """Validate :func:`dba_attention` arguments; returns (B, H, n, d, d_p, d_in)."""
    check_float_tensor(q, "q", 4)
    B, H, n, d = q.shape
    for name, t in (("k", k), ("v", v)):
        check_float_tensor(t, name, 4)
        _check_shape(name, t, (B, H, n, d), "(batch, heads, n, d) like q")
        _check_same(name, t, q)
    d_p = _check_z(z, B, H, d)
    for name, t in (("wr", wr), ("wc", wc)):
        check_float_tensor(t, name, 4)
        _check_shape(name, t, (B, H, n, d_p), "(batch, heads, n, d_p)")
        _check_same(name, t, q)
    d_in = _check_r(r, H, d)
    for name, t in (("z", z), ("r", r)):
        _check_same(name, t, q)
    _check_mask(mask, B, n, q)
    return B, H, n, d, d_p, d_in


def check_cross_inputs(q, k_c, v_c, z_q, wr, r, mask=None) -> tuple[int, ...]:
    """Validate :func:`dba_cross_attention` arguments; returns (B, H, n, d, d_p, d_in)."""
    check_float_tensor(q, "q", 4)
    B, H, n, d = q.shape
    d_p = _check_z(z_q, B, H, d, "z_q")
    for name, t in (("k_c", k_c), ("v_c", v_c)):
        check_float_tensor(t, name, 4)
        _check_shape(name, t, (B, H, d_p, d), "(batch, heads, d_p, d)")
        _check_same(name, t, q)
    check_float_tensor(wr, "wr", 4)
    _check_shape("wr", wr, (B, H, n, d_p), "(batch, heads, n, d_p)")
    d_in = _check_r(r, H, d)
    for name, t in (("z_q", z_q), ("wr", wr), ("r", r)):
        _check_same(name, t, q)
    _check_mask(mask, B, n, q)
    return B, H, n, d, d_p, d_in


def compression_weights(keys: torch.Tensor, z: torch.Tensor,
                        mask: torch.Tensor | None = None) -> torch.Tensor:
    """W = softmax over positions of Z keysᵀ (eqs. 11, 12).

    keys: (B, H, n, d); z: (H, d_p, d) or (B, H, d_p, d); mask: optional (B, n).
    Returns (B, H, d_p, n): each row sums to 1 over the real positions (0 on padded
    ones), or is all 0 when the sequence has no real token.
    """
    logits = z @ keys.transpose(-1, -2)
    if mask is None:
        return torch.softmax(logits, dim=-1)
    pad = ~mask[:, None, None, :]
    empty = ~mask.any(1)[:, None, None, None]
    logits = logits.masked_fill(pad, float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(logits, dim=-1).masked_fill(empty, 0.0)


def _no_autocast(x: torch.Tensor):
    """The custom autograd functions run in their input's dtype: autocast off inside."""
    return torch.autocast(x.device.type, enabled=False)


class _SelfCompress(torch.autograd.Function):
    """softmax_n(Z Xᵀ) X with a lean backward: dX = Wᵀ dX_l + dSᵀ Z is built in one
    (B, H, n, d) buffer (plain autograd allocates two and their sum).  Saves X, Z and the
    (B, H, d_p, n) weights W."""

    @staticmethod
    def forward(ctx, x, z, mask):
        w = compression_weights(x, z, mask)
        ctx.save_for_backward(x, z, w)
        return w @ x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, z, w = ctx.saved_tensors
        ds = grad @ x.transpose(-1, -2)  # dW, turned into dS in place (0 where padded):
        ds.sub_((ds * w).sum(-1, keepdim=True)).mul_(w)
        dx = dz = None
        if ctx.needs_input_grad[0]:
            B, H, n, d = x.shape
            p = w.shape[-2]
            dx = w.transpose(-1, -2) @ grad
            zb = z.expand(B, H, p, d).reshape(B * H, p, d)
            dx.view(B * H, n, d).baddbmm_(ds.reshape(B * H, p, n).transpose(1, 2), zb)
        if ctx.needs_input_grad[1]:
            dz = ds @ x
            dz = dz.sum(0) if z.dim() == 3 else dz
        return dx, dz, None


def dba_compress(keys: torch.Tensor, values: torch.Tensor, z: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """Compress the sequence axis to d_p rows: softmax_n(Z keysᵀ) @ values.

    keys: (B, H, n, d); values: (B, H or 1, n, e); z: (H, d_p, d) or (B, H, d_p, d).
    Returns (B, H, d_p, e).  ``values is keys`` (self-attention) takes a fused backward.
    """
    if values is keys:
        with _no_autocast(keys):
            return _SelfCompress.apply(keys, z.to(keys.dtype), mask)
    return compression_weights(keys, z, mask) @ values


def position_softmax(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the positions (dim 1) of (B, n, c) logits: column j of the result is
    row j of a compression matrix W (eqs. 11, 12) in position-major layout.  Padded
    positions get weight 0; a sequence without a real token gets all 0."""
    if mask is None:
        return torch.softmax(logits, dim=1)
    empty = ~mask.any(1)[:, None, None]
    logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(logits, dim=1).masked_fill(empty, 0.0)


class _CompressPositions(torch.autograd.Function):
    """Forward of :func:`compress_positions`.  The backward accumulates all four products'
    gradients for X in one (B, n, c) buffer and saves only X, the weights, S and C."""

    @staticmethod
    def forward(ctx, x, w_soft, w_lin, w_out, mask):
        soft = position_softmax(x @ w_soft.transpose(-1, -2), mask)
        lin = x @ w_lin.T
        if mask is not None:
            lin.masked_fill_(~mask.unsqueeze(-1), 0.0)
        ctx.save_for_backward(x, w_soft, w_lin, w_out, soft, lin)
        ctx.mask = mask
        x_l = torch.cat([soft.transpose(1, 2) @ x, lin.transpose(1, 2) @ x], 1)
        return x_l, x @ w_out.T

    @staticmethod
    @once_differentiable
    def backward(ctx, d_xl, d_out):
        x, w_soft, w_lin, w_out, soft, lin = ctx.saved_tensors
        s = soft.shape[-1]
        d_s, d_l = d_xl[:, :s], d_xl[:, s:]
        ds = x @ d_s.transpose(1, 2)  # dS, turned into d(logits) in place:
        ds.sub_((ds * soft).sum(1, keepdim=True)).mul_(soft)  # softmax over positions
        dl = x @ d_l.transpose(1, 2)
        if ctx.mask is not None:
            dl.masked_fill_(~ctx.mask.unsqueeze(-1), 0.0)
        dx = soft @ d_s
        if lin.shape[-1]:
            dx.baddbmm_(lin, d_l)
        if w_soft.dim() == 3:
            dx.baddbmm_(ds, w_soft)
        pairs = [(dl, w_lin), (d_out, w_out)] + ([(ds, w_soft)] if w_soft.dim() == 2 else [])
        for d_a, w in pairs:
            if d_a is not None and d_a.numel():
                dx.flatten(0, 1).addmm_(d_a.flatten(0, 1), w)
        need = ctx.needs_input_grad
        d_soft = None
        if need[1]:
            d_soft = ds.transpose(1, 2) @ x if w_soft.dim() == 3 else _weight_grad(ds, x)
        d_lin = _weight_grad(dl, x) if need[2] else None
        d_wout = _weight_grad(d_out, x) if need[3] and d_out is not None else None
        return dx, d_soft, d_lin, d_wout, None


def _weight_grad(d_a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Σ_b d_aᵀ x for a weight shared over the batch: (B, n, k), (B, n, c) -> (k, c)."""
    return d_a.flatten(0, 1).T @ x.flatten(0, 1)


def compress_positions(x: torch.Tensor, w_soft: torch.Tensor, w_lin: torch.Tensor,
                       w_out: torch.Tensor, mask: torch.Tensor | None = None):
    """The position-sized part of a DBA layer, in position-major layout (X: (B, n, c)).

        S = softmax over positions of X w_softᵀ   (rows of W_r, W_c: eqs. 11, 12)
        C = X w_linᵀ with padded rows set to 0    (columns of W'_c)
        returns ([S, C]ᵀ X  (B, s + l, c),  X w_outᵀ  (B, n, r), e.g. W'_r)

    w_soft: (s, c), or (B, s, c) per sample (cross-attention's Z_1); w_lin: (l, c) and
    w_out: (r, c), either may have 0 rows.  Padded positions get weight 0 in S and C, so
    [S, C]ᵀ X ignores them; an all-padded sequence gives 0.  Runs in x's dtype (autocast
    off).  The backward (once differentiable) allocates dX (B, n, c) and the (B, n, s + l)
    gradient of the logits besides the weight gradients.
    """
    check_float_tensor(x, "x", 3)
    B, _, c = x.shape
    for name, w, lead in (("w_soft", w_soft, ((), (B,))), ("w_lin", w_lin, ((),)),
                          ("w_out", w_out, ((),))):
        check_float_tensor(w, name, w.dim())
        if tuple(w.shape[:-2]) not in lead or w.dim() < 2 or w.shape[-1] != c:
            raise ValueError(f"{name} must have shape (rows, {c})"
                             + (f" or ({B}, rows, {c})" if len(lead) > 1 else "")
                             + f", got {tuple(w.shape)}")
    _check_mask(mask, x.shape[0], x.shape[1], x)
    with _no_autocast(x):
        w_soft, w_lin, w_out = (w.to(x.dtype) for w in (w_soft, w_lin, w_out))
        return _CompressPositions.apply(x.contiguous(), w_soft, w_lin, w_out, mask)


def bilinear_mix(q_l, k_l, v_dba, r, dropout_p: float = 0.0, training: bool = False):
    """P' V_DBA with P' = softmax((Q_l R)(K_l R)ᵀ / √d_in): the d_p × d_p attention of
    eq. 10.  q_l, k_l, v_dba: (B, H, d_p, d); r: (H, d, d_in).  Returns (B, H, d_p, d)."""
    q_dba, k_dba = q_l @ r, k_l @ r
    p = torch.softmax(q_dba @ k_dba.transpose(-1, -2) / math.sqrt(r.shape[-1]), dim=-1)
    if dropout_p > 0.0:
        p = F.dropout(p, dropout_p, training)
    return p @ v_dba


def _bilinear_attention(q_l, k_l, v_dba, wr, r, dropout_p: float, training: bool):
    """W'_r (P' V_DBA): eq. 10's output, (B, H, n, d)."""
    return wr @ bilinear_mix(q_l, k_l, v_dba, r, dropout_p, training)


def dba_attention(q, k, v, z, wr, wc, r, mask=None, *, dropout_p: float = 0.0,
                  training: bool = False) -> torch.Tensor:
    """DBA self-attention on projected tensors (eq. 10 with eqs. 11, 12).

    Args:
        q, k, v: (B, H, n, d) queries, keys, values per head.
        z: (H, d_p, d) the learned Z (or (B, H, d_p, d)).
        wr, wc: (B, H, n, d_p) reconstruction coefficients W'_r = X U_r, W'_c = X U_c.
        r: (H, d, d_in) the hidden-dimension compression R.
        mask: optional (B, n) bool, True = real token.
        dropout_p, training: dropout on the d_p × d_p attention map P'.

    Returns (B, H, n, d).
    """
    check_dba_inputs(q, k, v, z, wr, wc, r, mask)
    q_l = dba_compress(q, q, z, mask)
    k_l = dba_compress(k, k, z, mask)
    if mask is not None:
        wc = wc.masked_fill(~mask[:, None, :, None], 0.0)
    v_dba = wc.transpose(-1, -2) @ v
    return _bilinear_attention(q_l, k_l, v_dba, wr, r, dropout_p, training)


def dba_cross_attention(q, k_c, v_c, z_q, wr, r, mask=None, *, dropout_p: float = 0.0,
                        training: bool = False) -> torch.Tensor:
    """DBA cross-attention with an already compressed context (eq. 14, then eq. 10).

    Args:
        q: (B, H, n, d) queries of the first sequence.
        k_c, v_c: (B, H, d_p, d) keys K_2 and values V_2 of the compressed context.
        z_q: (B, H, d_p, d) Z_1, which compresses the queries: W_r1 = softmax_n(Z_1 Qᵀ).
        wr: (B, H, n, d_p) reconstruction W'_r of the first sequence.
        r: (H, d, d_in); mask: optional (B, n) bool over the queries.

    Returns (B, H, n, d) = W'_r softmax((W_r1 Q R)(K_2 R)ᵀ / √d_in) V_2.
    """
    check_cross_inputs(q, k_c, v_c, z_q, wr, r, mask)
    q_l = dba_compress(q, q, z_q, mask)
    return _bilinear_attention(q_l, k_c, v_c, wr, r, dropout_p, training)


# --- float64 references: explicit per-(batch, head) matrices, for tests ------------------


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
