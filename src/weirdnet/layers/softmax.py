"""Softmax attention mixers, and the multi-head projection base of every attention mixer.

:class:`MultiHeadMixer` holds what softmax, linear, Linformer and local attention share:
Q/K/V/O projections (Xavier-uniform weights, zero biases, as ``nn.MultiheadAttention``),
the head split, input checks and the decoding plumbing (``init_cache`` / ``step`` /
``forward(..., cache=...)``).  A subclass supplies ``_mix`` (the full pass) and, when it
decodes, ``_new_cache`` and ``_extend``.

:class:`SoftmaxAttention` (``"softmax"``) is ``scaled_dot_product_attention`` with a
:class:`SoftmaxKVCache`; :class:`SoftmaxCrossAttention` attends from x to a context.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.checks import check_float_tensor, check_mask, on_host
from ..ops.softmax_attention import (
    check_dropout,
    check_step_mask,
    merge_heads,
    softmax_attention,
    split_heads,
)
from .registry import register


def resolve_heads(dim: int, heads) -> int:
    """``heads`` checked against ``dim``; None gives dim // 64 heads of width 64 when 64
    divides dim, else one head."""
    if heads is None:
        return dim // 64 if dim % 64 == 0 else 1
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise ValueError(f"heads must be a positive int, got {heads!r}")
    if dim % heads:
        raise ValueError(f"dim={dim} is not divisible by heads={heads}")
    return heads


class MultiHeadMixer(nn.Module):
    """Base of the attention mixers on (B, L, dim) inputs (see the module docstring).

    Args:
        dim: model width D.
        causal: decoder (True) or encoder (False) form.
        heads: number of heads H (default: see :func:`resolve_heads`); head width D / H.
        bias: biases on the four projections.
        dropout: attention-probability dropout (training only), where the mixer has one.
        context_dim: width of the inputs of the K/V projections (default ``dim``).
    """

    cache_type: type | None = None

    def __init__(self, dim: int, *, causal: bool, heads: int | None = None, bias: bool = True,
                 dropout: float = 0.0, context_dim: int | None = None):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        context_dim = dim if context_dim is None else context_dim
        if isinstance(context_dim, bool) or not isinstance(context_dim, int) or context_dim < 1:
            raise ValueError(f"context_dim must be a positive int, got {context_dim!r}")
        self.dim, self.causal = dim, bool(causal)
        self.heads = resolve_heads(dim, heads)
        self.head_dim = dim // self.heads
        self.dropout = check_dropout(dropout)
        self.proj_q = nn.Linear(dim, dim, bias=bias)
        self.proj_k = nn.Linear(context_dim, dim, bias=bias)
        self.proj_v = nn.Linear(context_dim, dim, bias=bias)
        self.proj_o = nn.Linear(dim, dim, bias=bias)
        MultiHeadMixer.reset_parameters(self)  # subclasses initialise their own parameters

    def reset_parameters(self) -> None:
        """Xavier-uniform projection weights, zero biases."""
        for proj in (self.proj_q, self.proj_k, self.proj_v, self.proj_o):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    @property
    def dropout_p(self) -> float:
        """The attention dropout now: ``dropout`` in training mode, else 0."""
        return self.dropout if self.training else 0.0

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, dim) -> queries (B, H, L, D / H)."""
        return split_heads(self.proj_q(x), self.heads)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, L, context_dim) -> keys, values (B, H, L, D / H)."""
        return split_heads(self.proj_k(x), self.heads), split_heads(self.proj_v(x), self.heads)

    def project_qkv(self, x: torch.Tensor):
        """x (B, L, dim) -> q, k, v (B, H, L, D / H)."""
        return (self.project_q(x), *self.project_kv(x))

    def project_out(self, o: torch.Tensor) -> torch.Tensor:
        """Head outputs (B, H, L, D / H) -> y (B, L, dim)."""
        return self.proj_o(merge_heads(o))

    def check_input(self, x, mask=None, name: str = "x", width: int | None = None) -> None:
        """x (B, L, width) floating, mask None or (B, L) bool."""
        width = self.dim if width is None else width
        check_float_tensor(x, name, 3)
        if x.shape[-1] != width:
            raise ValueError(f"{name} must have shape (batch, length, {width}), "
                             f"got {tuple(x.shape)}")
        check_mask(mask, x.shape[0], x.shape[1])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache=None):
        """x: (B, L, dim); mask: optional (B, L) bool, True = real token.

        Returns y (B, L, dim).  With ``cache`` (causal mixers, from :meth:`init_cache`)
        the L tokens continue the cached sequence and ``(y, cache)`` is returned.
        """
        self.check_input(x, mask)
        q, k, v = self.project_qkv(x)
        if cache is None:
            return self.project_out(self._mix(q, k, v, mask))
        self._check_cache(cache, x.shape[0])
        return self.project_out(self._extend(q, k, v, mask, cache)), cache

    def init_cache(self, batch_size: int, max_len: int | None = None):
        """An empty decoding cache for ``batch_size`` sequences (causal mixers only)."""
        if not self.causal:
            raise ValueError(f"incremental decoding needs a causal layer (causal=True); "
                             f"{type(self).__name__} was built with causal=False")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                    or max_len < 1):
            raise ValueError(f"max_len must be None or a positive int, got {max_len!r}")
        return self._new_cache(batch_size, max_len)

    def step(self, x_t: torch.Tensor, cache, mask_t: torch.Tensor | None = None) -> torch.Tensor:
        """Decode one token: x_t (B, dim), mask_t (B,) bool -> y_t (B, dim); the cache
        advances by one."""
        check_float_tensor(x_t, "x_t", 2)
        check_step_mask(mask_t, x_t.shape[0])
        mask = None if mask_t is None else mask_t.unsqueeze(1)
        y, _ = self.forward(x_t.unsqueeze(1), mask, cache=cache)
        return y[:, 0]

    def _check_cache(self, cache, batch: int) -> None:
        if not self.causal:
            raise ValueError("incremental decoding needs a causal layer (causal=True)")
        if self.cache_type is None or not isinstance(cache, self.cache_type):
            raise ValueError(f"cache must come from {type(self).__name__}.init_cache(), "
                             f"got {type(cache).__name__}")
        if cache.batch_size != batch:
            raise ValueError(f"cache was made for batch_size={cache.batch_size}, "
                             f"got a batch of {batch}")

    def _param(self) -> torch.Tensor:
        return self.proj_q.weight

    def _mix(self, q, k, v, mask):
        raise NotImplementedError

    def _new_cache(self, batch_size: int, max_len: int | None):
        raise NotImplementedError

    def _extend(self, q, k, v, mask, cache):
        raise NotImplementedError

    def extra_repr(self) -> str:
        form = "causal" if self.causal else "bidirectional"
        return f"dim={self.dim}, {form}, heads={self.heads}, dropout={self.dropout}"


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


@register("softmax")
class SoftmaxAttention(MultiHeadMixer):
    """Multi-head softmax attention (``scaled_dot_product_attention``) on (B, L, dim).

    Options: ``heads``, ``bias``, ``dropout`` (attention probabilities), see
    :class:`MultiHeadMixer`.  Causal decoding keeps a :class:`SoftmaxKVCache`.
    """

    cache_type = SoftmaxKVCache
    initial_capacity = 256

    def __init__(self, dim: int, *, causal: bool = True, heads: int | None = None,
                 bias: bool = True, dropout: float = 0.0):
        super().__init__(dim, causal=causal, heads=heads, bias=bias, dropout=dropout)

    def _mix(self, q, k, v, mask):
        return softmax_attention(q, k, v, causal=self.causal, mask=mask,
                                 dropout_p=self.dropout_p)

    def _new_cache(self, batch_size: int, max_len: int | None) -> SoftmaxKVCache:
        """Buffers of ``max_len`` positions, or growable ones when ``max_len`` is None."""
        p = self._param()
        cap = self.initial_capacity if max_len is None else max_len
        shape = (batch_size, self.heads, cap, self.head_dim)
        return SoftmaxKVCache(p.new_zeros(shape), p.new_zeros(shape),
                              torch.zeros(batch_size, cap, dtype=torch.bool, device=p.device),
                              max_len)

    def _extend(self, q, k, v, mask, cache: SoftmaxKVCache):
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
