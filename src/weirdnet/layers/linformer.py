"""Linformer mixer (Wang et al. 2020): keys/values projected along the sequence to k rows."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..ops import sequence_linformer_attention
from .base import MultiHeadMixer
from .registry import register


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


@register("linformer", shared=("max_len", "heads", "bias", "dropout"),
          whole_sequence="it projects K and V along the sequence with a (k, max_len) "
                         "matrix over every position")
class LinformerAttention(MultiHeadMixer):
    """Multi-head Linformer attention on (B, L, dim), L <= ``max_len``; not causal.

    Options: ``k`` projected length (default 256), ``max_len`` longest sequence
    (default 4096), ``heads``, ``bias``, ``dropout`` (see :class:`MultiHeadMixer`).
    E, F (k, max_len) are shared by all heads; a sequence of n < max_len tokens uses their
    first n columns (the same as zero-padding it to max_len); padded tokens are zeroed
    before the projection.  They are initialised Xavier-uniform with gain 1/sqrt(2), as in
    the authors' fairseq code.  Memory O(L k).
    """

    def __init__(self, dim: int, *, causal: bool = False, k: int = 256, max_len: int = 4096,
                 heads: int | None = None, bias: bool = True, dropout: float = 0.0):
        if causal:
            raise ValueError("Linformer is not causal: its projections mix all positions; "
                             "build it with causal=False")
        k, max_len = _positive_int(k, "k"), _positive_int(max_len, "max_len")
        super().__init__(dim, causal=False, heads=heads, bias=bias, dropout=dropout)
        self.k, self.max_len = k, max_len
        self.proj_seq_k = nn.Parameter(torch.empty(k, max_len))  # E
        self.proj_seq_v = nn.Parameter(torch.empty(k, max_len))  # F
        self._reset_sequence_projections()

    def _reset_sequence_projections(self) -> None:
        for e in (self.proj_seq_k, self.proj_seq_v):
            nn.init.xavier_uniform_(e, gain=1 / math.sqrt(2))

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self._reset_sequence_projections()

    def check_input(self, x, mask=None, name: str = "x", width: int | None = None) -> None:
        super().check_input(x, mask, name, width)
        if x.shape[1] > self.max_len:
            raise ValueError(f"sequence length {x.shape[1]} exceeds max_len={self.max_len}; "
                             f"build the layer with max_len >= {x.shape[1]}")

    def _attend(self, q, k, v, mask):
        # E and F in the dtype of the keys: under autocast the projections' outputs are
        # in the autocast dtype, and E·K is a matrix product autocast would run in it
        e, f = (p.to(k.dtype) for p in (self.proj_seq_k, self.proj_seq_v))
        return sequence_linformer_attention(q, k, v, e, f, mask=mask,
                                            dropout_p=self.dropout_p)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}, max_len={self.max_len}"
