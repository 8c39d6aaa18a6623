"""The pieces of a backbone: mixer construction, the feed-forward network, the block.

Block (GPT-2 style pre-norm, docs/design.md §2; Norm: LayerNorm or RMSNorm)::

    x = x + Dropout(Mixer(Conv(Norm(x)), mask))        # Conv: short_conv > 0 only
    x = x + Dropout(CrossMixer(Norm(x), context))      # encoder–decoder only
    x = x + Dropout(FFN(Norm(x)))
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from weirdnet.layers.registry import accepted_options, factory, shared_settings

from .config import BackboneConfig
from .short_conv import ShortConv, ShortConvCache


class PerBlockContext(list):
    """One cross-mixer context per block (e.g. each block's precomputed keys and values);
    a plain context is given to every block."""


def block_contexts(context, count: int) -> list:
    """The cross-mixer context of each of ``count`` blocks (see :class:`PerBlockContext`)."""
    if isinstance(context, PerBlockContext):
        if len(context) != count:
            raise ValueError(f"{len(context)} per-block contexts for {count} blocks")
        return list(context)
    return [context] * count


def mixer_options(name: str, config: BackboneConfig) -> dict[str, Any]:
    """Constructor options for mixer ``name`` in a backbone built from ``config``: the
    shared settings the mixer declares (``shared_settings``, checked by
    :func:`weirdnet.layers.registry.shared_settings`) with the backbone's values (max_len,
    heads, depth as ``n_layers``, attention dropout, ``bias=False``, rotary positions
    ``rope``/``rope_theta``; an unset or default value is not passed), then
    ``config.mixer_options[name]``."""
    rope = config.positions == "rope"
    values = {"max_len": config.max_len, "heads": config.heads, "n_layers": config.depth,
              "dropout": config.attn_dropout or None, "bias": None if config.bias else False,
              "rope": True if rope else None, "rope_theta": config.rope_theta if rope else None}
    options = {key: values[key] for key in shared_settings(name) if values[key] is not None}
    extra = dict(config.mixer_options.get(name, {}))
    accepted = accepted_options(name)
    unknown = [key for key in extra if accepted is not None and key not in accepted]
    if unknown:
        raise ValueError(f"mixer_options[{name!r}] has unknown option(s) {unknown}; "
                         f"{name} accepts {', '.join(accepted)}")
    options.update(extra)
    return options


def build_mixer(name: str, config: BackboneConfig) -> nn.Module:
    """Mixer ``name`` of width ``config.dim``, causal as the backbone.  A value the
    mixer refuses from ``config.mixer_options`` is named by its key there
    (``mixer_options.weird.max_len must be ...``)."""
    options = mixer_options(name, config)
    options.pop("causal", None)
    try:
        return factory(name)(config.dim, causal=config.causal, **options)
    except ValueError as error:
        message = str(error)
        if message.split(" ", 1)[0] not in config.mixer_options.get(name, {}):
            raise
        raise ValueError(f"mixer_options.{name}.{message}") from None


def normal_init(module: nn.Module, std: float) -> None:
    """Every ``nn.Linear`` and ``nn.Embedding`` weight in ``module`` from N(0, std), their
    biases zeroed (``BackboneConfig.init_std``); other parameters are left as they are."""
    for part in module.modules():
        if isinstance(part, nn.Linear | nn.Embedding):
            nn.init.normal_(part.weight, std=std)
        if isinstance(part, nn.Linear) and part.bias is not None:
            nn.init.zeros_(part.bias)


def make_norm(config: BackboneConfig) -> nn.Module:
    """The backbone's normalisation over D: LayerNorm (1, 0) or RMSNorm (weight 1)."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.dim, eps=config.norm_eps)
    return nn.LayerNorm(config.dim, eps=config.norm_eps)


