"""DBA mixers: self-attention (registered as "dba") and cross-attention (DBA paper §3;
docs/design.md §4).

The ``dba`` mixer has two forms (``form=``): ``"authors"`` (the default,
:class:`DBAuthorsAttention`: DBA as the authors' released code runs it, with values through
the softmax compression, a LayerNorm, a softmax reconstruction over d_p and Z carried from
layer to layer; see :mod:`weirdnet.ops.dba.authors`) and ``"paper-literal"``
(:class:`DBAttention`: eqs. 7–12 read literally, described below).  Paper-literal form:

Self-attention, per head h (d = dim / heads)::

    Q, K, V = X W_q, X W_k, X W_v                   (n × d each)
    W'_r, W'_c = X U_r, X U_c                       (n × d_p; padded rows of W'_c are 0)
    O_h = dba_attention(Q, K, V, Z_h, W'_r, W'_c, R_h)      (eq. 10, see ops/dba/)
    Y = concat_h(O_h) W_O + b_O

Cross-attention (eq. 14), queries from X_1 (n × dim), context X_2 (m × context_dim)::

    W_r2 = softmax_m(Z_2 (X_2 W_q2)ᵀ)                (d_p × m, per head; padded context
                                                     positions get weight 0)
    C = W_r2 X_2                                    (d_p × context_dim: the compressed
                                                     context of the other hierarchy)
    K_2 = C W_k,  V_2 = C W_v,  Z_1 = C W_z + b_z   (d_p × d: "Linear(W_r2 X_2)")
    W_r1 = softmax_n(Z_1 Q_1ᵀ),  Q_1 = X_1 W_q     (eq. 14; padded queries get weight 0)
    O = W'_r1 softmax((W_r1 Q_1 R)(K_2 R)ᵀ / √d_in) V_2,   W'_r1 = X_1 U_r
    Y = concat_h(O_h) W_O + b_O

K_2 and V_2 are already d_p rows long, so they are used as K_DBA (after R) and V_DBA
directly: no W_c / W'_c on the context side.

Order of computation (both forms): the products are re-associated so that every product
with n rows has d_p-wide factors, and no per-head n × d tensor (Q, K, V, O) is formed:

    Z_h Q_hᵀ = (Z_h W_q,h) Xᵀ,   W_r Q_h = (W_r X) W_q,hᵀ,   W'_cᵀ V_h = (W'_cᵀ X) W_v,hᵀ,
    concat_h(W'_r,h M_h) W_Oᵀ = Σ_h W'_r,h (M_h W_O,hᵀ)      (M_h = P'_h V_DBA,h)

(W_q,h: head h's rows of W_q).  This is the same function (the tests compare it with the
explicit form of eqs. 6–10 in float64), with about half the multiply-adds of projecting
Q, K, V and O, and :func:`~weirdnet.ops.dba.compress_positions` keeps the backward to one
(B, n, dim) buffer.

Neither form is causal: the compression mixes every position of a sequence.  Options:
``heads`` (default: the largest divisor of dim that is at most max(1, dim // 64)),
``d_p=16``, ``d_in=24`` (DBA paper Table 7), ``dropout=0`` (on the d_p × d_p map P').
Initialisation: Glorot-uniform projections, zero biases, Z ~ N(0, 1/d) (logits Z Qᵀ of
order 1), R ~ N(0, 1/d_in) (so R Rᵀ ≈ I, the Johnson–Lindenstrauss scaling of App. A.1).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops import sequence_dba_authors_attention, sequence_dba_compress
from ..ops.checks import check_float_tensor, check_mask
from ..ops.dba import AuthorsWeights, bilinear_mix, compress_positions
from ..ops.packing import check_doc_ids
from .base import Mixer, autocast_input, check_dtype_matches
from .registry import register, register_cross


def default_heads(dim: int, d_in: int | None = None) -> int:
    """The largest divisor of ``dim`` not above max(1, dim // 64) (that also divides
    ``d_in`` when given: the authors' form splits d_in over the heads)."""
    top = max(1, dim // 64)
    return next(h for h in range(top, 0, -1)
                if dim % h == 0 and (d_in is None or d_in % h == 0))


def _check_options(dim, heads, d_p, d_in, dropout) -> None:
    for name, value in (("dim", dim), ("heads", heads), ("d_p", d_p), ("d_in", d_in)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if dim % heads:
        raise ValueError(f"heads={heads} must divide dim={dim}")
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")


def _not_causal(what: str) -> ValueError:
    return ValueError(f"DBA is not causal: {what}; its sequence compression mixes every "
                      "position, so it cannot decode token by token (use causal=False)")


def _check_x(x, mask, dim: int, name: str, mask_name: str) -> None:
    check_float_tensor(x, name, 3)
    if x.shape[-1] != dim:
        raise ValueError(f"{name} must have shape (batch, length, {dim}), got {tuple(x.shape)}")
    check_mask(mask, x.shape[0], x.shape[1], mask_name)


WHOLE_SEQUENCE = ("it compresses the whole sequence into d_p rows with a softmax over "
                  "every position")
"""Why DBA needs the whole sequence at once (``register(..., whole_sequence=...)``)."""

class _DBABase(nn.Module):
    """Options, per-head helpers and the parameters both forms share (R, W_O)."""

    def __init__(self, dim: int, heads: int | None, d_p: int, d_in: int, dropout: float):
        super().__init__()
        heads = default_heads(dim) if heads is None and isinstance(dim, int) and dim > 0 \
            else heads
        _check_options(dim, heads, d_p, d_in, dropout)
        self.dim, self.heads, self.d_p, self.d_in = dim, heads, d_p, d_in
        self.head_dim, self.dropout = dim // heads, float(dropout)
        self.r = nn.Parameter(torch.empty(heads, self.head_dim, d_in))
        self.proj_o = nn.Linear(dim, dim)

    def _reset_shared(self) -> None:
        nn.init.normal_(self.r, std=1.0 / math.sqrt(self.d_in))
        nn.init.xavier_uniform_(self.proj_o.weight)
        nn.init.zeros_(self.proj_o.bias)

    def _fold(self, z: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Z_h W_h per head: z (..., H, d_p, d), weight (H·d, c) -> (..., H, d_p, c).
        With W_h a query projection, (Z_h W_h) Xᵀ = Z_h (X W_hᵀ)ᵀ: logits without Q."""
        return torch.einsum("...hpe,hec->...hpc", z, weight.view(self.heads, self.head_dim, -1))

    def _per_head(self, t: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """t_h W_hᵀ per head: t (B, H, d_p, c), weight (H·d, c) -> (B, H, d_p, d), i.e.
        head h's projection applied to head h's compressed rows (W_r X) W_hᵀ = W_r (X W_hᵀ)."""
        return torch.einsum("bhpc,hec->bhpe", t, weight.view(self.heads, self.head_dim, -1))

    def _output(self, m: torch.Tensor, wr: torch.Tensor) -> torch.Tensor:
        """concat_h(W'_r,h M_h) W_Oᵀ + b_O as W'_r [M_h W_O,hᵀ]_h: m (B, H, d_p, d),
        wr (B, n, H·d_p) -> (B, n, dim); the inner width is H·d_p, not dim."""
        B = m.shape[0]
        w_o = self.proj_o.weight.view(self.dim, self.heads, self.head_dim)
        m_o = torch.einsum("bhpe,che->bhpc", m, w_o).reshape(B, -1, self.dim)
        return torch.baddbmm(self.proj_o.bias, wr, m_o)

    def not_decodable(self, what: str) -> ValueError:
        return _not_causal(what)

    def init_cache(self, batch_size: int, max_len: int | None = None):
        raise self.not_decodable("init_cache() is not available")

    def extra_repr(self) -> str:
        extra = ", per_query=True" if getattr(self, "per_query", False) else ""
        return (f"dim={self.dim}, heads={self.heads}, d_p={self.d_p}, d_in={self.d_in}, "
                f"dropout={self.dropout}{extra}")


class DBAttention(_DBABase, Mixer):
    """DBA self-attention mixer, paper-literal form, on (B, L, dim) inputs (bidirectional
    only); ``build("dba", dim, causal=False)`` gives it (see :func:`dba`).

    Args:
        dim: model width D.
        causal: must be False (DBA is not causal); True raises ValueError.
        heads: number of heads (default: largest divisor of dim up to max(1, dim // 64)).
        d_p: compressed sequence length (default 16); d_in: compressed width (default 24).
        dropout: dropout rate on the d_p × d_p attention map (default 0).
    """

    def __init__(self, dim: int, *, causal: bool = False, heads: int | None = None,
                 d_p: int = 16, d_in: int = 24, dropout: float = 0.0):
        if causal:
            raise _not_causal("build it with causal=False")
        super().__init__(dim, heads, d_p, d_in, dropout)
        self.causal = False
        self.z = nn.Parameter(torch.empty(self.heads, d_p, self.head_dim))
        self.proj_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj_rec = nn.Linear(dim, 2 * self.heads * d_p, bias=False)  # U_r, U_c
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for block in self.proj_qkv.weight.detach().chunk(3):
            nn.init.xavier_uniform_(block)
        nn.init.xavier_uniform_(self.proj_rec.weight)
        nn.init.normal_(self.z, std=1.0 / math.sqrt(self.head_dim))
        self._reset_shared()

    def mix(self, x: torch.Tensor, mask: torch.Tensor | None, doc_ids=None) -> torch.Tensor:
        """y (B, L, dim) (packed documents: each alone).  Outputs at real tokens do not
        depend on padded positions (which must hold finite values); every output is
        finite."""
        if doc_ids is not None:
            return self.each_document(x, mask, doc_ids)
        H, p, d, D = self.heads, self.d_p, self.head_dim, self.dim
        w_qkv = self.proj_qkv.weight.view(3, H, d, D)
        u_r, u_c = self.proj_rec.weight.chunk(2)
        z_qk = torch.einsum("hpe,khec->khpc", self.z, w_qkv[:2])  # Z W_q,h and Z W_k,h
        x_l, wr = sequence_dba_compress(x, z_qk.reshape(2 * H * p, D), u_c, u_r, mask)
        # rows W_r X, W_c X, W'_cᵀ X per head, projected by W_q, W_k, W_v of that head
        lkv = torch.einsum("bkhpc,khec->bkhpe", x_l.view(-1, 3, H, p, D), w_qkv)
        q_l, k_l, v_dba = lkv.unbind(1)
        m = bilinear_mix(q_l, k_l, v_dba, self.r, self.dropout, self.training)
        return self._output(m, wr)


FORMS = ("authors", "paper-literal")
"""The two readings of DBA (docs/design.md §4): the authors' released code (the default)
and the paper's eqs. 7–12 read literally."""


class DBAuthorsAttention(Mixer):
    """DBA self-attention mixer as its authors run it (``build("dba", dim, causal=False,
    form="authors")``), on (B, L, dim) inputs, bidirectional only.  The formulas are in
    :mod:`weirdnet.ops.dba.authors`.

    Z: the first DBA layer compresses with its learned Z (d_p × dim); with ``z_carry`` the
    compressed sequence C it makes is handed to the next DBA layer of the backbone as that
    layer's Z (DBA paper §3.3, "Z ... propagating through different attention layers", and
    the authors' code), and every later DBA layer has no Z of its own (the backbone calls
    :meth:`use_carried_z`).  ``forward(x, mask, z=C)`` takes a carried Z;
    ``return_z=True`` also returns this layer's C.

    Args:
        dim: model width D.
        causal: must be False (the compression mixes every position).
        heads: H (default: the largest divisor of both dim and d_in up to
            max(1, dim // 64)); must divide d_in, which is split over the heads as in the
            authors' code.
        d_p: compressed length (default 16); d_in: compressed width of the compression
            keys and of the d_p × d_p attention, in total over the heads (default 24).
        dropout: on the compression weights, the d_p × d_p map, the reconstruction and the
            learned Z, as the authors place it (default 0).
        z_carry: hand C on to the next DBA layer (default True).

    Initialisation (not the authors'; docs/design.md §4): Glorot-uniform weights and zero
    biases as the other attention mixers, LayerNorm (1, 0), and Z ~ N(0, 1), the scale of
    the compressed sequences that later layers receive as Z.  The authors' code keeps
    PyTorch's defaults with Z ~ N(0, 1/dim), but feeds its first layer inputs scaled by
    √dim (post-norm); on this pre-norm backbone, whose mixers see unit-scale inputs, those
    defaults leave the compression near-uniform and the position-0 diagnostic of
    tests/layers/test_mixer_dba.py at chance after 240 steps (measured: 7.8% and 9.8%, 2 seeds;
    100% and 100% with this initialisation).
    """

    carries_z = True

    def __init__(self, dim: int, *, causal: bool = False, heads: int | None = None,
                 d_p: int = 16, d_in: int = 24, dropout: float = 0.0, z_carry: bool = True):
        if causal:
            raise _not_causal("build it with causal=False")
        super().__init__()
        if heads is None and all(isinstance(v, int) and v > 0 for v in (dim, d_in)):
            heads = default_heads(dim, d_in)
        _check_options(dim, heads, d_p, d_in, dropout)
        if d_in % heads:
            raise ValueError(f"d_in={d_in} must be a multiple of heads={heads} in the authors' "
                             "form (d_in is split over the heads); change d_in or heads")
        self.dim, self.heads, self.d_p, self.d_in = dim, heads, d_p, d_in
        self.dropout, self.causal, self.z_carry = float(dropout), False, bool(z_carry)
        self.carries_z = self.z_carry
        self.z = nn.Parameter(torch.empty(d_p, dim))
        self.proj_pq = nn.Linear(dim, d_in)
        self.proj_pk = nn.Linear(dim, d_in, bias=False)  # its bias cancels in softmax_n
        self.proj_pv = nn.Linear(dim, dim)
        self.proj_q, self.proj_k = nn.Linear(dim, d_in), nn.Linear(dim, d_in)
        self.proj_v = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.proj_rec = nn.Linear(dim, heads * d_p)
        self.proj_o = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights, zero biases, LayerNorm (1, 0), Z ~ N(0, 1)."""
        for module in self.children():
            module.reset_parameters()
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if self.z is not None:
            nn.init.normal_(self.z)

    def use_carried_z(self) -> None:
        """Drop the learned Z: this layer always receives the previous layer's C."""
        self.z = None

    def weights(self) -> AuthorsWeights:
        """The parameters in the order :func:`~weirdnet.ops.dba.dba_authors_attention`
        takes them."""
        lin = (self.proj_pq.weight, self.proj_pq.bias, self.proj_pk.weight,
               self.proj_pv.weight, self.proj_pv.bias, self.proj_q.weight, self.proj_q.bias,
               self.proj_k.weight, self.proj_k.bias, self.proj_v.weight, self.proj_v.bias,
               self.norm.weight, self.norm.bias, self.proj_rec.weight, self.proj_rec.bias,
               self.proj_o.weight, self.proj_o.bias)
        return AuthorsWeights(*lin)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache=None,
                doc_ids: torch.Tensor | None = None, *, z: torch.Tensor | None = None,
                return_z: bool = False):
        """x (B, L, dim), mask (B, L) bool (True = real); z: the previous DBA layer's C
        (B, d_p, dim), or None for the learned Z.  Returns Y (B, L, dim), or (Y, C) with
        ``return_z``.  Outputs at real tokens and C do not depend on padded positions.
        ``doc_ids`` (packed documents) compresses each document on its own, with the
        learned Z (a carried C belongs to one sequence: a packed backbone unpacks)."""
        self.check_input(x, mask)
        x = autocast_input(x, self)
        if cache is not None:
            raise self.not_decodable("forward() takes no cache")
        if doc_ids is not None:
            check_doc_ids(doc_ids, x.shape[0], x.shape[1], x.device)
            if z is not None or return_z:
                raise ValueError("packed documents (doc_ids) take the learned Z: a carried "
                                 "z belongs to one sequence, not to each document")
            return self.each_document(x, mask, doc_ids)
        return self._compress(x, mask, z, return_z)

    def mix(self, x, mask, doc_ids=None):
        """The full pass with the learned Z (each packed document alone)."""
        if doc_ids is not None:
            return self.each_document(x, mask, doc_ids)
        return self._compress(x, mask, None, False)

    def _compress(self, x, mask, z, return_z: bool):
        """The authors' attention with Z = ``z`` (None: the learned Z)."""
        if z is None:
            if self.z is None:
                raise ValueError("this DBA layer takes Z from the previous DBA layer (z_carry):"
                                 " pass z=, the previous layer's compressed sequence")
            z = F.dropout(self.z, self.dropout, self.training)
        y, c = sequence_dba_authors_attention(x, z, self.weights(), self.heads, mask,
                                              eps=self.norm.eps, dropout_p=self.dropout,
                                              training=self.training)
        return (y, c) if return_z else y

    def not_decodable(self, what: str) -> ValueError:
        return _not_causal(what)

    def init_cache(self, batch_size: int, max_len: int | None = None):
        raise self.not_decodable("init_cache() is not available")

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, form=authors, heads={self.heads}, d_p={self.d_p}, "
                f"d_in={self.d_in}, dropout={self.dropout}, z_carry={self.z_carry}"
                + ("" if self.z is not None else ", Z from the previous DBA layer"))


@register("dba", shared=("heads", "dropout"), whole_sequence=WHOLE_SEQUENCE)
def dba(dim: int, *, causal: bool = False, form: str = "authors",
        z_carry: bool | None = None, heads: int | None = None, d_p: int = 16, d_in: int = 24,
        dropout: float = 0.0) -> Mixer:
    """The ``dba`` mixer: :class:`DBAuthorsAttention` (``form="authors"``, the default: DBA
    as its authors' released code runs it) or :class:`DBAttention`
    (``form="paper-literal"``: eqs. 7–12 read literally).  ``z_carry`` (authors' form only;
    default True there) hands each layer's compressed sequence to the next DBA layer as
    its Z.  Other options: see the two classes."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    if form == "authors":
        return DBAuthorsAttention(dim, causal=causal, heads=heads, d_p=d_p, d_in=d_in,
                                  dropout=dropout, z_carry=True if z_carry is None else z_carry)
    if z_carry:
        raise ValueError("z_carry needs form='authors' (the paper-literal form has a Z per "
                         "layer); drop z_carry or set form='authors'")
    return DBAttention(dim, causal=causal, heads=heads, d_p=d_p, d_in=d_in, dropout=dropout)




@register_cross("dba")
class DBACrossAttention(_DBABase):
    """DBA cross-attention (eq. 14): queries from x, keys and values from the context
    compressed to d_p rows, which also gives Z_1 = Linear(W_r2 X_2).

    Args:
        dim: width of x and of the output.
        context_dim: width of the context (default: dim).
        heads, d_p, d_in, dropout: as :class:`DBAttention`.
        per_query: (extension, for causal decoders) keep eq. 14's compressed context
            (K_2, V_2) and bilinear scoring, but let every query attend on its own:
            ``O_i = softmax((q_i R)(K_2 R)ᵀ / √d_in) V_2``.  Eq. 14 also compresses the
            queries (W_r1 X_1), which mixes every query position, so a decoder trained
            with it would see future tokens; with ``per_query=True`` output i depends
            only on x_i and the context, and decoding can reuse :meth:`precompute_context`.
    """

    def __init__(self, dim: int, *, context_dim: int | None = None, heads: int | None = None,
                 d_p: int = 16, d_in: int = 24, dropout: float = 0.0, per_query: bool = False):
        super().__init__(dim, heads, d_p, d_in, dropout)
        self.per_query = bool(per_query)
        context_dim = dim if context_dim is None else context_dim
        if not isinstance(context_dim, int) or isinstance(context_dim, bool) or context_dim < 1:
            raise ValueError(f"context_dim must be a positive int, got {context_dim!r}")
        self.context_dim, self.causal = context_dim, False
        self.proj_q = nn.Linear(dim, dim, bias=False)
        self.proj_ctx = nn.Linear(context_dim, dim, bias=False)  # Q_2, keys of W_r2
        self.z_ctx = nn.Parameter(torch.empty(self.heads, d_p, self.head_dim))  # Z_2
        self.proj_k = nn.Linear(context_dim, dim, bias=False)  # K_2 = C W_k
        self.proj_v = nn.Linear(context_dim, dim, bias=False)  # V_2 = C W_v
        if self.per_query:  # no query compression: no U_r of x, no Z_1
            self.proj_rec = self.proj_z = None
        else:
            self.proj_rec = nn.Linear(dim, self.heads * d_p, bias=False)  # U_r of x
            self.proj_z = nn.Linear(context_dim, dim)  # Z_1 = C W_z + b_z
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.proj_q, self.proj_rec, self.proj_ctx, self.proj_k, self.proj_v,
                    self.proj_z):
            if lin is not None:
                nn.init.xavier_uniform_(lin.weight)
        if self.proj_z is not None:
            nn.init.zeros_(self.proj_z.bias)
        nn.init.normal_(self.z_ctx, std=1.0 / math.sqrt(self.head_dim))
        self._reset_shared()

    def compress_context(self, context: torch.Tensor, context_mask=None) -> torch.Tensor:
        """C = W_r2 X_2 per head, W_r2 = softmax_m(Z_2 (X_2 W_q2,h)ᵀ): (B, H, d_p, c_dim)."""
        z_2 = self._fold(self.z_ctx, self.proj_ctx.weight).reshape(-1, self.context_dim)
        nothing = z_2.new_zeros(0, self.context_dim)  # no W'_c, no W'_r on this side
        c, _ = compress_positions(context, z_2, nothing, nothing, context_mask)
        return c.view(context.shape[0], self.heads, self.d_p, self.context_dim)

    def precompute_context(self, context: torch.Tensor, context_mask=None
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """(K_2, V_2), each (B, H, d_p, d): the compressed context, computed once for
        decoding with ``per_query=True`` (pass the pair as ``context`` to forward)."""
        _check_x(context, context_mask, self.context_dim, "context", "context_mask")
        check_dtype_matches(context, self, "context")
        c = self.compress_context(context, context_mask)
        return self._per_head(c, self.proj_k.weight), self._per_head(c, self.proj_v.weight)

    def _attend_per_query(self, x: torch.Tensor, keys_values) -> torch.Tensor:
        """softmax((Q R)(K_2 R)ᵀ / √d_in) V_2 per head, then W_O: (B, n, dim)."""
        k_c, v_c = keys_values
        B, n = x.shape[:2]
        q = self.proj_q(x).view(B, n, self.heads, self.head_dim).transpose(1, 2)
        m = bilinear_mix(q, k_c, v_c, self.r, self.dropout, self.training)
        return self.proj_o(m.transpose(1, 2).reshape(B, n, self.dim))

    def forward(self, x: torch.Tensor, context, context_mask: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, n, dim); context: (B, m, context_dim); masks (B, n) / (B, m) bool,
        True = real token.  Returns (B, n, dim).  Outputs at real queries depend on
        neither padded queries nor padded context positions.  A context without a real
        token gives K_2 = V_2 = 0, hence outputs b_O.  With ``per_query=True``, context
        may also be the pair from :meth:`precompute_context`."""
        _check_x(x, mask, self.dim, "x", "mask")
        check_dtype_matches(x, self)
        if self.per_query and isinstance(context, tuple):
            if context_mask is not None:
                raise ValueError("context_mask belongs in precompute_context() when context "
                                 "is precomputed")
            if context[0].shape[0] != x.shape[0]:
                raise ValueError(f"context has batch {context[0].shape[0]}, x has {x.shape[0]}")
            return self._attend_per_query(x, context)
        _check_x(context, context_mask, self.context_dim, "context", "context_mask")
        if context.shape[0] != x.shape[0] or context.dtype != x.dtype:
            raise ValueError(f"context must match x in batch size and dtype, got batch "
                             f"{context.shape[0]} vs {x.shape[0]}, {context.dtype} vs {x.dtype}")
        if self.per_query:
            return self._attend_per_query(x, self.precompute_context(context, context_mask))
        c = self.compress_context(context, context_mask)
        k_c, v_c = self._per_head(c, self.proj_k.weight), self._per_head(c, self.proj_v.weight)
        z_1 = self._per_head(c, self.proj_z.weight) + self.proj_z.bias.view(
            self.heads, 1, self.head_dim)
        z_q = self._fold(z_1, self.proj_q.weight).flatten(1, 2)  # (B, H·d_p, dim)
        nothing = x.new_zeros(0, self.dim)  # no W'_c on the query side
        x_l, wr = compress_positions(x, z_q, nothing, self.proj_rec.weight, mask)  # eq. 14
        q_l = self._per_head(x_l.view(x.shape[0], self.heads, self.d_p, self.dim),
                             self.proj_q.weight)
        m = bilinear_mix(q_l, k_c, v_c, self.r, self.dropout, self.training)
        return self._output(m, wr)
