"""A short causal depthwise convolution on a mixer's input (``short_conv = k``): fla's
``use_short_conv``, Mamba's ``d_conv = 4``, Zoology's BaseConv.

On x (B, L, D): ``y_t = b + Σ_{j<k} w_j ⊙ x_{t-j}`` per channel, with x_{t-j} = 0 before
the sequence and at padded positions (so a left-padded sequence gives what it gives
alone).  Causal in both backbone forms.  It runs :func:`weirdnet.ops.short_conv.short_conv`
(fused C kernels on CPU, ``conv1d`` elsewhere).  Decoding keeps the last k − 1 inputs
(:class:`ShortConvCache`), beside the mixer's own cache.  With packed documents
(``doc_ids``) a tap that would reach into the previous document reads 0, as before the
sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from weirdnet.layers.base import clear_rows, select_rows
from weirdnet.ops import sequence_short_conv
from weirdnet.ops.short_conv import short_conv


@dataclass
class ShortConvCache:
    """A block's decoding state when it has a short convolution: the last k − 1 inputs of
    the convolution, ``state`` (B, k − 1, D), and the mixer's cache ``mixer``."""

    state: torch.Tensor
    mixer: Any

    def reorder(self, index: torch.Tensor) -> None:
        """Keep sequences ``index`` (B',) in that order (beam search); B becomes B'."""
        (self.state,) = select_rows(index, self.state)
        self.mixer.reorder(index)

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool forget their past, in the convolution and the mixer."""
        clear_rows(rows, self.state)
        self.mixer.start_document(rows)


class ShortConv(nn.Module):
    """Depthwise causal convolution of width ``width`` over (B, L, D); ``bias`` per
    channel.  PyTorch's Conv1d initialisation."""

    def __init__(self, dim: int, width: int, bias: bool = True):
        super().__init__()
        self.width = width
        self.conv = nn.Conv1d(dim, dim, width, groups=dim, bias=bias)

    def init_state(self, batch_size: int) -> torch.Tensor:
        """Zeros (B, k − 1, D): the state before the first token."""
        w = self.conv.weight
        return w.new_zeros(batch_size, self.width - 1, w.shape[0])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                state: torch.Tensor | None = None, doc_ids: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, L, D), mask (B, L) bool (True = real), state (B, k − 1, D) or None
        (zeros); doc_ids (B, L) packed documents (full pass only: the state is then None).
        Returns y (B, L, D) and the state after the last position."""
        if mask is not None:
            x = x.masked_fill(~mask[..., None], 0.0)
        weight, bias = self.conv.weight[:, 0], self.conv.bias
        if state is None:  # the whole sequence (or, sharded, its taps through a halo)
            y = sequence_short_conv(x, weight, bias, doc_ids)
        else:
            y = short_conv(x, weight, bias, state, doc_ids=doc_ids)
        return y, None if doc_ids is not None else self._next_state(x, state)

    def before_mixer(self, x: torch.Tensor, mask: torch.Tensor | None, cache,
                     doc_ids: torch.Tensor | None = None):
        """The convolution on a mixer's input x (B, L, D) inside a block: returns (y, the
        mixer's cache).  ``cache`` is the block's decoding state, a
        :class:`ShortConvCache` (its ``state`` is read and advanced here, its ``mixer``
        part handed on) or None (the full pass, with packed ``doc_ids`` if any)."""
        if cache is None:
            return self(x, mask, None, doc_ids)[0], None
        y, cache.state = self(x, mask, cache.state)
        return y, cache.mixer

    def _next_state(self, x: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """The last k − 1 inputs, reaching into ``state`` (None: zeros) when L < k − 1."""
        keep = self.width - 1
        if x.shape[1] >= keep:
            return x[:, x.shape[1] - keep:]
        if state is None:
            state = self.init_state(x.shape[0]).to(x.dtype)
        return torch.cat((state, x), dim=1)[:, -keep:]

    def extra_repr(self) -> str:
        return f"width={self.width}, causal"
