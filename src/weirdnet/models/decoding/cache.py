"""The decoding state of a causal backbone: :class:`BackboneCache`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from weirdnet.layers.base import clear_rows, select_rows
from weirdnet.ops import refuse_sharded
from weirdnet.ops.checks import check_rows


@dataclass
class BackboneCache:
    """Decoding state of a causal backbone: one cache per layer, the number of real tokens
    seen per sequence (B,), the number of positions fed (real or padded), the capacity.
    ``fused`` holds the blocks' fused decoding steps once :meth:`Backbone.step` has made
    them (:mod:`.fused_decode`; None for a block that runs as PyTorch ops)."""

    layers: list
    lengths: torch.Tensor
    steps: int
    capacity: int
    fused: list | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        refuse_sharded("decoding")  # a cache holds whole sequences

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep sequences ``index`` (B',) in that order, in every layer (beam search keeps,
        drops and repeats sequences this way); B becomes B'."""
        index = index.to(self.lengths.device, torch.long)
        for layer in self.layers:
            layer.reorder(index)
        (self.lengths,) = select_rows(index, self.lengths)

    def start_document(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` (B,) bool start a new document: every layer forgets their past
        and their positions restart at 0; the next tokens decode as in a fresh cache."""
        check_rows(rows, self.batch_size, self.lengths.device)
        for layer in self.layers:
            layer.start_document(rows)
        clear_rows(rows, self.lengths)
