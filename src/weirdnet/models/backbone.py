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
from functools import partial

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from weirdnet.layers.base import check_dtype_matches, check_owner, own
from weirdnet.ops import checkpoint_context_fn, sequence_length, sequence_positions
from weirdnet.ops.checks import check_mask, on_host
from weirdnet.ops.packing import check_doc_ids

from .blocks import Block, PerBlockContext, block_contexts, build_mixer, make_norm
from .config import BackboneConfig
from .decoding.cache import BackboneCache
from .decoding.fused_decode import FUSED_STEP_MAX_BATCH, fused_step, may_fuse

__all__ = ["CHECKPOINTING", "FUSED_STEP_MAX_BATCH", "Backbone", "BackboneCache",
           "PerBlockContext", "normal_init"]

CHECKPOINTING = ("none", "blocks", "every_k")
"""The activation checkpointing modes of :meth:`Backbone.set_activation_checkpointing`."""


def normal_init(module: nn.Module, std: float) -> None:
    """Every ``nn.Linear`` and ``nn.Embedding`` weight in ``module`` from N(0, std), their
    biases zeroed (``BackboneConfig.init_std``); other parameters are left as they are."""
    for part in module.modules():
        if isinstance(part, nn.Linear | nn.Embedding):
            nn.init.normal_(part.weight, std=std)
        if isinstance(part, nn.Linear) and part.bias is not None:
            nn.init.zeros_(part.bias)


class Backbone(nn.Module):
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
        # Activation checkpointing (:meth:`set_activation_checkpointing`); the attribute
        # names are transformers' own, so ``gradient_checkpointing_enable()`` sets them.
        self.gradient_checkpointing = False
        self.checkpoint_every = 1
        self._gradient_checkpointing_func = None
        self.reset_parameters()

    def make_block(self, mixer: nn.Module, cross: nn.Module | None) -> Block:
        """The block around ``mixer`` (and the cross mixer ``cross``, if any)."""
        return Block(mixer, self.config, cross)

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
        cfg = self.config
        if self.takes_tokens:
            if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 \
                    or inputs.dtype not in (torch.long, torch.int32, torch.int16, torch.uint8):
                raise ValueError("token inputs must be an integer tensor (batch, length), got "
                                 f"{_describe(inputs)}")
            if check_ids is None:
                check_ids = on_host(inputs)
            if check_ids and inputs.numel():
                low, high = torch.stack(torch.aminmax(inputs)).tolist()  # one host read
                if low < 0 or high >= cfg.vocab_size:
                    raise ValueError(f"token ids must be in [0, {cfg.vocab_size}), got "
                                     f"[{low}, {high}]")
        elif not isinstance(inputs, torch.Tensor) or inputs.dim() != 3 \
                or inputs.shape[-1] != cfg.input_dim or not inputs.is_floating_point():
            raise ValueError(f"continuous inputs must be a float tensor (batch, length, "
                             f"{cfg.input_dim}), got {_describe(inputs)}")
        else:
            check_dtype_matches(inputs, self, "inputs")
        if inputs.shape[1] < 1:
            raise ValueError("inputs must have at least one position")
        length = sequence_length(inputs)  # sharded: the whole sequence's
        if length > cfg.max_len:
            raise ValueError(f"sequence length {length} exceeds max_len={cfg.max_len}: the "
                             f"model takes at most {cfg.max_len} positions")
        check_mask(mask, inputs.shape[0], inputs.shape[1])

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
        and the cache advances (:meth:`_extend`).  ``context``/``context_mask`` go to the
        blocks' cross mixers.  Returns hidden states (B, L, D) after the final norm.
        """
        self.check_inputs(inputs, mask)
        check_doc_ids(doc_ids, inputs.shape[0], inputs.shape[1], inputs.device)
        if cache is not None:
            return self._extend(inputs, mask, cache, context, context_mask, doc_ids)
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

    def _extend(self, inputs, mask, cache: BackboneCache, context, context_mask,
                doc_ids=None):
        """The cached forward: L more tokens continue the cached sequences.  One unpadded
        token (L = 1, mask None or all True) runs as :meth:`step` does (the fused blocks
        where they apply, :mod:`.fused_decode`), bitwise alike."""
        check_owner(cache, self)
        if doc_ids is not None:
            raise ValueError("doc_ids belong to the full pass; when decoding, start a new "
                             "document in chosen rows with cache.start_document(rows)")
        batch, length = inputs.shape[:2]
        if batch != cache.lengths.shape[0]:
            raise ValueError(f"cache holds {cache.lengths.shape[0]} sequences, inputs have "
                             f"{batch}")
        if cache.steps + length > cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} positions; {cache.steps} are "
                             f"used and {length} more were given")
        if length == 1 and self.takes_tokens and may_fuse(self, batch) and _all_real(mask):
            return fused_step(self, inputs[:, 0], cache, context, context_mask)[:, None]
        h = self.embed_inputs(inputs, mask, start=cache.lengths)
        contexts = block_contexts(context, len(self.blocks))
        for block, layer_cache, ctx in zip(self.blocks, cache.layers, contexts):
            h = block(h, mask, cache=layer_cache, context=ctx, context_mask=context_mask)
        real = length if mask is None else mask.sum(1)
        cache.lengths = cache.lengths + real
        cache.steps += length
        return self.norm(h)

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
        check_owner(cache, self)
        if not self.takes_tokens or not isinstance(tokens, torch.Tensor) \
                or tokens.shape != (cache.batch_size,):
            raise ValueError(f"step takes token ids of shape ({cache.batch_size},) on a "
                             f"token backbone, got {_describe(tokens)}")
        if cache.steps >= cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} positions; all are used")
        if not may_fuse(self, cache.batch_size):
            return self._extend(tokens[:, None], None, cache, context, context_mask)[:, 0]
        return fused_step(self, tokens, cache, context, context_mask)

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


def _all_real(mask: torch.Tensor | None) -> bool:
    """True when ``mask`` marks no padding: None, or a CPU mask that is all True (read
    only on the host, where it costs no device synchronisation)."""
    return mask is None or (on_host(mask) and bool(mask.all()))


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__
