"""``WeirdNetSeq2Seq``: an encoder–decoder (Weird-Net §III.E): a bidirectional encoder with
structure A and a causal decoder with structure B whose blocks add cross-attention to the
encoder's output (softmax, or DBA's compressed-context cross-attention).

Decoding encodes the source once, precomputes every block's cross-attention keys and
values once, and then runs the decoder's cached steps (see :mod:`.generation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from weirdnet.config.typed import ConfigError
from weirdnet.layers.registry import cross_factory

from .backbone import Backbone, PerBlockContext
from .base import WeirdNetModel, register_model
from .config import BackboneConfig
from .dba_authors import build_backbone
from .decoding.generation import Sampling, decode, inference
from .lm import LMOutput, lm_loss, output_head, output_logits

CROSS_MIXERS = ("softmax", "dba")


def _encoder() -> BackboneConfig:
    return BackboneConfig(pattern="A", causal=False)


def _decoder() -> BackboneConfig:
    return BackboneConfig(pattern="B", causal=True)


@dataclass
class Seq2SeqConfig:
    """``encoder`` (bidirectional; tokens or values), ``decoder`` (causal; tokens),
    ``cross`` ("softmax" or "dba": DBA cross-attention in its per-query form, whose outputs
    depend on one query each, as a causal decoder needs), ``cross_options`` (extra
    constructor options, e.g. ``{"d_p": 16}``), ``tie_embeddings`` (decoder input and
    output embeddings shared)."""

    encoder: BackboneConfig = field(default_factory=_encoder)
    decoder: BackboneConfig = field(default_factory=_decoder)
    cross: str = "softmax"
    cross_options: dict[str, Any] = field(default_factory=dict)
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        if self.encoder.causal:
            raise ConfigError("the encoder must be bidirectional (encoder.causal=False)")
        if not self.decoder.causal or self.decoder.vocab_size is None:
            raise ConfigError("the decoder must be causal with token inputs "
                              "(decoder.causal=True, decoder.vocab_size set)")
        if self.cross not in CROSS_MIXERS:
            raise ConfigError(f"cross must be one of {CROSS_MIXERS}, got {self.cross!r}")


@register_model
class WeirdNetSeq2Seq(WeirdNetModel):
    """Encoder–decoder: source (B, Ls) ids or (B, Ls, C) values -> target logits."""

    config_class = Seq2SeqConfig

    def __init__(self, config: Seq2SeqConfig | dict | None = None):
        super().__init__(Seq2SeqConfig() if config is None else config)
        cfg = self.config
        self.encoder = build_backbone(cfg.encoder)
        self.decoder = Backbone(cfg.decoder, cross_factory=self._cross_factory())
        self.head = output_head(cfg.decoder, cfg.tie_embeddings)

    def _cross_factory(self):
        cfg = self.config
        options: dict[str, Any] = {"context_dim": cfg.encoder.dim}
        if cfg.decoder.heads is not None:
            options["heads"] = cfg.decoder.heads
        if cfg.decoder.attn_dropout:
            options["dropout"] = cfg.decoder.attn_dropout
        options.update(cfg.cross_options)
        if cfg.cross == "dba":  # the per-query form: each output depends on one query
            options["per_query"] = True
        cross = cross_factory(cfg.cross)
        return lambda: cross(cfg.decoder.dim, **options)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder hidden states (..., D) -> logits (..., vocab)."""
        return output_logits(hidden, self.decoder, self.head)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's output (B, Ls, D_enc)."""
        return self.encoder(src, src_mask)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask=None, tgt_mask=None,
                targets: torch.Tensor | None = None) -> LMOutput:
        """src (B, Ls) or (B, Ls, C); tgt (B, Lt) decoder inputs (teacher forcing);
        masks (B, Ls) / (B, Lt) bool; targets (B, Lt) next tokens (-100 = not counted).
        Returns logits (B, Lt, vocab) and the loss."""
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt need the same batch size, got {src.shape[0]} "
                             f"and {tgt.shape[0]}")
        memory = self.encode(src, src_mask)
        hidden = self.decoder(tgt, tgt_mask, context=memory, context_mask=src_mask)
        logits = self.logits(hidden)
        return LMOutput(logits, None if targets is None else lm_loss(logits, targets, tgt_mask))

    def precompute_context(self, memory: torch.Tensor, src_mask=None) -> PerBlockContext:
        """Every decoder block's cross-attention keys/values of ``memory``, computed once."""
        return PerBlockContext(block.cross.precompute_context(memory, src_mask)
                               for block in self.decoder.blocks)

    def generate(self, src: torch.Tensor, max_new_tokens: int, bos_id: int,
                 temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, *, src_mask: torch.Tensor | None = None,
                 eos_id: int | None = None, generator: torch.Generator | None = None
                 ) -> torch.Tensor:
        """Greedy (temperature 0) or sampled decoding from ``bos_id``: (B, 1 + new)."""
        sampling = Sampling(temperature, top_k, top_p, eos_id, generator)
        with inference(self):
            context = self.precompute_context(self.encode(src, src_mask), src_mask)
        start = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        return decode(self, self.decoder, self.logits, start, max_new_tokens, sampling,
                      context=context)
