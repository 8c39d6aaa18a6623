"""Linear-attention mixer (Katharopoulos et al. 2020, phi = elu + 1)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops import sequence_linear_attention
from ..ops.linear_attention import (
    LinearAttentionState,
    causal_linear_attention,
    check_chunk_size,
    check_eps,
    linear_attention_step,
)
from .base import MultiHeadMixer, clear_rows, select_rows
from .ownership import own
from .registry import register


@dataclass
class LinearAttentionCache:
    """Decoding state of one causal :class:`LinearAttention`: the running sums
    (``state.kv`` (B, H, d, d), ``state.z`` (B, H, d)) and the tokens seen."""

    state: LinearAttentionState
    position: int = 0

    @property
    def batch_size(self) -> int:
        return self.state.kv.shape[0]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (beam search); B becomes B'."""
        kv, z = select_rows(index, self.state.kv, self.state.z)
        self.state = LinearAttentionState(kv, z)

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool forget their past: their running sums restart at 0."""
        clear_rows(rows, self.state.kv, self.state.z)


@register("linear", shared=("heads", "bias"))
class LinearAttention(MultiHeadMixer):
    """Multi-head linear attention on (B, L, dim); O(L) time and memory.

    Options: ``heads``, ``bias`` (see :class:`MultiHeadMixer`); ``chunk_size`` of the
    causal chunk-wise computation (default 64); ``eps`` added to the normaliser
    (default 1e-6).  No dropout: there is no attention matrix to drop from.  The decoding
    cache holds O(dim * dim / heads) numbers per sequence, whatever the length.
    """

    def __init__(self, dim: int, *, causal: bool = True, heads: int | None = None,
                 bias: bool = True, chunk_size: int = 64, eps: float = 1e-6):
        super().__init__(dim, causal=causal, heads=heads, bias=bias)
        self.chunk_size, self.eps = check_chunk_size(chunk_size), check_eps(eps)

    def _attend(self, q, k, v, mask):
        return sequence_linear_attention(q, k, v, causal=self.causal, mask=mask,
                                         chunk_size=self.chunk_size, eps=self.eps)

    def init_cache(self, batch_size: int, max_len: int | None = None) -> LinearAttentionCache:
        """``max_len`` is accepted for the common interface; the state has a fixed size."""
        self.check_cache_args(batch_size, max_len)
        p, d = self._param(), self.head_dim
        return own(LinearAttentionCache(
            LinearAttentionState.zeros(batch_size, self.heads, d, d, dtype=p.dtype,
                                       device=p.device)), self)

    def _attend_cached(self, q, k, v, mask, cache: LinearAttentionCache):
        """One token: the recurrent update; a prompt: the chunk-wise pass from the state."""
        if q.shape[2] == 1:
            mask_t = None if mask is None else mask[:, 0]
            out, cache.state = linear_attention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0],
                                                     cache.state, mask_t=mask_t, eps=self.eps)
            out = out.unsqueeze(2)
        else:
            out, cache.state = causal_linear_attention(q, k, v, mask=mask, eps=self.eps,
                                                       chunk_size=self.chunk_size,
                                                       state=cache.state)
        cache.position += q.shape[2]
        return out

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, chunk_size={self.chunk_size}, eps={self.eps}"
