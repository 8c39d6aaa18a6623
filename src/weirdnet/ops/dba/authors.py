"""DBA self-attention as its authors run it (``form="authors"``; docs/design.md §4).

The authors' released code (BrightQin/DBA-Time-Series, ``src/models/ts_transformer.py``,
class ``dba_attention``) reads eqs. 7–12 differently from the literal form of
:mod:`.attention`.  Per sequence (n positions, width D, H heads of width d = D / H, the
compressed width d_in split over the heads, e = d_in / H, d_p compressed rows)::

    P_Q = (Z W_pq + b_pq) / √e                      (d_p × d_in; Z: d_p × D, the learned Z
                                                     or the previous layer's compressed C)
    A_h = softmax_n(P_Q,h (X W_pk,h)ᵀ)              (d_p × n; padded positions weight 0)
    C   = concat_h A_h (X W_pv,h + b_pv,h)          (d_p × D: the compressed sequence,
                                                     handed on as the next layer's Z)
    Q, K, V = C W_q + b_q,  C W_k + b_k,  C W_v + b_v   (d_p × d_in, d_p × d_in, d_p × D)
    M   = LayerNorm(concat_h softmax(Q_h K_hᵀ / √e) V_h)          (d_p × D)
    S_h = softmax over d_p of (X W_rec,h + b_rec,h)                 (n × d_p)
    Y   = concat_h(S_h M_h) W_O + b_O                               (n × D)

The bias of the authors' ``pk_proj`` adds one constant to each row of logits, which the
softmax over n removes: it is left out.  Dropout (training only, rate ``dropout_p``) sits
where the authors put it: on A, on the d_p × d_p map and on S.

Fast path: the position-sized work is one :func:`~.compress.compress_positions` call
(logits X (P_Q,h W_pk,h)ᵀ, so no n × d_in keys; A X, then W_pv per head on d_p rows; and
X W_recᵀ), one softmax over d_p and one batched product S [M_h W_O,hᵀ]_h.  With dropout on
A in training, A is formed explicitly (B, n, H·d_p) instead.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .checks import check_authors_inputs
from .compress import compress_positions, position_softmax


class AuthorsWeights(NamedTuple):
    """The parameters of one authors'-form DBA layer (D = model width, d_in total)."""

    pq_w: torch.Tensor   # (d_in, D)  Z -> compression queries
    pq_b: torch.Tensor   # (d_in,)
    pk_w: torch.Tensor   # (d_in, D)  X -> compression keys
    pv_w: torch.Tensor   # (D, D)     X -> compressed values
    pv_b: torch.Tensor   # (D,)
    q_w: torch.Tensor    # (d_in, D)  C -> queries
    q_b: torch.Tensor    # (d_in,)
    k_w: torch.Tensor    # (d_in, D)  C -> keys
    k_b: torch.Tensor    # (d_in,)
    v_w: torch.Tensor    # (D, D)     C -> values
    v_b: torch.Tensor    # (D,)
    ln_w: torch.Tensor   # (D,)       LayerNorm of the d_p × D attention output
    ln_b: torch.Tensor   # (D,)
    rec_w: torch.Tensor  # (H·d_p, D) X -> reconstruction logits
    rec_b: torch.Tensor  # (H·d_p,)
    o_w: torch.Tensor    # (D, D)     output projection
    o_b: torch.Tensor    # (D,)


def _dropout(t: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    return F.dropout(t, p, True) if training and p > 0.0 else t


def _compress(x, w_soft, rec_w, mask, dropout_p: float, training: bool):
    """(A X (B, H·d_p, D), X W_recᵀ (B, n, H·d_p)); A dropped out when training."""
    if not (training and dropout_p > 0.0):
        return compress_positions(x, w_soft, rec_w[:0], rec_w, mask)
    soft = position_softmax(x @ w_soft.transpose(-1, -2), mask)
    return _dropout(soft, dropout_p, True).transpose(1, 2) @ x, x @ rec_w.T


def dba_authors_attention(x, z, w: AuthorsWeights, heads: int, mask=None, *,
                          eps: float = 1e-5, dropout_p: float = 0.0, training: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """DBA self-attention, authors' form (see the module docstring).

    Args:
        x: (B, n, D) inputs; z: (d_p, D) learned Z or (B, d_p, D) the previous layer's C.
        w: the layer's :class:`AuthorsWeights`; heads: H (divides D and d_in).
        mask: optional (B, n) bool, True = real token.  Padded positions never reach C
            nor a real token's output; a sequence without a real token has C = 0.
        eps: the LayerNorm's epsilon; dropout_p, training: dropout on A, the d_p × d_p
            map and S.

    Returns (Y (B, n, D), C (B, d_p, D)).
    """
    B, n, D, d_p, d_in = check_authors_inputs(x, z, w, heads, mask)
    H, e, d = heads, d_in // heads, D // heads
    p_q = (F.linear(z, w.pq_w, w.pq_b) / math.sqrt(e)).unflatten(-1, (H, e))
    w_soft = torch.einsum("...phe,hec->...hpc", p_q, w.pk_w.view(H, e, D)).flatten(-3, -2)
    x_l, rec = _compress(x, w_soft, w.rec_w, mask, dropout_p, training)
    real = float(n > 0) if mask is None else mask.any(1).to(x.dtype)[:, None, None]
    c = torch.einsum("bhpc,hdc->bphd", x_l.view(B, H, d_p, D), w.pv_w.view(H, d, D))
    c = c.reshape(B, d_p, D) + w.pv_b * real  # rows of A sum to 1 (0 without real tokens)
    q = (F.linear(c, w.q_w, w.q_b) / math.sqrt(e)).view(B, d_p, H, e).transpose(1, 2)
    k = F.linear(c, w.k_w, w.k_b).view(B, d_p, H, e).transpose(1, 2)
    v = F.linear(c, w.v_w, w.v_b).view(B, d_p, H, d).transpose(1, 2)
    att = _dropout(torch.softmax(q @ k.transpose(-1, -2), dim=-1), dropout_p, training)
    m = F.layer_norm((att @ v).transpose(1, 2).reshape(B, d_p, D), (D,), w.ln_w, w.ln_b, eps)
    m_o = torch.einsum("bphd,chd->bhpc", m.view(B, d_p, H, d), w.o_w.view(D, H, d))
    s = torch.softmax((rec + w.rec_b).view(B, n, H, d_p), dim=-1).view(B, n, H * d_p)
    s = _dropout(s, dropout_p, training)
    return torch.baddbmm(w.o_b, s, m_o.reshape(B, H * d_p, D)), c