class FeedForward(nn.Module):
    """On (..., D): ``Linear(D, d_ff) → GELU | LeakyReLU(0.01) → Linear(d_ff, D)``, or with
    ``activation="swiglu"`` ``outer(SiLU(gate(x)) ⊙ inner(x))`` (Llama's MLP: gate_proj,
    up_proj, down_proj).  ``bias``: biases on the linear maps.

    Initialisation (Weird-Net §III.G): W_1 (and the gate) ~ N(0, 1/√D), W_2 ~ N(0,
    1.7047·sqrt((1−2/D) / (2·N·d_ff))), biases 0, with N the number of layers.
    """

    def __init__(self, dim: int, d_ff: int, activation: str = "gelu", n_layers: int = 1,
                 bias: bool = True):
        super().__init__()
        self.inner = nn.Linear(dim, d_ff, bias=bias)
        self.gate = nn.Linear(dim, d_ff, bias=bias) if activation == "swiglu" else None
        self.outer = nn.Linear(d_ff, dim, bias=bias)
        self.activation, self.n_layers = activation, n_layers
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """In this order (a seed gives the same weights as before the gate existed):
        W_1, W_2, then the gate."""
        dim, d_ff = self.inner.in_features, self.inner.out_features
        nn.init.normal_(self.inner.weight, std=1.0 / math.sqrt(dim))
        std = 1.7047 * math.sqrt(max(0.0, 1 - 2 / dim) / (2 * self.n_layers * d_ff))
        nn.init.normal_(self.outer.weight, std=std)
        if self.gate is not None:
            nn.init.normal_(self.gate.weight, std=1.0 / math.sqrt(dim))
        for lin in (self.inner, self.gate, self.outer):
            if lin is not None and lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inner(x)
        if self.gate is not None:
            h = F.silu(self.gate(x)) * h
        else:
            h = F.gelu(h) if self.activation == "gelu" else F.leaky_relu(h, 0.01)
        return self.outer(h)


class Block(nn.Module):
    """One pre-norm residual block on (B, L, D): mixer, optional cross mixer, FFN (none
    with ``d_ff = 0``).

    ``cross`` (optional) is a cross-attention module called as
    ``cross(x, context, context_mask=...)``; its context comes from :meth:`forward`.
    """

    def __init__(self, mixer: nn.Module, config: BackboneConfig, cross: nn.Module | None = None):
        super().__init__()
        dim = config.dim
        self.norm_mix = make_norm(config)
        self.conv = ShortConv(dim, config.short_conv, config.bias) if config.short_conv \
            else None
        self.mixer = mixer
        self.norm_cross = None if cross is None else make_norm(config)
        self.cross = cross
        has_ffn = config.ffn_dim > 0  # d_ff = 0: mixer-only blocks (Zoology's recall models)
        self.norm_ffn = make_norm(config) if has_ffn else None
        self.ffn = FeedForward(dim, config.ffn_dim, config.activation, config.depth,
                               config.bias) if has_ffn else None
        self.dropout = nn.Dropout(config.dropout)
        self.ffn_chunk = 0  # > 0: the FFN runs in checkpointed chunks of this many positions

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache=None,
                context=None, context_mask: torch.Tensor | None = None,
                doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D), mask (B, L) bool or None; with ``cache`` (from :meth:`init_cache`)
        the L tokens continue the cached sequence.  ``context``: the cross mixer's context
        (B, Lc, Dc) (or its precomputed form).  ``doc_ids`` (B, L): packed documents (full
        pass), for the mixer and the short convolution.  Returns (B, L, D)."""
        h = self.norm_mix(x)
        if self.conv is not None:  # takes its part of the cache, hands on the mixer's
            h, cache = self.conv.before_mixer(h, mask, cache, doc_ids)
        y = self.mixer(h, mask, cache=cache, doc_ids=doc_ids)
        return self._after_mixer(x + self.dropout(y), context, context_mask)

    def init_cache(self, batch_size: int, max_len: int | None = None):
        """The block's decoding state: the mixer's cache, with the short convolution's
        state beside it when the block has one (:class:`ShortConvCache`)."""
        cache = self.mixer.init_cache(batch_size, max_len)
        if self.conv is None:
            return cache
        return ShortConvCache(self.conv.init_state(batch_size), cache)

    def _after_mixer(self, x, context, context_mask):
        """The cross mixer (if any) and the FFN, with their residuals."""
        if self.cross is not None:
            x = x + self.dropout(self.cross(self.norm_cross(x), context,
                                            context_mask=context_mask))
        if self.ffn is None:
            return x
        chunk = self.ffn_chunk
        if not (chunk and x.shape[1] > chunk and self.training and torch.is_grad_enabled()):
            return self._ffn_residual(x)
        # position-wise: chunks of the sequence, each recomputed in the backward, so the
        # FFN's inner activations (d_ff per position) never exist for the whole sequence
        parts = [checkpoint(self._ffn_residual, part, use_reentrant=False)
                 for part in x.split(chunk, dim=1)]
        return torch.cat(parts, 1)

    def _ffn_residual(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.ffn(self.norm_ffn(x)))
