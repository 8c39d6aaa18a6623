"""``short_conv``: the short causal depthwise convolution (fla's ``use_short_conv``,
Mamba's ``d_conv``, Zoology's BaseConv) as a public op.

    y_t = bias + Σ_{i<k} weight[:, i] ⊙ x_{t-k+1+i}

On float32/float64 CPU tensors it runs the fused C kernels of ``csrc/short_conv.c``
through two custom ops, each with a fake implementation, so ``torch.compile`` keeps them
in the graph and ``torch.export`` records them::

    weirdnet::short_conv(x, weight, bias?, state?, doc?) -> y
    weirdnet::short_conv_backward(grad, x, weight, state?, doc?) -> (dx, dweight, dbias)

With packed documents (``doc_ids``, :mod:`weirdnet.ops.packing`) a tap outside a
position's document counts for nothing, so each document gets what it gets alone.

Elsewhere (CUDA, half precision, no C compiler, or a ``state`` that needs a gradient)
it runs PyTorch's depthwise ``conv1d`` (``pytorch.py``).  Both agree with
:func:`~weirdnet.ops.short_conv.reference.short_conv_reference` up to rounding; the C
kernel sums each output in one fixed order, so a decoding step (``state`` given) is
bitwise the full pass's output at that position.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..packing import check_doc_ids, segment_ids
from . import cpu
from .pytorch import short_conv_packed_torch, short_conv_torch

BACKENDS = ("cpu", "torch")


def short_conv(x: Tensor, weight: Tensor, bias: Tensor | None = None,
               state: Tensor | None = None, *, doc_ids: Tensor | None = None,
               backend: str | None = None) -> Tensor:
    """Causal depthwise convolution of x (B, L, D) with weight (D, k) and bias (D,) or
    None; ``state`` (B, k-1, D) holds the k - 1 inputs before the sequence (None: zeros);
    ``doc_ids`` (B, L) packed documents, each convolved alone (not with a state).
    ``backend``: None (the C kernel where it applies, else PyTorch), "cpu" or "torch".
    Returns y (B, L, D) in x's dtype; ValueError for shapes or dtypes that do not fit."""
    _check(x, weight, bias, state, backend)
    doc = None
    if doc_ids is not None:
        check_doc_ids(doc_ids, x.shape[0], x.shape[1], x.device)
        if state is not None:
            raise ValueError("doc_ids and a decoding state do not go together: packed "
                             "documents are a full pass")
        doc = segment_ids(doc_ids).contiguous()
    if _use_kernel(x, state, backend):
        return conv_op(x if x.stride(-1) == 1 else x.contiguous(), weight, bias,
                       None if state is None else state.contiguous(), doc)
    if doc is not None:
        return short_conv_packed_torch(x, weight, bias, doc)
    return short_conv_torch(x, weight, bias, state)


def _use_kernel(x: Tensor, state: Tensor | None, backend: str | None) -> bool:
    differentiable_state = state is not None and state.requires_grad \
        and torch.is_grad_enabled()
    if backend == "torch" or differentiable_state:
        return False
    if backend == "cpu" and not cpu.takes(x):
        raise ValueError("backend 'cpu' takes float32/float64 CPU tensors with the C kernel "
                         f"built, got {x.dtype} on {x.device}")
    return cpu.takes(x)


def _check(x, weight, bias, state, backend) -> None:
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be None or one of {BACKENDS}, got {backend!r}")
    if not isinstance(x, Tensor) or x.dim() != 3 or not x.is_floating_point():
        raise ValueError(f"x must be a floating (B, L, D) tensor, got {_describe(x)}")
    B, _, D = x.shape
    if not isinstance(weight, Tensor) or weight.dim() != 2 or weight.shape[0] != D \
            or weight.shape[1] < 1:
        raise ValueError(f"weight must be (D={D}, k >= 1), got {_describe(weight)}")
    k = weight.shape[1]
    expected = {"weight": (weight, (D, k)), "bias": (bias, (D,)),
                "state": (state, (B, k - 1, D))}
    for name, (t, shape) in expected.items():
        if t is None:
            continue
        if tuple(t.shape) != shape or t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"{name} must be {x.dtype} {shape} on {x.device}, got "
                             f"{_describe(t)}")


def _describe(t) -> str:
    if not isinstance(t, Tensor):
        return type(t).__name__
    return f"{t.dtype} {tuple(t.shape)} on {t.device}"


# --- the custom ops --------------------------------------------------------------------


@torch.library.custom_op("weirdnet::short_conv", mutates_args=())
def conv_op(x: Tensor, weight: Tensor, bias: Tensor | None, state: Tensor | None,
            doc: Tensor | None) -> Tensor:
    """y (B, L, D) by the C kernel (module docstring); doc: canonical segment ids."""
    return cpu.fwd(x, weight, bias, state, doc)


@conv_op.register_fake
def _conv_fake(x, weight, bias, state, doc):
    return x.new_empty(x.shape)


@torch.library.custom_op("weirdnet::short_conv_backward", mutates_args=())
def conv_backward_op(grad: Tensor, x: Tensor, weight: Tensor, state: Tensor | None,
                     doc: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) of ``sum(grad * conv_op(x, weight, bias, state, doc))``."""
    dx, dweight, dbias = cpu.bwd(grad if grad.stride(-1) == 1 else grad.contiguous(), x,
                                 weight, state, doc)
    return dx, dweight.to(weight.dtype, copy=True).contiguous(), dbias.to(weight.dtype, copy=True)


@conv_backward_op.register_fake
def _conv_backward_fake(grad, x, weight, state, doc):
    return x.new_empty(x.shape), weight.new_empty(weight.shape), weight.new_empty(
        weight.shape[:1])


def _setup_context(ctx, inputs, output) -> None:
    x, weight, bias, state, doc = inputs
    ctx.save_for_backward(x, weight, state, doc)
    ctx.has_bias = bias is not None


def _backward(ctx, grad):
    x, weight, state, doc = ctx.saved_tensors
    dx, dweight, dbias = conv_backward_op(grad, x, weight, state, doc)
    return dx, dweight, dbias if ctx.has_bias else None, None, None


conv_op.register_autograd(_backward, setup_context=_setup_context)
