"""Blocks whose mixer hands state on: DBA's Z-carry (its authors' form, docs/design.md §4).

A mixer with ``carries_z`` (DBA's authors' form with ``z_carry``) compresses the sequence
into C (B, d_p, D); the next such mixer of the backbone takes that C as its Z instead of a
learned one.  The first keeps its learned Z.  The backbone threads the state through
every block's :meth:`~weirdnet.models.blocks.Block.carry`: a plain block passes it on, a
:class:`ZCarryBlock` takes it and hands its own C on.

A carried Z belongs to one sequence: it has no decoding form (DBA is bidirectional) and
packed documents run as the rows of a padded batch (the backbone unpacks them first).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .blocks import Block
from .config import BackboneConfig


def carries_z(mixer: nn.Module) -> bool:
    """Whether ``mixer`` hands state to the next mixer of its kind (``carries_z``)."""
    return bool(getattr(mixer, "carries_z", False))


class ZCarryBlock(Block):
    """A pre-norm block (:class:`~weirdnet.models.blocks.Block`, the same parameters and
    state_dict keys) whose mixer carries Z: ``forward(x, mask, z)`` returns (x, z)."""

    carries_z = True

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                z: torch.Tensor | None = None, context=None,
                context_mask: torch.Tensor | None = None):
        """x (B, L, D), mask (B, L) bool or None; z (B, d_p, D): the previous Z-carrying
        mixer's state, or None (the mixer's learned Z).  Returns (output (B, L, D), the
        state this mixer hands on)."""
        h = self.norm_mix(x)
        if self.conv is not None:
            h, _ = self.conv.before_mixer(h, mask, None)
        y, z = self.mixer(h, mask, z=z, return_z=True)
        return self._after_mixer(x + self.dropout(y), context, context_mask), z

    def carry(self, x: torch.Tensor, z, mask, context, context_mask, doc_ids):
        """The backbone's full-pass call: ``(x, z) -> (output, this mixer's z)``.  Packed
        documents never reach it (the backbone runs them as rows of a padded batch)."""
        if doc_ids is not None:
            raise ValueError("a Z-carrying block takes no doc_ids: a carried Z belongs to one "
                             "sequence (the backbone runs packed documents as rows)")
        return self(x, mask, z, context, context_mask)


def make_block(mixer: nn.Module, config: BackboneConfig, cross: nn.Module | None = None
               ) -> Block:
    """The block for ``mixer``: a :class:`ZCarryBlock` when it carries Z, else a Block."""
    return (ZCarryBlock if carries_z(mixer) else Block)(mixer, config, cross)


def link_z_carriers(blocks) -> bool:
    """Chain the Z-carrying blocks: the first keeps its mixer's learned Z, each later one
    drops its own (``use_carried_z``) and receives the previous one's state.  Returns
    whether any block carries Z."""
    carriers = [block.mixer for block in blocks if block.carries_z]
    for mixer in carriers[1:]:
        mixer.use_carried_z()
    return bool(carriers)
