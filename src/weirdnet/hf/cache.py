"""``WeirdNetCache``: a ``transformers`` ``Cache`` over a weirdnet backbone's decoding state.

Each layer keeps its own weirdnet cache (Weird-attention: per-level ring buffers; softmax:
keys and values; linear attention: running sums; local attention: a window; Relation: a
running sum), and the backbone keeps the real-token count of every sequence (the position
of its next token).  ``generate`` drives it through the methods below:

- ``get_seq_length()``: positions fed so far (real or padding), the length of the
  ``attention_mask`` part the cache has seen;
- ``reorder_cache`` / ``batch_select_indices`` / ``batch_repeat_interleave``: keep, drop
  and repeat sequences (beam search);
- ``crop``: refused (except ``crop(0)``).  A Weird-attention ring buffer holds combined
  states, not one entry per token, so the cache cannot be rolled back; strategies that
  need it (assisted and prompt-lookup decoding) get a clear error instead of wrong text.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from weirdnet.models import BackboneCache

ROLLBACK_ERROR = (
    "a WeirdNetCache cannot be cropped (rolled back): its Weird-attention ring buffers hold "
    "combined states, not one entry per token. Decoding strategies that undo tokens "
    "(assisted or speculative decoding, prompt lookup) cannot run on weirdnet models; use "
    "greedy search, sampling (top-k/top-p) or beam search"
)


class WeirdNetCache(Cache):
    """The decoding state of a :class:`~weirdnet.hf.WeirdNetForCausalLM`.

    Args:
        state: a :class:`~weirdnet.models.BackboneCache` (``backbone.init_cache(B)``).

    ``layers`` lists the per-layer weirdnet caches; ``state`` is the backbone cache the
    model reads and advances.
    """

    def __init__(self, state: BackboneCache):
        super().__init__(layers=list(state.layers))
        self.state = state

    def __repr__(self) -> str:
        kinds = ", ".join(type(layer).__name__ for layer in self.layers)
        return (f"WeirdNetCache(batch={self.batch_size}, seen={self.get_seq_length()}, "
                f"capacity={self.state.capacity}, layers=[{kinds}])")

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions fed so far (real tokens and padding), the same for every layer."""
        return self.state.steps

    def get_max_length(self, layer_idx: int | None = None) -> int:
        """The most positions the cache holds."""
        return self.state.capacity

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        """(kv_length, kv_offset) for ``transformers``' mask helpers (not used by weirdnet:
        its layers take the 2-D padding mask)."""
        return self.state.steps + query_length, 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep sequences ``beam_idx`` in that order (beam search)."""
        self.state.reorder(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep sequences ``indices`` only."""
        self.state.reorder(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every sequence ``repeats`` times in place (a, a, b, b, ...)."""
        index = torch.arange(self.batch_size, device=self.state.lengths.device)
        self.state.reorder(index.repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        """Only ``crop(0)`` (a no-op): see :data:`ROLLBACK_ERROR`."""
        if tokens_to_remove != 0:
            raise ValueError(ROLLBACK_ERROR)

    def reset(self) -> None:
        raise ValueError("a WeirdNetCache cannot be reset in place; let the model make a new "
                         "one (pass cache=None)")

    def activate_past_recording(self) -> None:
        raise ValueError(ROLLBACK_ERROR)

    @property
    def batch_size(self) -> int:
        return self.state.batch_size

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_croppable(self) -> bool:
        return False

    @property
    def is_initialized(self) -> bool:
        return True

    @property
    def is_sliding(self) -> list[bool]:
        return [False] * len(self.layers)

    @property
    def is_linear(self) -> list[bool]:
        return [False] * len(self.layers)

    @property
    def is_dummy(self) -> list[bool]:
        return [False] * len(self.layers)
