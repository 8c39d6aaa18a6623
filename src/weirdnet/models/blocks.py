"""The pieces of a backbone: mixer construction, the feed-forward network, the block.

Block (GPT-2 style pre-norm, docs/design.md §2; Norm: LayerNorm or RMSNorm)::

    x = x + Dropout(Mixer(Conv(Norm(x)), mask))        # Conv: short_conv > 0 only
    x = x + Dropout(CrossMixer(Norm(x), context))      # encoder–decoder only
    x = x + Dropout(FFN(Norm(x)))
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from weirdnet.layers.registry import factory
from weirdnet.ops import WeirdScanCache, block_step

from .config import BackboneConfig
from .short_conv import ShortConv, ShortConvCache


def mixer_options(name: str, config: BackboneConfig) -> dict[str, Any]:
    """Constructor options for mixer ``name`` in a backbone built from ``config``: the
    backbone's max_len, heads, depth (``n_layers``, used by Weird-attention's
    initialisation), attention dropout, ``bias=False`` and rotary positions (``rope``,
    ``rope_theta``) where the mixer takes them, then ``config.mixer_options[name]``."""
    accepted = inspect.signature(factory(name)).parameters
    shared = {"max_len": config.max_len, "heads": config.heads, "n_layers": config.depth,
              "dropout": config.attn_dropout}
    if not config.bias:
        shared["bias"] = False
    if config.positions == "rope":
        shared.update(rope=True, rope_theta=config.rope_theta)
    options = {key: value for key, value in shared.items()
               if key in accepted and value is not None}
    if "dropout" in options and options["dropout"] == 0.0:
        del options["dropout"]
    extra = dict(config.mixer_options.get(name, {}))
    unknown = [key for key in extra if key not in accepted]
    if unknown:
        raise ValueError(f"mixer_options[{name!r}] has unknown option(s) {unknown}; "
                         f"{name} accepts {', '.join(k for k in accepted if k != 'dim')}")
    options.update(extra)
    return options


def build_mixer(name: str, config: BackboneConfig) -> nn.Module:
    """Mixer ``name`` of width ``config.dim``, causal as the backbone."""
    options = mixer_options(name, config)
    options.pop("causal", None)
    return factory(name)(config.dim, causal=config.causal, **options)


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

    @property
    def carries_z(self) -> bool:
        """Whether the mixer hands state to the next mixer of its kind (DBA's authors'
        form with ``z_carry``: its compressed sequence becomes the next DBA layer's Z)."""
        return bool(getattr(self.mixer, "carries_z", False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache=None,
                context=None, context_mask: torch.Tensor | None = None, *,
                z: torch.Tensor | None = None, return_z: bool = False,
                doc_ids: torch.Tensor | None = None):
        """x (B, L, D), mask (B, L) bool or None; with ``cache`` (from the mixer's
        ``init_cache``) the L tokens continue the cached sequence.  ``context``: the
        cross mixer's context (B, Lc, Dc) (or its precomputed form).  ``doc_ids`` (B, L):
        packed documents (full pass), for the mixer and the short convolution.  Returns
        (B, L, D).

        ``return_z=True`` returns (output, z) instead: for a mixer that carries Z
        (:attr:`carries_z`) it is given ``z`` (None: its own learned Z) and z is the
        state it hands on; any other mixer passes ``z`` through unchanged."""
        h = self.norm_mix(x)
        if self.conv is not None:
            h, state = self.conv(h, mask, None if cache is None else cache.state, doc_ids)
            if cache is not None:
                cache.state, cache = state, cache.mixer
        if return_z and self.carries_z:
            y, z = self.mixer(h, mask, z=z, return_z=True)
        elif doc_ids is not None:
            y = self.mixer(h, mask, doc_ids=doc_ids)
        else:
            y = self.mixer(h, mask, cache=cache)
        x = self._after_mixer(x + self.dropout(y), context, context_mask)
        return (x, z) if return_z else x

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
            return x + self.dropout(self.ffn(self.norm_ffn(x)))
        # position-wise: chunks of the sequence, each recomputed in the backward, so the
        # FFN's inner activations (d_ff per position) never exist for the whole sequence
        parts = [checkpoint(self._ffn_residual, part, use_reentrant=False)
                 for part in x.split(chunk, dim=1)]
        return torch.cat(parts, 1)

    def _ffn_residual(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.ffn(self.norm_ffn(x)))

    def fused_step(self, cache) -> FusedBlockStep | None:
        """This block's fused C decoding step over ``cache`` (its mixer's cache), or None
        where it does not apply: RMSNorm, SwiGLU, no FFN, a short convolution, a cross mixer, a
        mixer without a fused step (:meth:`Mixer.fused_step_parts`), weights other than
        float32/float64 on CPU, or no C compiler."""
        if self.ffn is None or not isinstance(self.norm_mix, nn.LayerNorm) \
                or self.ffn.gate is not None \
                or self.conv is not None or self.cross is not None:
            return None  # the fused step is LayerNorm + GELU/LeakyReLU, no convolution
        parts = self.mixer.fused_step_parts(cache)
        if parts is None or block_step.unavailable_reason() is not None:
            return None
        mixer, scan = parts
        if any(t.device.type != "cpu" or t.dtype != scan.dtype for t in self.parameters()):
            return None
        ffn = self.ffn
        weights = block_step.BlockWeights(
            self.norm_mix.weight, self.norm_mix.bias, self.norm_mix.eps,
            mixer.a_weight, mixer.a_bias, mixer.v_weight, mixer.v_bias,
            mixer.o_weight, mixer.o_bias, mixer.log_w,
            self.norm_ffn.weight, self.norm_ffn.bias, self.norm_ffn.eps,
            ffn.inner.weight, ffn.inner.bias, ffn.outer.weight, ffn.outer.bias,
            ffn.activation)
        return FusedBlockStep(block_step.BlockStep(weights), scan)


class FusedBlockStep:
    """One block's fused decoding step bound to its layer cache: ``step(x)`` turns the
    residual stream x (B, D) at the next position into the block's output, in place,
    and advances the cache.  Holds the weights as they were when it was made."""

    def __init__(self, step: block_step.BlockStep, scan: WeirdScanCache):
        self.step, self.scan = step, scan

    def __call__(self, x: torch.Tensor) -> None:
        scan = self.scan
        self.step(x, *scan.rings, scan.position)
        scan.advance()
