"""Relation mixer (Relation paper §3.1.2; docs/design.md §3).

    H = X W_h + b_h,  G = X W_g + b_g              (width d = inner_dim)
    h̄ = mean of H over the real tokens             (one vector per sequence)
    R = W_o ReLU(W_1 drop(h̄ ⊙ G)) with a second dropout after the ReLU; W_1, W_o no bias

``causal=False`` (the default) is the paper's bidirectional form.  ``causal=True`` is the
documented extension: h̄_i is the mean of H_1..H_i over the real tokens, and decoding keeps
a running sum and count (O(d) memory, O(D·d + d²) time per token).  A sequence or prefix
without a real token uses h̄ = 0.  Initialisation: Glorot uniform weights, zero biases
(Relation paper §3.2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from ..ops import sequence_relation_mean, sequence_relation_mix
from ..ops.relation import relation_mix_continue
from .base import Mixer, clear_rows, select_rows
from .ownership import own
from .registry import register


@dataclass
class RelationCache:
    """Decoding state of one causal :class:`Relation` layer.

    ``total``: (B, d) float64 sum of H over the real tokens seen; ``count``: (B,) their
    number; ``position``: tokens seen (real or padded); ``capacity``: None = unbounded.
    Holds no autograd history.
    """

    total: torch.Tensor
    count: torch.Tensor
    position: int = 0
    capacity: int | None = None

    @property
    def batch_size(self) -> int:
        return self.total.shape[0]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (beam search); B becomes B'."""
        self.total, self.count = select_rows(index, self.total, self.count)

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool forget their past: their sums and counts restart."""
        clear_rows(rows, self.total, self.count)


def _check_options(dim, inner_dim, dropout) -> None:
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive int, got {dim!r}")
    if not isinstance(inner_dim, int) or inner_dim < 1:
        raise ValueError(f"inner_dim must be a positive int, got {inner_dim!r}")
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a probability in [0, 1), got {dropout!r}")


@register("relation", shared=("dropout",),
          whole_sequence="its per-sequence mean of H needs every position's H (no sharded "
                         "form here)")
class Relation(Mixer):
    """Relation mixer on (B, L, dim) inputs.

    Args:
        dim: model width D.
        causal: False (default) for the paper's bidirectional form, True for prefix means.
        inner_dim: width d of H and G (default: dim).
        dropout: dropout rate after h̄ ⊙ G and after the ReLU (default 0).
    """

    def __init__(self, dim: int, *, causal: bool = False, inner_dim: int | None = None,
                 dropout: float = 0.0):
        super().__init__()
        inner_dim = dim if inner_dim is None else inner_dim
        _check_options(dim, inner_dim, dropout)
        self.dim, self.inner_dim, self.causal = dim, inner_dim, bool(causal)
        self.proj_h = nn.Linear(dim, inner_dim)
        self.proj_g = nn.Linear(dim, inner_dim)
        self.w_1 = nn.Linear(inner_dim, inner_dim, bias=False)
        self.proj_o = nn.Linear(inner_dim, dim, bias=False)
        self.drop_mix = nn.Dropout(dropout)
        self.drop_act = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights and zero biases, as in the paper's experiments."""
        for lin in (self.proj_h, self.proj_g, self.w_1, self.proj_o):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def _head(self, mixed: torch.Tensor) -> torch.Tensor:
        """W_o drop(ReLU(W_1 drop(mixed))): (..., d) -> (..., dim)."""
        return self._tail(self.w_1(self.drop_mix(mixed)))

    def _tail(self, pre: torch.Tensor) -> torch.Tensor:
        """W_o drop(ReLU(pre)): (..., d) -> (..., dim)."""
        return self.proj_o(self.drop_act(torch.relu(pre)))

    def mix(self, x, mask, doc_ids=None):
        if doc_ids is not None:
            return self.each_document(x, mask, doc_ids)
        if not self.causal and not (self.training and self.drop_mix.p > 0):
            return self._tail(self._folded_preactivation(x, mask))
        mixed = sequence_relation_mix(self.proj_h(x), self.proj_g(x), mask,
                                      causal=self.causal)
        return self._head(mixed)

    def _folded_preactivation(self, x: torch.Tensor, mask) -> torch.Tensor:
        """W_1 (h̄ ⊙ G) for the bidirectional form without dropout on the product, by
        associativity: h̄ = mean(X) W_hᵀ + b_h (0 without a real token) and

            W_1 (h̄ ⊙ (X W_gᵀ + b_g)) = X (W_gᵀ diag(h̄) W_1ᵀ) + (b_g ⊙ h̄) W_1ᵀ,

        one (B, L, dim) x (B, dim, d) product per sequence instead of two (L, d) ones."""
        hbar = self.proj_h(sequence_relation_mean(x, mask))  # (B, 1, d)
        if mask is not None:
            hbar = hbar * mask.any(1).to(hbar.dtype)[:, None, None]
        w_1t = self.w_1.weight.T
        per_seq = (self.proj_g.weight.T * hbar) @ w_1t  # (B, dim, d)
        return torch.baddbmm((self.proj_g.bias * hbar) @ w_1t, x, per_seq)

    def not_decodable(self, what: str) -> ValueError:
        return ValueError(f"incremental decoding needs a causal layer (causal=True): {what}; "
                          "the bidirectional Relation mixes the whole sequence at once")

    def init_cache(self, batch_size: int, max_len: int | None = None) -> RelationCache:
        """Running sums for ``batch_size`` sequences.  Their size does not grow with
        length; ``max_len`` (optional) only caps the number of tokens accepted."""
        self.check_cache_args(batch_size, max_len)
        device = self.proj_h.weight.device
        total = torch.zeros(batch_size, self.inner_dim, dtype=torch.float64, device=device)
        count = torch.zeros(batch_size, dtype=torch.long, device=device)
        return own(RelationCache(total, count, 0, max_len), self)

    def extend(self, x, mask, cache: RelationCache):
        T = x.shape[1]
        if cache.capacity is not None and cache.position + T > cache.capacity:
            raise ValueError(f"cache capacity {cache.capacity} exceeded: {cache.position} "
                             f"tokens seen, {T} more given")
        mixed, total, count = relation_mix_continue(
            self.proj_h(x), self.proj_g(x), mask, cache.total, cache.count)
        cache.total, cache.count = total.detach(), count
        cache.position += T
        return self._head(mixed)

    def extra_repr(self) -> str:
        form = "causal" if self.causal else "bidirectional"
        return f"dim={self.dim}, inner_dim={self.inner_dim}, {form}"
