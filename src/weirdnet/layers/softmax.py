"""Softmax attention mixers (on :class:`~weirdnet.layers.base.MultiHeadMixer`).

:class:`SoftmaxAttention` (``"softmax"``) is ``scaled_dot_product_attention`` with a
:class:`SoftmaxKVCache`; :class:`SoftmaxCrossAttention` attends from x to a context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..ops import (
    sequence_packed_softmax_attention,
    sequence_positions,
    sequence_softmax_attention,
)
from ..ops.checks import check_mask, on_host
from ..ops.packing import positions_in_document, segment_ids
from ..ops.rotary import rotary, rotary_angles
from ..ops.softmax_attention import softmax_attention
from .base import MultiHeadMixer, clear_rows, select_rows
from .ownership import own
from .registry import register, register_cross


@dataclass
class SoftmaxKVCache:
    """Keys and values of the tokens decoded so far, for one :class:`SoftmaxAttention`.

    ``k``, ``v``: (B, H, capacity, D / H) buffers, filled in positions [0, position);
    ``mask``: (B, capacity) bool, False for padding.  With a fixed ``max_len`` the
    buffers are preallocated to it and overflowing raises; with ``max_len=None`` they
    double in capacity when full.  The buffers are written in place: decode under
    ``torch.no_grad()`` (autograd refuses a backward through a since-overwritten cache).
    """

    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor
    max_len: int | None
    position: int = 0

    @property
    def batch_size(self) -> int:
        return self.k.shape[0]

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (beam search); B becomes B'."""
        self.k, self.v, self.mask = select_rows(index, self.k, self.v, self.mask)

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool forget their past: their cached keys count as padding,
        so rotary positions restart at 0 too (they count real tokens)."""
        clear_rows(rows, self.mask, value=False)

    def append(self, k, v, mask):
        """Store n new (B, H, n, .) keys/values and (B, n) mask; returns the cached
        keys, values and mask of all tokens so far."""
        end = self.position + k.shape[2]
        if end > self.capacity:
            self._grow(end)
        self.k[:, :, self.position : end] = k
        self.v[:, :, self.position : end] = v
        self.mask[:, self.position : end] = True if mask is None else mask
        self.position = end
        return self.k[:, :, :end], self.v[:, :, :end], self.mask[:, :end]

    def _grow(self, need: int) -> None:
        if self.max_len is not None:
            raise ValueError(f"decoding past the cache capacity max_len={self.max_len} "
                             f"({need} tokens); make the cache with a larger max_len")
        extra = max(need, 2 * self.capacity) - self.capacity
        self.k, self.v = (F.pad(t, (0, 0, 0, extra)) for t in (self.k, self.v))
        self.mask = F.pad(self.mask, (0, extra), value=False)


@register("softmax", shared=("heads", "bias", "dropout", "rope", "rope_theta"))
class SoftmaxAttention(MultiHeadMixer):
    """Multi-head softmax attention (``scaled_dot_product_attention``) on (B, L, dim).

    Options: ``heads``, ``bias``, ``dropout`` (attention probabilities), see
    :class:`MultiHeadMixer`; ``rope``: rotate queries and keys by their positions
    (:mod:`weirdnet.ops.rotary`, Llama's layout; positions count real tokens, as the
    backbone's do) with base ``rope_theta``.  Causal decoding keeps a
    :class:`SoftmaxKVCache` (keys stored rotated).
    """

    initial_capacity = 256

    def __init__(self, dim: int, *, causal: bool = True, heads: int | None = None,
                 bias: bool = True, dropout: float = 0.0, rope: bool = False,
                 rope_theta: float = 10000.0):
        super().__init__(dim, causal=causal, heads=heads, bias=bias, dropout=dropout)
        if rope and self.head_dim % 2:
            raise ValueError(f"rope needs an even head width, got dim={dim} / heads="
                             f"{self.heads} = {self.head_dim}")
        if not rope_theta > 0:
            raise ValueError(f"rope_theta must be positive, got {rope_theta!r}")
        self.rope, self.rope_theta = bool(rope), float(rope_theta)

    def _rotate(self, q, k, mask, start=None, positions=None):
        """q, k (B, H, n, d) rotated at their positions: ``positions`` (B, n), or real
        tokens counted from ``start`` (B,) (default 0); unchanged without ``rope``."""
        if not self.rope:
            return q, k
        if positions is None:
            positions = sequence_positions(mask, q.shape[0], q.shape[2], q.device, start)
        cos, sin = rotary_angles(positions, self.head_dim, self.rope_theta, q.dtype)
        return rotary(q, cos, sin), rotary(k, cos, sin)

    def _attend(self, q, k, v, mask):
        q, k = self._rotate(q, k, mask)
        return sequence_softmax_attention(q, k, v, causal=self.causal, mask=mask,
                                          dropout_p=self.dropout_p)

    def mix(self, x, mask, doc_ids=None):
        """Packed documents: block-diagonal attention, a query sees the keys of its own
        document only, and rotary positions restart at each document (the mask is built
        a block of query rows at a time: :func:`packed_softmax_attention`)."""
        if doc_ids is None:
            return super().mix(x, mask)
        q, k, v = self.project_qkv(x)
        q, k = self._rotate(q, k, mask, positions=positions_in_document(doc_ids, mask))
        return self.project_out(sequence_packed_softmax_attention(
            q, k, v, segment_ids(doc_ids), causal=self.causal, mask=mask,
            dropout_p=self.dropout_p))

    def init_cache(self, batch_size: int, max_len: int | None = None) -> SoftmaxKVCache:
        """Buffers of ``max_len`` positions, or growable ones when ``max_len`` is None."""
        self.check_cache_args(batch_size, max_len)
        p = self._param()
        cap = self.initial_capacity if max_len is None else max_len
        shape = (batch_size, self.heads, cap, self.head_dim)
        return own(SoftmaxKVCache(p.new_zeros(shape), p.new_zeros(shape),
                              torch.zeros(batch_size, cap, dtype=torch.bool, device=p.device),
                              max_len), self)

    def _attend_cached(self, q, k, v, mask, cache: SoftmaxKVCache):
        if self.rope:  # positions continue from the real tokens cached so far
            q, k = self._rotate(q, k, mask, cache.mask[:, :cache.position].sum(1))
        keys, values, real = cache.append(k, v, mask)
        if on_host(real) and bool(real.all()):  # no padding so far: SDPA needs no mask
            real = None
        return softmax_attention(q, keys, values, causal=True, mask=real,
                                 dropout_p=self.dropout_p)


@dataclass
class CrossAttentionContext:
    """Projected context of a :class:`SoftmaxCrossAttention`: keys, values (B, H, Lc,
    D / H) and the (B, Lc) context mask (or None)."""

    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None


@register_cross("softmax")
class SoftmaxCrossAttention(MultiHeadMixer):
    """Multi-head softmax attention from x (B, L, dim) to a context (B, Lc, context_dim),
    for encoder-decoder models: queries from x, keys and values from the context.

    For decoding, project the context once with :meth:`precompute_context` and pass the
    result as ``context`` at every step.
    """

    def __init__(self, dim: int, *, heads: int | None = None, context_dim: int | None = None,
                 bias: bool = True, dropout: float = 0.0):
        super().__init__(dim, causal=False, heads=heads, bias=bias, dropout=dropout,
                         context_dim=context_dim)
        self.context_dim = self.proj_k.in_features

    def precompute_context(self, context: torch.Tensor,
                           context_mask: torch.Tensor | None = None) -> CrossAttentionContext:
        """Project ``context`` (B, Lc, context_dim) to keys and values once."""
        self.check_input(context, None, "context", self.context_dim)
        check_mask(context_mask, context.shape[0], context.shape[1], "context_mask")
        return CrossAttentionContext(*self.project_kv(context), context_mask)

    def forward(self, x: torch.Tensor, context, context_mask: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, dim); context (B, Lc, context_dim) or a :class:`CrossAttentionContext`;
        context_mask (B, Lc) bool, True = real context token; mask (B, L) bool for x
        (checked only: each query is independent).  Returns y (B, L, dim)."""
        self.check_input(x, mask)
        if not isinstance(context, CrossAttentionContext):
            context = self.precompute_context(context, context_mask)
        elif context_mask is not None:
            raise ValueError("context_mask belongs in precompute_context() when context is "
                             "precomputed")
        if context.k.shape[0] != x.shape[0]:
            raise ValueError(f"context has batch {context.k.shape[0]}, x has {x.shape[0]}")
        o = softmax_attention(self.project_q(x), context.k, context.v, mask=context.mask,
                              dropout_p=self.dropout_p)
        return self.project_out(o)

    def init_cache(self, batch_size: int, max_len: int | None = None):
        """Not available: see :meth:`step`."""
        raise ValueError("cross-attention keeps no decoding cache: project the context once "
                         "with precompute_context() and call forward(x_t, context) per token")

    def step(self, x_t, cache, mask_t=None):
        """Not available: decode with ``forward(x_t.unsqueeze(1), precomputed_context)``."""
        self.init_cache(0)
