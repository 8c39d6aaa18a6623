"""The checks of a backbone's inputs, with messages that say what was expected."""

from __future__ import annotations

import torch

from weirdnet.layers.base import check_dtype_matches
from weirdnet.ops import sequence_length
from weirdnet.ops.checks import check_mask, on_host


def check_inputs(backbone, inputs: torch.Tensor, mask: torch.Tensor | None,
                 check_ids: bool | None = None) -> None:
    """Shape, dtype and range checks of ``backbone``'s inputs (B, L) ids or
    (B, L, input_dim) values and their mask (see :meth:`Backbone.check_inputs
    <weirdnet.models.backbone.Backbone.check_inputs>`)."""
    cfg = backbone.config
    if backbone.takes_tokens:
        if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 \
                or inputs.dtype not in (torch.long, torch.int32, torch.int16, torch.uint8):
            raise ValueError("token inputs must be an integer tensor (batch, length), got "
                             f"{describe(inputs)}")
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
                         f"{cfg.input_dim}), got {describe(inputs)}")
    else:
        check_dtype_matches(inputs, backbone, "inputs")
    if inputs.shape[1] < 1:
        raise ValueError("inputs must have at least one position")
    length = sequence_length(inputs)  # sharded: the whole sequence's
    if length > cfg.max_len:
        raise ValueError(f"sequence length {length} exceeds max_len={cfg.max_len}: the "
                         f"model takes at most {cfg.max_len} positions")
    check_mask(mask, inputs.shape[0], inputs.shape[1])


def describe(value) -> str:
    """What ``value`` is, for an error message: a tensor's dtype and shape, or a type."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__
