"""The fused CPU decoding step of a backbone: one C call per Weird-attention block.

At decoding widths every separate PyTorch op costs more in dispatch than in arithmetic.
:func:`fused_step` advances every cached sequence by one token with each block that
allows it run as one fused C call (:mod:`weirdnet.ops.block_step`: two LayerNorms, five
matrix-vector products, the activation and the scan's own step); the other blocks run as
PyTorch ops.  :meth:`Backbone.step <weirdnet.models.Backbone.step>` (and a one-token
cached forward without padding) takes this path when :func:`may_fuse` says so, so both
give bitwise the same outputs.

A block is fused when it is LayerNorm + GELU/LeakyReLU FFN, without short convolution or
cross mixer, its mixer decodes through a weird scan (``Mixer.scan_step``: causal
Weird/PS-attention) on the C scan backend and its weights are float32/float64 on CPU.
The fused steps are made at a cache's first step, from the weights of that moment, and
kept in ``cache.fused``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from weirdnet.ops import WeirdScanCache, block_step

from ..blocks import Block, block_contexts

FUSED_STEP_MAX_BATCH = 8
"""Largest batch decoded through the fused block steps.  The fused step is one thread;
past this size PyTorch's multi-threaded matrix products win (measured on a 2-core CPU,
structure A at D=128: fused/PyTorch tokens/s 4.5x at B=1, 1.3x at B=8, 0.93x at B=16)."""


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


def may_fuse(backbone: nn.Module, batch_size: int) -> bool:
    """Whether one token per sequence may take the fused path: eval mode, no autograd,
    not compiling, at most :data:`FUSED_STEP_MAX_BATCH` sequences."""
    return not (backbone.training or torch.is_grad_enabled() or torch.compiler.is_compiling()
                or batch_size > FUSED_STEP_MAX_BATCH)


def fused_block_step(block: Block, cache) -> FusedBlockStep | None:
    """``block``'s fused C decoding step over ``cache`` (its layer cache), or None where it
    does not apply (see the module docstring, or no C compiler)."""
    ffn = block.ffn
    if ffn is None or ffn.gate is not None or not isinstance(block.norm_mix, nn.LayerNorm) \
            or block.conv is not None or block.cross is not None:
        return None  # the fused step is LayerNorm + GELU/LeakyReLU, no convolution
    parts = block.mixer.scan_step(cache)
    if parts is None or parts[1].backend != "cpu" or block_step.unavailable_reason() is not None:
        return None
    mixer, scan = parts
    if any(t.device.type != "cpu" or t.dtype != scan.dtype for t in block.parameters()):
        return None
    norm_mix, norm_ffn = block.norm_mix, block.norm_ffn
    weights = block_step.BlockWeights(
        norm_mix.weight, norm_mix.bias, norm_mix.eps,
        mixer.a_weight, mixer.a_bias, mixer.v_weight, mixer.v_bias,
        mixer.o_weight, mixer.o_bias, mixer.log_w,
        norm_ffn.weight, norm_ffn.bias, norm_ffn.eps,
        ffn.inner.weight, ffn.inner.bias, ffn.outer.weight, ffn.outer.bias, ffn.activation)
    return FusedBlockStep(block_step.BlockStep(weights), scan)


def fused_step(backbone: nn.Module, tokens: torch.Tensor, cache, context=None,
               context_mask=None) -> torch.Tensor:
    """One unpadded token per sequence, tokens (B,) -> hidden states (B, D) after the
    final norm, through the fused blocks where they apply (made at the cache's first
    step); the cache advances.  The caller checks the tokens and the cache's room."""
    if cache.fused is None:
        cache.fused = [fused_block_step(block, layer)
                       for block, layer in zip(backbone.blocks, cache.layers)]
    h = backbone.embed(tokens.long())
    if backbone.pos is not None:
        h = h + backbone.pos(cache.lengths)
    contexts = block_contexts(context, len(backbone.blocks))
    for block, layer, fused, ctx in zip(backbone.blocks, cache.layers, cache.fused, contexts):
        if fused is None:
            h = block(h[:, None], None, cache=layer, context=ctx,
                      context_mask=context_mask)[:, 0]
        else:
            fused(h)
    cache.lengths = cache.lengths + 1
    cache.steps += 1
    return backbone.norm(h)
