"""A Weird-Net backbone: input embedding (+ learned positions), N blocks, final norm.

Positions count real tokens only: with a padding mask, the position of a token is the
number of real tokens before it, so right padding (training batches) and left padding
(batched generation of prompts of different lengths) both give every real token the
position it would have alone.

Packed documents (``doc_ids``, :mod:`weirdnet.ops.packing`): positions restart at each
document and every block mixes each document on its own, so every document's outputs
are those it has alone.  DBA's authors' form, whose layers hand Z on, has its own
backbone (:mod:`weirdnet.models.dba_authors`).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from weirdnet.layers.ownership import own
from weirdnet.ops import sequence_positions
from weirdnet.ops.packing import check_doc_ids

from .blocks import Block, PerBlockContext, block_contexts, build_mixer, make_norm, normal_init
from .checkpointing import CHECKPOINTING, BlockCheckpointing
from .config import BackboneConfig
from .decoding.cache import BackboneCache
from .decoding.cached import extend
from .decoding.cached import step as cached_step
from .decoding.fused_decode import FUSED_STEP_MAX_BATCH
from .inputs import check_inputs

__all__ = ["CHECKPOINTING", "FUSED_STEP_MAX_BATCH", "Backbone", "BackboneCache",
           "PerBlockContext", "normal_init"]


class Backbone(BlockCheckpointing, nn.Module):
    """Embeds (B, L) token ids or (B, L, input_dim) values and runs the blocks: (B, L, D).

    Initialisation (Weird-Net §III.G): token embedding, input projection and position
    embedding ~ N(0, 1/√D); FFN and Weird-attention layers initialise themselves; other
    mixers keep their own initialisation; LayerNorms are (1, 0).
    """

    def __init__(self, config: BackboneConfig, cross_factory=None):
        super().__init__()
        self.config = config
        dim = config.dim
        if config.vocab_size is not None:
            self.embed = nn.Embedding(config.vocab_size, dim)
        else:
            self.embed = nn.Linear(config.input_dim, dim)
        self.pos = nn.Embedding(config.max_len, dim) if config.positions == "learned" else None
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            self.make_block(build_mixer(name, config),
                            None if cross_factory is None else cross_factory())
            for name in config.mixers)
        self.norm = make_norm(config)
        self.reset_parameters()

    def make_block(self, mixer: nn.Module, cross: nn.Module | None) -> Block:
        """The block around ``mixer`` (and the cross mixer ``cross``, if any)."""
        return Block(mixer, self.config, cross)

    def reset_parameters(self) -> None:
        std = 1.0 / math.sqrt(self.config.dim)
        nn.init.normal_(self.embed.weight, std=std)
        if isinstance(self.embed, nn.Linear):
            nn.init.zeros_(self.embed.bias)
        if self.pos is not None:
            nn.init.normal_(self.pos.weight, std=std)
        if self.config.init_std is not None:
            normal_init(self, self.config.init_std)

    @property
    def takes_tokens(self) -> bool:
        return self.config.vocab_size is not None

    def check_inputs(self, inputs: torch.Tensor, mask: torch.Tensor | None,
                     check_ids: bool | None = None) -> None:
        """Shape, dtype and range checks with messages that say what was expected.

        The token-id range check reads the ids' values: by default (``check_ids=None``) it
        runs only where that is free, on CPU tensors in eager mode (see
        :func:`~weirdnet.ops.checks.on_host`); elsewhere an id out of range fails in the
        embedding.  ``check_ids=True`` runs it anyway (once per ``generate`` call)."""
        check_inputs(self, inputs, mask, check_ids)

    def positions(self, mask: torch.Tensor | None, batch: int, length: int,
                  start: torch.Tensor | None = None, doc_ids=None) -> torch.Tensor:
        """Position ids (B, L): real tokens counted from ``start`` (B,) (default 0); they
        stay below max_len (checked on the length, or on the cache's capacity)."""
        return sequence_positions(mask, batch, length, self.embed.weight.device, start,
                                  doc_ids)

    def embed_inputs(self, inputs: torch.Tensor, mask, start=None, doc_ids=None
                     ) -> torch.Tensor:
        """Token/value embedding (+ learned position embedding, restarting at each packed
        document with ``doc_ids``), dropout: (B, L, D)."""
        h = self.embed_values(inputs)
        if self.pos is not None:
            h = h + self.pos(self.positions(mask, *inputs.shape[:2], start, doc_ids))
        return self.dropout(h)

    def embed_values(self, inputs: torch.Tensor) -> torch.Tensor:
        """The token (or value) embeddings of inputs (B, L[, input_dim]): (B, L, D)."""
        return self.embed(inputs.long() if self.takes_tokens else inputs)

    def forward(self, inputs: torch.Tensor, mask: torch.Tensor | None = None, *,
                cache: BackboneCache | None = None, context=None, context_mask=None,
                doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """inputs (B, L) ids or (B, L, input_dim); mask (B, L) bool, True = real;
        doc_ids (B, L) integer ids of packed documents (see the module docstring).

        With ``cache`` (from :meth:`init_cache`) the inputs continue the cached sequences
        and the cache advances (:func:`.decoding.cached.extend`).  ``context`` and
        ``context_mask`` go to the blocks' cross mixers.  Returns hidden states
        (B, L, D) after the final norm.
        """
        self.check_inputs(inputs, mask)
        check_doc_ids(doc_ids, inputs.shape[0], inputs.shape[1], inputs.device)
        if cache is not None:
            return extend(self, inputs, mask, cache, context, context_mask, doc_ids)
        if doc_ids is not None and context is not None:
            raise ValueError("packed documents (doc_ids) take no cross-attended context: "
                             "one context belongs to one sequence")
        h = self.embed_inputs(inputs, mask, doc_ids=doc_ids)
        return self.norm(self.run_blocks(h, mask, context, context_mask, doc_ids))

    def run_blocks(self, h, mask, context, context_mask, doc_ids) -> torch.Tensor:
        """The blocks in order on the embedded h (B, L, D), checkpointed where set."""
        contexts = block_contexts(context, len(self.blocks))
        for index, (block, ctx) in enumerate(zip(self.blocks, contexts)):
            run = self._checkpointed(block) if self._checkpoints(index) else block
            h = run(h, mask, None, ctx, context_mask, doc_ids)
        return h

    def step(self, tokens: torch.Tensor, cache: BackboneCache, context=None,
             context_mask=None) -> torch.Tensor:
        """Advance every cached sequence by one token: tokens (B,) ids -> hidden states
        (B, D) after the final LayerNorm, as ``forward(tokens[:, None], cache=cache)[:, 0]``
        (bitwise: a one-token cached forward without padding takes this same path).

        The decoding loop's call (mamba's ``step``): in eval mode, without autograd and
        outside ``torch.compile``, for at most ``FUSED_STEP_MAX_BATCH`` sequences, each
        causal Weird-attention block on CPU runs as one fused C call
        (:mod:`weirdnet.models.decoding.fused_decode`, made at the cache's first step from the
        weights of that moment); other blocks run as PyTorch ops.  Token ids are not
        range-checked here (the embedding rejects one out of range).  A cache made by
        another backbone is a ValueError (:func:`weirdnet.layers.ownership.check_owner`).
        """
        return cached_step(self, tokens, cache, context, context_mask)

    def init_cache(self, batch_size: int, max_len: int | None = None) -> BackboneCache:
        """An empty decoding cache for ``batch_size`` sequences of up to ``max_len``
        positions (default: the model's max_len).  Causal backbones only."""
        if not self.config.causal:
            raise ValueError("incremental decoding needs a causal backbone (causal=True)")
        max_len = self.config.max_len if max_len is None else max_len
        if max_len > self.config.max_len:
            raise ValueError(f"cache max_len={max_len} exceeds the model's "
                             f"max_len={self.config.max_len}")
        layers = [block.init_cache(batch_size, max_len) for block in self.blocks]
        lengths = torch.zeros(batch_size, dtype=torch.long, device=self.embed.weight.device)
        return own(BackboneCache(layers, lengths, 0, max_len), self)

