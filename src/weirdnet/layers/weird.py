"""Weird-attention (AIB-attention) and PS-attention layers.

    A = X W_A (+ b_A),  V = X W_V (+ b_V),  O = weird_scan(A, V, log W),  Y = O W_O + b_O

with ``log W = cumsum(w)`` ("cumexp", the papers' default), ``w`` ("exp") or 0 ("ones",
PS-attention).  ``causal=True`` is the decoder form (prefix scan); ``causal=False`` the
encoder form: the first ``dim // 2`` channels scan forward and the rest backward, each
channel with its own column of ``w``.  ``bias=True`` adds the Moss variant's biases to the
A and V projections.  Initialisation follows Weird-Net §III.G (docs/design.md §1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from ..ops import WeirdScanCache, levels_needed, sequence_scan
from ..ops.block_step import ScanMixerWeights
from .base import Mixer
from .ownership import check_owner, own
from .registry import register

WEIGHT_MODES = ("cumexp", "exp", "ones")


@dataclass
class WeirdAttentionCache:
    """Decoding state of one causal :class:`WeirdAttention` layer.

    ``scan`` holds the per-level ring buffers; ``position`` is the number of tokens seen.
    """

    scan: WeirdScanCache

    @property
    def position(self) -> int:
        return self.scan.position

    @property
    def capacity(self) -> int:
        return self.scan.capacity

    @property
    def batch_size(self) -> int:
        return self.scan.batch_size

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (beam search); B becomes B'."""
        self.scan.reorder(index)

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool forget every token so far: a new document starts."""
        self.scan.start_document(rows)


@register("weird", shared=("max_len", "bias", "n_layers"))
class WeirdAttention(Mixer):
    """Weird-attention mixer on (B, L, dim) inputs.

    Args:
        dim: model width D (channels).
        causal: True for the decoder (prefix) form, False for the encoder form.
        max_len: longest sequence accepted; the layer has ceil(log2(max_len)) levels of w.
        weights: "cumexp" (W = exp(cumsum(w))), "exp" (W = exp(w)) or "ones" (PS-attention).
        bias: biases on the A and V projections (the Moss variant).
        n_layers: number of layers N of the model, used by the papers' W_O initialisation.
    """

    def __init__(self, dim: int, *, causal: bool = True, max_len: int = 4096,
                 weights: str = "cumexp", bias: bool = False, n_layers: int = 1):
        super().__init__()
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if not causal and dim < 2:
            raise ValueError("the encoder form (causal=False) needs dim >= 2 to split channels")
        if not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        if weights not in WEIGHT_MODES:
            raise ValueError(f"weights must be one of {WEIGHT_MODES}, got {weights!r}")
        if not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(f"n_layers must be a positive int, got {n_layers!r}")
        self.dim, self.causal, self.max_len = dim, bool(causal), max_len
        self.weights, self.n_layers = weights, n_layers
        self.levels = max(1, levels_needed(max_len))
        self.proj_a = nn.Linear(dim, dim, bias=bias)
        self.proj_v = nn.Linear(dim, dim, bias=bias)
        self.proj_o = nn.Linear(dim, dim, bias=True)
        if weights == "ones":
            self.register_parameter("w", None)
        else:
            self.w = nn.Parameter(torch.empty(self.levels, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The papers' initialisation: W_A, W_V ~ N(0, 1/sqrt(D)), w ~ N(0, 1),
        W_O ~ N(0, sqrt((1 - 2/D) / (2 N D))), biases 0 (standard deviations)."""
        D = self.dim
        for proj in (self.proj_a, self.proj_v):
            nn.init.normal_(proj.weight, std=1.0 / math.sqrt(D))
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        std_o = math.sqrt(max(0.0, 1 - 2 / D) / (2 * self.n_layers * D))
        nn.init.normal_(self.proj_o.weight, std=std_o)
        nn.init.zeros_(self.proj_o.bias)
        if self.w is not None:
            nn.init.normal_(self.w, std=1.0)

    def log_weights(self) -> torch.Tensor:
        """log W per level and channel: (levels, dim)."""
        if self.weights == "cumexp":
            return torch.cumsum(self.w, dim=0)
        if self.weights == "exp":
            return self.w
        return self.proj_o.weight.new_zeros(self.levels, self.dim)

    def check_input(self, x, mask=None, name: str = "x", width: int | None = None) -> None:
        """The common checks, and L <= max_len (the levels of ``w`` cover max_len)."""
        super().check_input(x, mask, name, width)
        if x.shape[1] > self.max_len:
            raise ValueError(
                f"sequence length {x.shape[1]} exceeds max_len={self.max_len}; build the layer "
                f"with max_len >= {x.shape[1]}"
            )

    def mix(self, x, mask, doc_ids=None):
        """The scan with its document gate (``doc_ids`` None: one document per row), one
        call into the scan's custom op: x, mask and doc_ids were checked on entry
        (:meth:`Mixer.forward`), A and V are projections of x and ``log_w`` covers
        ``max_len``, so the public op's checks would only repeat those."""
        a, v = self.proj_a(x), self.proj_v(x)
        n_causal = self.dim if self.causal else self.dim // 2  # encoder: half each way
        return self.proj_o(sequence_scan(a, v, self.log_weights(), mask, doc_ids, n_causal,
                                         ""))

    def init_cache(self, batch_size: int, max_len: int | None = None) -> WeirdAttentionCache:
        """Ring buffers for up to ``max_len`` tokens (default: the layer's max_len): about
        3 * max_len * dim numbers per sequence."""
        self.check_cache_args(batch_size, max_len)
        max_len = self.max_len if max_len is None else max_len
        if max_len > self.max_len:
            raise ValueError(f"cache max_len={max_len} exceeds the layer's max_len={self.max_len}")
        scan = WeirdScanCache(self.log_weights().detach(), batch_size, max_len,
                              dtype=self.proj_o.weight.dtype)
        return own(WeirdAttentionCache(scan), self)

    def extend(self, x, mask, cache: WeirdAttentionCache):
        return self.proj_o(cache.scan.extend(self.proj_a(x), self.proj_v(x), mask))

    def scan_step(self, cache):
        """``(ScanMixerWeights, scan cache)`` over ``cache`` (see :meth:`Mixer.scan_step`),
        or None: not causal, or not a Weird-attention cache.  Another layer's cache is a
        ValueError (:func:`.ownership.check_owner`)."""
        if not self.causal or not isinstance(cache, WeirdAttentionCache):
            return None
        check_owner(cache, self)
        scan = cache.scan
        weights = ScanMixerWeights(self.proj_a.weight, self.proj_a.bias, self.proj_v.weight,
                                   self.proj_v.bias, self.proj_o.weight, self.proj_o.bias,
                                   scan.log_w)
        return weights, scan

    def extra_repr(self) -> str:
        form = "causal" if self.causal else "bidirectional"
        return (f"dim={self.dim}, {form}, max_len={self.max_len}, weights={self.weights!r}, "
                f"bias={self.proj_a.bias is not None}")


@register("ps", shared=("max_len", "bias", "n_layers"))
class PSAttention(WeirdAttention):
    """PS-attention: Weird-attention with W = 1 (plain softmax-weighted prefix sums)."""

    def __init__(self, dim: int, *, causal: bool = True, max_len: int = 4096,
                 bias: bool = False, n_layers: int = 1):
        super().__init__(dim, causal=causal, max_len=max_len, weights="ones", bias=bias,
                         n_layers=n_layers)
