"""``weird_scan``'s kernels as PyTorch custom ops.

    weirdnet::weird_scan(a, v, log_w, mask?, split, backend) -> O
    weirdnet::weird_scan_backward(grad, a, v, log_w, mask?, split, backend) -> (dA, dV, dlog_w)
    weirdnet::weird_scan_extend(a, v, log_w, valid?, ring_m!, ring_h!, ring_u!, t0, backend) -> O

Registered with :func:`torch.library.custom_op`, each with a fake (meta) implementation,
so ``torch.compile(fullgraph=True)`` keeps them in the graph as opaque calls and
``torch.export`` records them; the forward op's autograd formula calls the backward op
(once differentiable: the backward op has no derivative of its own).  Between forward and
backward only the inputs are saved: the backward recomputes the levels.

The scan and its backward always run through the ops; the decoding step runs through its
op inside a traced graph and calls the same implementation directly in eager mode
(:func:`extend`), where the op's dispatch would cost more than the step itself.

``backend`` is a name of ``dispatch.BACKENDS`` or "" for the automatic choice; it is
resolved inside the op, on real tensors, so a traced graph holds no device test.  Shapes
and dtypes are checked by the public functions (``weird_scan.scan``) before the op runs.
Outputs: O and dA in ``a``'s dtype, dV in ``v``'s, d log_w in ``log_w``'s shape and dtype
(zero in the levels the sequence does not use); extend's O in ``a``'s dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..checks import levels_needed
from . import dispatch


def _levels_of_ring(ring: Tensor) -> int:
    """K for ring buffers of 2^K - 1 rows."""
    return (ring.shape[0] + 1).bit_length() - 1


@torch.library.custom_op("weirdnet::weird_scan", mutates_args=())
def scan_op(a: Tensor, v: Tensor, log_w: Tensor, mask: Tensor | None, split: int,
            backend: str) -> Tensor:
    """O (B, L, D): channels [0, split) causal, [split, D) anti-causal."""
    impl = dispatch.resolve(a.device, backend or None)
    out = impl.fwd(a, v, log_w, mask, split, levels_needed(a.shape[1]))
    return out.to(a.dtype).contiguous()


@scan_op.register_fake
def _scan_fake(a, v, log_w, mask, split, backend):
    return a.new_empty(a.shape)


@torch.library.custom_op("weirdnet::weird_scan_backward", mutates_args=())
def scan_backward_op(grad: Tensor, a: Tensor, v: Tensor, log_w: Tensor, mask: Tensor | None,
                     split: int, backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """(dA, dV, dlog_w) of ``sum(grad * weird_scan(a, v, log_w, ...))``."""
    impl = dispatch.resolve(a.device, backend or None)
    nlev = levels_needed(a.shape[1])
    da, dv, dlogw = impl.bwd(a, v, log_w, mask, grad, split, nlev)
    grad_log_w = log_w.new_zeros(log_w.shape)
    grad_log_w[:nlev] = dlogw.to(log_w.dtype)
    return da.to(a.dtype).contiguous(), dv.to(v.dtype).contiguous(), grad_log_w


@scan_backward_op.register_fake
def _scan_backward_fake(grad, a, v, log_w, mask, split, backend):
    return a.new_empty(a.shape), v.new_empty(v.shape), log_w.new_empty(log_w.shape)


def _setup_context(ctx, inputs, output) -> None:
    a, v, log_w, mask, split, backend = inputs
    ctx.save_for_backward(a, v, log_w, mask)
    ctx.split, ctx.backend = split, backend


def _backward(ctx, grad):
    a, v, log_w, mask = ctx.saved_tensors
    da, dv, dlogw = scan_backward_op(grad, a, v, log_w, mask, ctx.split, ctx.backend)
    return da, dv, dlogw, None, None, None


scan_op.register_autograd(_backward, setup_context=_setup_context)


def extend(a: Tensor, v: Tensor, log_w: Tensor, valid: Tensor | None, ring_m: Tensor,
           ring_h: Tensor, ring_u: Tensor, t0: int, backend: str) -> Tensor:
    """Decode T tokens at positions t0 .. t0+T-1 through the ring buffers (updated in
    place).  a, v: (B, T, D) and log_w, rings (2^K - 1, B, D) in the compute dtype.

    Outside a traced graph this is called directly: a decoding step is short, and the
    custom op's dispatch would add tens of microseconds per layer and token."""
    if torch.compiler.is_compiling():
        return extend_op(a, v, log_w, valid, ring_m, ring_h, ring_u, t0, backend)
    return _extend_impl(a, v, log_w, valid, ring_m, ring_h, ring_u, t0, backend)


def _extend_impl(a, v, log_w, valid, ring_m, ring_h, ring_u, t0, backend):
    impl = dispatch.resolve(a.device, backend or None)
    out = impl.extend(a, v, log_w, valid, ring_m, ring_h, ring_u, _levels_of_ring(ring_m), t0)
    return out.to(a.dtype).contiguous()


@torch.library.custom_op("weirdnet::weird_scan_extend",
                         mutates_args=("ring_m", "ring_h", "ring_u"))
def extend_op(a: Tensor, v: Tensor, log_w: Tensor, valid: Tensor | None, ring_m: Tensor,
              ring_h: Tensor, ring_u: Tensor, t0: int, backend: str) -> Tensor:
    """The decoding step as a custom op (see :func:`extend`)."""
    return _extend_impl(a, v, log_w, valid, ring_m, ring_h, ring_u, t0, backend)


@extend_op.register_fake
def _extend_fake(a, v, log_w, valid, ring_m, ring_h, ring_u, t0, backend):
    return a.new_empty(a.shape)
