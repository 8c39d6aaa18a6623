"""DBA self- and cross-attention on projected tensors (DBA paper eq. 10, with the
compressions of eqs. 11, 12 and 14 from :mod:`.compress`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .checks import check_cross_inputs, check_dba_inputs
from .compress import dba_compress


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
