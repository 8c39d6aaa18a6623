"""Local (sliding-window) attention mixer."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops import sequence_local_attention
from ..ops.local_attention import check_window, local_attention_decode
from .base import MultiHeadMixer, clear_rows, select_rows
from .ownership import own
from .registry import register


def _last(x: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    """The last n entries of x along dim (none when n = 0)."""
    return x.narrow(dim, x.shape[dim] - n, n)


@dataclass
class LocalAttentionCache:
    """Decoding window of one causal :class:`LocalAttention`: keys and values
    (B, H, window - 1, D / H) of the last window - 1 positions, oldest first, and their
    (B, window - 1) mask (False: padding, or before the start of the sequence)."""

    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor
    position: int = 0

    @property
    def batch_size(self) -> int:
        return self.k.shape[0]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (beam search); B becomes B'."""
        self.k, self.v, self.mask = select_rows(index, self.k, self.v, self.mask)

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool forget their past: their window holds no key."""
        clear_rows(rows, self.mask, value=False)

    def push(self, k, v, mask) -> None:
        """Append n new (B, H, n, .) keys/values and (B, n) mask, keeping the last
        window - 1."""
        if mask is None:
            mask = torch.ones(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device)
        keep = self.k.shape[2]
        self.k = _last(torch.cat([self.k, k], 2), 2, keep)
        self.v = _last(torch.cat([self.v, v], 2), 2, keep)
        self.mask = _last(torch.cat([self.mask, mask], 1), 1, keep)
        self.position += k.shape[2]


@register("local", shared=("heads", "bias", "dropout"))
class LocalAttention(MultiHeadMixer):
    """Multi-head sliding-window softmax attention on (B, L, dim); O(L window).

    Options: ``window`` (default 128): causal, token i attends to tokens i - window + 1
    .. i; non-causal, to tokens within |i - j| <= window // 2.  ``heads``, ``bias``,
    ``dropout`` (attention probabilities) as in :class:`MultiHeadMixer`.  Causal
    decoding keeps the last window - 1 keys and values (:class:`LocalAttentionCache`).
    """

    def __init__(self, dim: int, *, causal: bool = True, window: int = 128,
                 heads: int | None = None, bias: bool = True, dropout: float = 0.0):
        super().__init__(dim, causal=causal, heads=heads, bias=bias, dropout=dropout)
        self.window = check_window(window)

    def _attend(self, q, k, v, mask):
        return sequence_local_attention(q, k, v, window=self.window, causal=self.causal,
                                        mask=mask, dropout_p=self.dropout_p)

    def init_cache(self, batch_size: int, max_len: int | None = None) -> LocalAttentionCache:
        """``max_len`` is accepted for the common interface; the window has a fixed size."""
        self.check_cache_args(batch_size, max_len)
        p = self._param()
        shape = (batch_size, self.heads, self.window - 1, self.head_dim)
        mask = torch.zeros(batch_size, self.window - 1, dtype=torch.bool, device=p.device)
        return own(LocalAttentionCache(p.new_zeros(shape), p.new_zeros(shape), mask), self)

    def _attend_cached(self, q, k, v, mask, cache: LocalAttentionCache):
        out = local_attention_decode(q, k, v, cache.k, cache.v, cache.mask, window=self.window,
                                     mask=mask, dropout_p=self.dropout_p)
        cache.push(k, v, mask)
        return out

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window={self.window}"
