"""Activation checkpointing of a backbone's blocks: :class:`BlockCheckpointing`."""

from __future__ import annotations

from functools import partial

import torch
from torch.utils.checkpoint import checkpoint

from weirdnet.ops import checkpoint_context_fn

CHECKPOINTING = ("none", "blocks", "every_k")
"""The activation checkpointing modes of :meth:`BlockCheckpointing.set_activation_checkpointing`."""


class BlockCheckpointing:
    """The checkpointing of a module's ``blocks`` (a mixin of
    :class:`~weirdnet.models.backbone.Backbone`).  The attribute names are transformers'
    own, so ``gradient_checkpointing_enable()`` sets them."""

    gradient_checkpointing = False
    checkpoint_every = 1
    _gradient_checkpointing_func = None  # set by transformers; None: ours, non-reentrant

    def set_activation_checkpointing(self, mode: str = "blocks", every: int = 2,
                                     ffn_chunk: int = 0) -> None:
        """Keep only the inputs of checkpointed blocks in training and recompute the rest
        in the backward pass (``torch.utils.checkpoint``, non-reentrant): ``mode`` "none",
        "blocks" (every block) or "every_k" (blocks 0, k, 2k, ...: less recomputation,
        more memory; k = ``every``).  ``ffn_chunk`` > 0 also runs every FFN in
        checkpointed chunks of that many positions (it is position-wise), so a block's
        recomputation never holds d_ff numbers per position for the whole sequence: what
        a context of a million positions needs.  Outputs and gradients are those of the
        plain pass (dropout replays its random draws; with ``ffn_chunk`` the FFN's dropout
        draws its masks chunk by chunk: other draws, the same distribution)."""
        if mode not in CHECKPOINTING:
            raise ValueError(f"activation checkpointing must be one of {CHECKPOINTING}, got "
                             f"{mode!r}")
        for name, value, low in (("every", every, 1), ("ffn_chunk", ffn_chunk, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        for block in self.blocks:
            block.ffn_chunk = ffn_chunk
        self.gradient_checkpointing = mode != "none"
        self.checkpoint_every = every if mode == "every_k" else 1
        self._gradient_checkpointing_func = None  # ours: non-reentrant

    def _checkpoints(self, index: int) -> bool:
        """Whether block ``index`` runs checkpointed in this pass (training with
        autograd only: evaluation and decoding keep nothing to recompute)."""
        return (self.gradient_checkpointing and self.training and torch.is_grad_enabled()
                and index % self.checkpoint_every == 0)

    def _checkpointed(self, block):
        """``block`` under ``torch.utils.checkpoint`` (or the function
        ``transformers``' ``gradient_checkpointing_enable`` set), tensors passed
        positionally so a reentrant checkpoint sees them too."""
        run = self._gradient_checkpointing_func or partial(checkpoint, use_reentrant=False)
        context_fn = checkpoint_context_fn()  # sharded: keeps the exchanges' outputs
        if context_fn is not None and self._gradient_checkpointing_func is None:
            run = partial(run, context_fn=context_fn)
        return partial(run, block)
