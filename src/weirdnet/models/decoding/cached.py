"""The cached forward of a causal backbone: :func:`extend` (L more tokens) and
:func:`step` (one token per sequence, the decoding loop's call), bitwise alike for one
unpadded token: both take the fused blocks where :func:`~.fused_decode.may_fuse` allows.
``Backbone.forward(..., cache=...)`` and ``Backbone.step`` run them."""

from __future__ import annotations

import torch

from weirdnet.layers.ownership import check_owner
from weirdnet.ops.checks import on_host

from ..blocks import block_contexts
from ..inputs import describe
from .cache import BackboneCache
from .fused_decode import fused_step, may_fuse


def extend(backbone, inputs, mask, cache: BackboneCache, context=None, context_mask=None,
           doc_ids=None) -> torch.Tensor:
    """The cached forward: L more tokens continue the cached sequences.  One unpadded
    token (L = 1, mask None or all True) runs as :func:`step` does (the fused blocks
    where they apply, :mod:`.fused_decode`), bitwise alike."""
    check_owner(cache, backbone)
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
    if length == 1 and backbone.takes_tokens and may_fuse(backbone, batch) and _all_real(mask):
        return fused_step(backbone, inputs[:, 0], cache, context, context_mask)[:, None]
    h = backbone.embed_inputs(inputs, mask, start=cache.lengths)
    contexts = block_contexts(context, len(backbone.blocks))
    for block, layer_cache, ctx in zip(backbone.blocks, cache.layers, contexts):
        h = block(h, mask, cache=layer_cache, context=ctx, context_mask=context_mask)
    real = length if mask is None else mask.sum(1)
    cache.lengths = cache.lengths + real
    cache.steps += length
    return backbone.norm(h)


def step(backbone, tokens: torch.Tensor, cache: BackboneCache, context=None,
         context_mask=None) -> torch.Tensor:
    """One token per cached sequence, tokens (B,) -> hidden states (B, D) (see
    :meth:`Backbone.step <weirdnet.models.backbone.Backbone.step>`)."""
    check_owner(cache, backbone)
    if not backbone.takes_tokens or not isinstance(tokens, torch.Tensor) \
            or tokens.shape != (cache.batch_size,):
        raise ValueError(f"step takes token ids of shape ({cache.batch_size},) on a "
                         f"token backbone, got {describe(tokens)}")
    if cache.steps >= cache.capacity:
        raise ValueError(f"the cache holds {cache.capacity} positions; all are used")
    if not may_fuse(backbone, cache.batch_size):
        return extend(backbone, tokens[:, None], None, cache, context, context_mask)[:, 0]
    return fused_step(backbone, tokens, cache, context, context_mask)


def _all_real(mask: torch.Tensor | None) -> bool:
    """True when ``mask`` marks no padding: None, or a CPU mask that is all True (read
    only on the host, where it costs no device synchronisation)."""
    return mask is None or (on_host(mask) and bool(mask.all()))
