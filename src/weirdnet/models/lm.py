"""``WeirdNetLM``: a causal language model (Weird-Net structure B by default) with cached
generation.

Generation runs the prompt through every layer once, keeping each layer's decoding cache
(Weird-attention: per-level ring buffers, O(D·log L) per new token; softmax: a KV cache,
O(L·D) per token), then adds one token at a time.  Its logits equal those of a full
forward pass over the whole sequence at every step (checked by the tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from weirdnet.config.typed import ConfigError

from .backbone import Backbone
from .base import WeirdNetModel, register_model
from .config import BackboneConfig
from .decoding.generation import Sampling, decode


def _lm_backbone() -> BackboneConfig:
    return BackboneConfig(pattern="B", causal=True)


@dataclass
class LMConfig:
    """A causal backbone (``causal`` must be True; token inputs) and the output head:
    ``tie_embeddings`` shares the token embedding with the output projection (GPT-2)."""

    backbone: BackboneConfig = field(default_factory=_lm_backbone)
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        if not self.backbone.causal:
            raise ConfigError("a language model needs a causal backbone (backbone.causal=True)")
        if self.backbone.vocab_size is None:
            raise ConfigError("a language model needs token inputs (backbone.vocab_size)")


@dataclass
class LMOutput:
    """logits (B, L, V), or (N, V) at the N positions ``logits_at`` selects; loss: mean
    cross-entropy over counted targets, or None."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


# a pytree node: torch.export and torch.compile can return it from a graph
torch.export.register_dataclass(LMOutput)


@register_model
class WeirdNetLM(WeirdNetModel):
    """Causal language model on token ids (B, L): logits (B, L, vocab) and the loss."""

    config_class = LMConfig

    def __init__(self, config: LMConfig | dict | None = None):
        super().__init__(LMConfig() if config is None else config)
        cfg = self.config.backbone
        self.backbone = Backbone(cfg)
        self.head = output_head(cfg, self.config.tie_embeddings)

    @property
    def max_len(self) -> int:
        return self.config.backbone.max_len

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states (..., D) -> logits (..., vocab)."""
        return output_logits(hidden, self.backbone, self.head)

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, doc_ids: torch.Tensor | None = None, *,
                logits_at: torch.Tensor | None = None) -> LMOutput:
        """input_ids (B, L); targets (B, L) next-token ids (-100 = not counted); mask
        (B, L) bool, True = real token (targets at padded positions are not counted);
        doc_ids (B, L) packed documents (:mod:`weirdnet.ops.packing`): each is modelled
        alone.  A target that is the first token of the next document should be -100
        (:func:`weirdnet.ops.packing.within_documents` does it; the LM task does).
        ``logits_at`` (B, L) bool computes the output head only where it is True:
        logits (N, V) in row-major order and the loss over those positions' targets.
        The recall tasks ask a few positions of each sequence, so over a large vocabulary
        this skips most of the head's work.  Returns :class:`LMOutput`."""
        hidden = self.backbone(input_ids, mask, doc_ids=doc_ids)
        if logits_at is None:
            logits = self.logits(hidden)
            return LMOutput(logits, None if targets is None else lm_loss(logits, targets, mask))
        hidden, targets, mask = positions_at(logits_at, hidden, targets, mask)
        return selected_output(self.logits(hidden), targets, mask)

    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, *,
                 prompt_mask: torch.Tensor | None = None, eos_id: int | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Continue each prompt by ``max_new_tokens`` tokens: (B, Lp) -> (B, Lp + new).

        temperature 0 is greedy; ``top_k`` / ``top_p`` restrict sampling (see
        :func:`~weirdnet.models.decoding.sampling.sample_next`).  Prompts of different lengths are
        left-padded with ``prompt_mask`` (B, Lp) False at the padding.  After ``eos_id`` a
        sequence keeps emitting ``eos_id``; generation stops early once all have.
        Dropout is off during generation (the model's mode is restored afterwards).
        """
        sampling = Sampling(temperature, top_k, top_p, eos_id, generator)
        return decode(self, self.backbone, self.logits, prompt_ids, max_new_tokens, sampling,
                      prompt_mask)


def output_head(config: BackboneConfig, tie: bool) -> nn.Linear | None:
    """The output projection of a token model: None when tied to the token embedding
    (GPT-2), else ``Linear(D, vocab, bias=False)`` with weights ~ N(0, 1/√D)."""
    if tie:
        return None
    head = nn.Linear(config.dim, config.vocab_size, bias=False)
    nn.init.normal_(head.weight, std=config.dim ** -0.5)
    return head


def output_logits(hidden: torch.Tensor, backbone: Backbone, head: nn.Linear | None
                  ) -> torch.Tensor:
    """Hidden states (..., D) -> logits (..., vocab) through ``head``, or through the
    backbone's token embedding when ``head`` is None (tied)."""
    return F.linear(hidden, backbone.embed.weight if head is None else head.weight)


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy (nats, float32) of every target: logits (..., V), targets (...) ->
    (...); a target of -100 gets 0."""
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                           targets.reshape(-1).long(), reduction="none", ignore_index=-100)
    return flat.view(targets.shape)


def positions_at(at: torch.Tensor, hidden: torch.Tensor, targets: torch.Tensor | None,
                 mask: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The positions where ``at`` (B, L) bool is True, in row-major order: hidden
    (B, L, ...) -> (N, ...), targets and mask (B, L) -> (N,) (None stays None)."""
    if at.dtype != torch.bool or at.shape != hidden.shape[:2]:
        raise ValueError(f"logits_at must be a bool tensor of shape {tuple(hidden.shape[:2])},"
                         f" got {at.dtype} {tuple(at.shape)}")
    return (hidden[at], None if targets is None else targets[at],
            None if mask is None else mask[at])


def selected_output(logits: torch.Tensor, targets: torch.Tensor | None,
                    mask: torch.Tensor | None) -> LMOutput:
    """:class:`LMOutput` of logits (N, V) at selected positions, with the mean loss of
    their targets (N,) (-100 and ``mask`` False not counted) when targets are given."""
    if targets is None:
        return LMOutput(logits)
    loss = lm_loss(logits[None], targets[None], None if mask is None else mask[None])
    return LMOutput(logits, loss)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None
            ) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of logits (B, L, V) against targets (B, L);
    targets -100 and positions with ``mask`` False are not counted (0 if none is).  The
    trainer trains on this loss and evaluates with :func:`token_nll`."""
    if targets.shape != logits.shape[:2]:
        raise ValueError(f"targets must have shape {tuple(logits.shape[:2])}, got "
                         f"{tuple(targets.shape)}")
    counted = targets != -100 if mask is None else mask & (targets != -100)
    return (token_nll(logits, targets) * counted).sum() / counted.sum().clamp(min=1)
