"""DBA's authors' form: a backbone whose DBA layers hand Z on (docs/design.md §4).

A mixer with ``carries_z`` (DBA's authors' form with ``z_carry``) compresses the sequence
into C (B, d_p, D); the next such mixer of the backbone takes that C as its Z instead of a
learned one.  The first keeps its learned Z.  :class:`DBAuthorsBackbone` threads the
state through its blocks: a :class:`ZCarryBlock` takes it and hands its own C on, every
other block runs as in any backbone.  :func:`build_backbone` picks this backbone for a
config whose mixers carry Z, the plain :class:`~weirdnet.models.backbone.Backbone`
otherwise, so the plain block loop knows nothing of Z.

A carried Z belongs to one sequence: it has no decoding form (DBA is bidirectional) and
packed documents run as the rows of a padded batch (:func:`weirdnet.ops.packing.
per_document`).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from weirdnet.ops.packing import check_doc_ids, per_document

from .backbone import Backbone
from .blocks import Block, block_contexts, build_mixer
from .config import BackboneConfig


def carries_z(mixer: nn.Module) -> bool:
    """Whether ``mixer`` hands state to the next mixer of its kind (``carries_z``)."""
    return bool(getattr(mixer, "carries_z", False))


class ZCarryBlock(Block):
    """A pre-norm block (:class:`~weirdnet.models.blocks.Block`, the same parameters and
    state_dict keys) whose mixer carries Z: ``forward(x, mask, z)`` returns (x, z)."""

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


def make_block(mixer: nn.Module, config: BackboneConfig, cross: nn.Module | None = None
               ) -> Block:
    """The block for ``mixer``: a :class:`ZCarryBlock` when it carries Z, else a Block."""
    return (ZCarryBlock if carries_z(mixer) else Block)(mixer, config, cross)


def link_z_carriers(blocks) -> bool:
    """Chain the Z-carrying blocks: the first keeps its mixer's learned Z, each later one
    drops its own (``use_carried_z``) and receives the previous one's state.  Returns
    whether any block carries Z."""
    carriers = [block.mixer for block in blocks if isinstance(block, ZCarryBlock)]
    for mixer in carriers[1:]:
        mixer.use_carried_z()
    return bool(carriers)


class DBAuthorsBackbone(Backbone):
    """A :class:`~weirdnet.models.backbone.Backbone` whose DBA layers hand Z on: the same
    parameters and state_dict keys as the plain backbone of the same config, except that
    every DBA layer after the first has no learned Z."""

    def __init__(self, config: BackboneConfig, cross_factory=None):
        super().__init__(config, cross_factory)
        link_z_carriers(self.blocks)

    def make_block(self, mixer: nn.Module, cross: nn.Module | None) -> Block:
        return make_block(mixer, self.config, cross)

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor | None = None, *,
                doc_ids: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """As :meth:`Backbone.forward`; packed documents (``doc_ids``) run as the rows of
        a padded batch, each document alone (a carried Z belongs to one sequence)."""
        if doc_ids is None or kwargs.get("cache") is not None \
                or kwargs.get("context") is not None:  # the plain checks refuse the latter
            return super().forward(inputs, mask, doc_ids=doc_ids, **kwargs)
        self.check_inputs(inputs, mask)
        check_doc_ids(doc_ids, inputs.shape[0], inputs.shape[1], inputs.device)
        return per_document(self, inputs, mask, doc_ids)

    def run_blocks(self, h, mask, context, context_mask, doc_ids):
        """The blocks in order, Z threaded from each carrier to the next (doc_ids is None:
        :meth:`forward` unpacked the documents)."""
        z = None
        contexts = block_contexts(context, len(self.blocks))
        for index, (block, ctx) in enumerate(zip(self.blocks, contexts)):
            run = self._checkpointed(block) if self._checkpoints(index) else block
            if isinstance(block, ZCarryBlock):
                h, z = run(h, mask, z, ctx, context_mask)
            else:
                h = run(h, mask, None, ctx, context_mask, None)
        return h


def build_backbone(config: BackboneConfig, cross_factory=None) -> Backbone:
    """The backbone of ``config``: a :class:`DBAuthorsBackbone` when one of its mixers
    carries Z (read from the mixers themselves, built on the meta device: nothing is
    allocated), else a plain :class:`~weirdnet.models.backbone.Backbone`."""
    return backbone_class(config)(config, cross_factory)


def backbone_class(config: BackboneConfig) -> type[Backbone]:
    """:class:`DBAuthorsBackbone` or :class:`~weirdnet.models.backbone.Backbone`: the
    class :func:`build_backbone` builds for ``config``."""
    with torch.device("meta"):
        carrying = any(carries_z(build_mixer(name, config)) for name in set(config.mixers))
    return DBAuthorsBackbone if carrying else Backbone
