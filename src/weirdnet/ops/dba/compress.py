"""The sequence compressions of DBA (eqs. 11, 12 and 14) and their lean backwards, as
PyTorch custom ops.

    weirdnet::dba_self_compress(x, z, mask?) -> (softmax_n(Z xᵀ) x, W)
    weirdnet::dba_compress_positions(x, w_soft, w_lin, w_out, mask?) -> (x_l, out, S, C)

Each has a fake implementation and an autograd formula that calls its backward op
(``..._backward``, opaque too, so AOT autograd traces one node per backward), which builds
dX in one buffer (plain autograd would allocate one per product and their sum) and
computes only the gradients that ``ctx.needs_input_grad`` asks for (bool arguments; a
gradient not asked for comes back as an empty placeholder and leaves the op as None).
The weights W (and S, C) are returned as extra, non-differentiable outputs so that
autograd keeps them for the backward instead of recomputing them; the public functions
drop them.  Ops see their inputs' dtype: autocast does not reach inside.
Backwards are once differentiable (the backward ops have no derivative of their own).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..checks import check_float_tensor
from .checks import check_mask_on


def compression_weights(keys: torch.Tensor, z: torch.Tensor,
                        mask: torch.Tensor | None = None) -> torch.Tensor:
    """W = softmax over positions of Z keysᵀ (eqs. 11, 12).

    keys: (B, H, n, d); z: (H, d_p, d) or (B, H, d_p, d); mask: optional (B, n).
    Returns (B, H, d_p, n): each row sums to 1 over the real positions (0 on padded
    ones), or is all 0 when the sequence has no real token.
    """
    logits = z @ keys.transpose(-1, -2)
    if mask is None:
        return torch.softmax(logits, dim=-1)
    pad = ~mask[:, None, None, :]
    empty = ~mask.any(1)[:, None, None, None]
    logits = logits.masked_fill(pad, float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(logits, dim=-1).masked_fill(empty, 0.0)


def no_autocast(x: torch.Tensor):
    """The ops compute in their inputs' dtype: autocast off inside."""
    return torch.autocast(x.device.type, enabled=False)


def _self_compress_dx(grad, z, w, ds):
    """dX = Wᵀ dX_l + dSᵀ Z in one (B, H, n, d) buffer."""
    B, H, p, n = w.shape
    d = grad.shape[-1]
    dx = w.transpose(-1, -2) @ grad
    zb = z.expand(B, H, p, d).reshape(B * H, p, d)
    dx.view(B * H, n, d).baddbmm_(ds.reshape(B * H, p, n).transpose(1, 2), zb)
    return dx


def _self_compress_backward_math(grad, x, z, w, need_x: bool, need_z: bool):
    """(dX, dZ) of ``W x`` with W = softmax_n(Z xᵀ) (0 where padded); a gradient that is
    not needed is an empty placeholder (0 elements)."""
    ds = grad @ x.transpose(-1, -2)  # dW, turned into dS in place (0 where padded):
    ds.sub_((ds * w).sum(-1, keepdim=True)).mul_(w)
    dx = _self_compress_dx(grad, z, w, ds) if need_x else x.new_empty(0)
    if not need_z:
        return dx, z.new_empty(0)
    dz = ds @ x
    return dx, dz.sum(0) if z.dim() == 3 else dz


@torch.library.custom_op("weirdnet::dba_self_compress", mutates_args=())
def self_compress_op(x: Tensor, z: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """(W x, W): x (B, H, n, d), z (H | B, H, d_p, d), mask (B, n) bool or None
    -> (B, H, d_p, d), (B, H, d_p, n).  x and z must share a dtype."""
    with no_autocast(x):
        w = compression_weights(x, z, mask)
        return w @ x, w


@self_compress_op.register_fake
def _self_compress_fake(x, z, mask):
    B, H, n, d = x.shape
    p = z.shape[-2]
    return x.new_empty((B, H, p, d)), x.new_empty((B, H, p, n))


@torch.library.custom_op("weirdnet::dba_self_compress_backward", mutates_args=())
def self_compress_backward_op(grad: Tensor, x: Tensor, z: Tensor, w: Tensor,
                              need_x: bool, need_z: bool) -> tuple[Tensor, Tensor]:
    """(dX, dZ) of :func:`self_compress_op`'s first output: grad (B, H, d_p, d), x, z as
    the forward, w (B, H, d_p, n) its second output.  dX has x's shape and dZ z's, or
    each is an empty (0,) placeholder when its ``need_`` flag is False."""
    with no_autocast(x):
        return _self_compress_backward_math(grad.contiguous(), x, z, w, need_x, need_z)


@self_compress_backward_op.register_fake
def _self_compress_backward_fake(grad, x, z, w, need_x, need_z):
    return (x.new_empty(x.shape if need_x else (0,)),
            z.new_empty(z.shape if need_z else (0,)))


def _self_compress_setup(ctx, inputs, output) -> None:
    x, z, _ = inputs
    ctx.save_for_backward(x, z, output[1])
    ctx.mark_non_differentiable(output[1])


def _self_compress_grad(ctx, grad, _grad_w):
    x, z, w = ctx.saved_tensors
    need_x, need_z = ctx.needs_input_grad[:2]
    dx, dz = self_compress_backward_op(grad, x, z, w, need_x, need_z)
    return dx if need_x else None, dz if need_z else None, None


self_compress_op.register_autograd(_self_compress_grad, setup_context=_self_compress_setup)


def dba_compress(keys: torch.Tensor, values: torch.Tensor, z: torch.Tensor,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """Compress the sequence axis to d_p rows: softmax_n(Z keysᵀ) @ values.

    keys: (B, H, n, d); values: (B, H or 1, n, e); z: (H, d_p, d) or (B, H, d_p, d).
    Returns (B, H, d_p, e).  ``values is keys`` (self-attention) takes the fused op.
    """
    if values is keys:
        return self_compress_op(keys.contiguous(), z.to(keys.dtype), mask)[0]
    return compression_weights(keys, z, mask) @ values


def position_softmax(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the positions (dim 1) of (B, n, c) logits: column j of the result is
    row j of a compression matrix W (eqs. 11, 12) in position-major layout.  Padded
    positions get weight 0; a sequence without a real token gets all 0."""
    if mask is None:
        return torch.softmax(logits, dim=1)
    empty = ~mask.any(1)[:, None, None]
    logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(logits, dim=1).masked_fill(empty, 0.0)


def _positions_forward(x, w_soft, w_lin, w_out, mask):
    soft = position_softmax(x @ w_soft.transpose(-1, -2), mask)
    lin = x @ w_lin.T
    if mask is not None:
        lin.masked_fill_(~mask.unsqueeze(-1), 0.0)
    x_l = torch.cat([soft.transpose(1, 2) @ x, lin.transpose(1, 2) @ x], 1)
    return x_l, x @ w_out.T, soft, lin


@torch.library.custom_op("weirdnet::dba_compress_positions", mutates_args=())
def compress_positions_op(x: Tensor, w_soft: Tensor, w_lin: Tensor, w_out: Tensor,
                          mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x_l (B, s + l, c), out (B, n, r), S (B, n, s), C (B, n, l)); see
    :func:`compress_positions`."""
    with no_autocast(x):
        return _positions_forward(x, w_soft, w_lin, w_out, mask)


@compress_positions_op.register_fake
def _compress_positions_fake(x, w_soft, w_lin, w_out, mask):
    B, n, c = x.shape
    s, l_rows, r = w_soft.shape[-2], w_lin.shape[0], w_out.shape[0]
    return (x.new_empty((B, s + l_rows, c)), x.new_empty((B, n, r)), x.new_empty((B, n, s)),
            x.new_empty((B, n, l_rows)))


def _weight_grad(d_a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Σ_b d_aᵀ x for a weight shared over the batch: (B, n, k), (B, n, c) -> (k, c)."""
    return d_a.flatten(0, 1).T @ x.flatten(0, 1)


def _logit_grads(d_xl, x, soft, mask):
    """Gradients of the (B, n, s) softmax logits and of C (B, n, l) from d_xl (B, s + l, c)."""
    s = soft.shape[-1]
    ds = x @ d_xl[:, :s].transpose(1, 2)  # dS, turned into d(logits) in place:
    ds.sub_((ds * soft).sum(1, keepdim=True)).mul_(soft)  # softmax over positions
    dl = x @ d_xl[:, s:].transpose(1, 2)
    if mask is not None:
        dl.masked_fill_(~mask.unsqueeze(-1), 0.0)
    return ds, dl


def _positions_dx(d_xl, d_out, ds, dl, w_soft, w_lin, w_out, soft, lin):
    """dX (B, n, c): the gradients through all four products, summed in one buffer."""
    s = soft.shape[-1]
    dx = soft @ d_xl[:, :s]
    if lin.shape[-1]:
        dx.baddbmm_(lin, d_xl[:, s:])
    if w_soft.dim() == 3:
        dx.baddbmm_(ds, w_soft)
    pairs = [(dl, w_lin), (d_out, w_out)] + ([(ds, w_soft)] if w_soft.dim() == 2 else [])
    for d_a, w in pairs:
        if d_a.numel():
            dx.flatten(0, 1).addmm_(d_a.flatten(0, 1), w)
    return dx


def _positions_backward_math(d_xl, d_out, x, w_soft, w_lin, w_out, soft, lin, mask, needs):
    """(dX, dw_soft, dw_lin, dw_out) of :func:`compress_positions`; ``needs`` (4 bools)
    says which to compute, the others are empty (0,) placeholders."""
    ds, dl = _logit_grads(d_xl, x, soft, mask)
    dx = _positions_dx(d_xl, d_out, ds, dl, w_soft, w_lin, w_out, soft, lin) \
        if needs[0] else x.new_empty(0)  # placeholders: fresh each, outputs may not alias
    d_soft = x.new_empty(0) if not needs[1] else (
        ds.transpose(1, 2) @ x if w_soft.dim() == 3 else _weight_grad(ds, x))
    d_lin = _weight_grad(dl, x) if needs[2] else x.new_empty(0)
    d_wout = _weight_grad(d_out, x) if needs[3] else x.new_empty(0)
    return dx, d_soft, d_lin, d_wout


@torch.library.custom_op("weirdnet::dba_compress_positions_backward", mutates_args=())
def compress_positions_backward_op(d_xl: Tensor, d_out: Tensor, x: Tensor, w_soft: Tensor,
                                   w_lin: Tensor, w_out: Tensor, soft: Tensor, lin: Tensor,
                                   mask: Tensor | None, needs: list[bool]
                                   ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dX, dw_soft, dw_lin, dw_out) of :func:`compress_positions_op`'s first two outputs:
    d_xl (B, s + l, c), d_out (B, n, r); x, weights and mask as the forward; soft (B, n, s)
    and lin (B, n, l) its last two outputs.  Each gradient has its input's shape, or is
    an empty (0,) placeholder where ``needs`` (4 bools, in input order) is False."""
    with no_autocast(x):
        return _positions_backward_math(d_xl.contiguous(), d_out.contiguous(), x, w_soft,
                                        w_lin, w_out, soft, lin, mask, needs)


@compress_positions_backward_op.register_fake
def _compress_positions_backward_fake(d_xl, d_out, x, w_soft, w_lin, w_out, soft, lin, mask,
                                      needs):
    return tuple(t.new_empty(t.shape if need else (0,))
                 for t, need in zip((x, w_soft, w_lin, w_out), needs))


def _positions_setup(ctx, inputs, output) -> None:
    x, w_soft, w_lin, w_out, mask = inputs
    ctx.save_for_backward(x, w_soft, w_lin, w_out, output[2], output[3], mask)
    ctx.mark_non_differentiable(output[2], output[3])


def _positions_grad(ctx, d_xl, d_out, _d_soft, _d_lin):
    x, w_soft, w_lin, w_out, soft, lin, mask = ctx.saved_tensors
    needs = list(ctx.needs_input_grad[:4])
    grads = compress_positions_backward_op(d_xl, d_out, x, w_soft, w_lin, w_out, soft, lin,
                                           mask, needs)
    return (*(g if need else None for g, need in zip(grads, needs)), None)


compress_positions_op.register_autograd(_positions_grad, setup_context=_positions_setup)


def compress_positions(x: torch.Tensor, w_soft: torch.Tensor, w_lin: torch.Tensor,
                       w_out: torch.Tensor, mask: torch.Tensor | None = None):
    """The position-sized part of a DBA layer, in position-major layout (X: (B, n, c)).

        S = softmax over positions of X w_softᵀ   (rows of W_r, W_c: eqs. 11, 12)
        C = X w_linᵀ with padded rows set to 0    (columns of W'_c)
        returns ([S, C]ᵀ X  (B, s + l, c),  X w_outᵀ  (B, n, r), e.g. W'_r)

    w_soft: (s, c), or (B, s, c) per sample (cross-attention's Z_1); w_lin: (l, c) and
    w_out: (r, c), either may have 0 rows.  Padded positions get weight 0 in S and C, so
    [S, C]ᵀ X ignores them; an all-padded sequence gives 0.  Runs in x's dtype (autocast
    off).  The backward (once differentiable) allocates dX (B, n, c) and the (B, n, s + l)
    gradient of the logits besides the weight gradients.
    """
    check_float_tensor(x, "x", 3)
    B, _, c = x.shape
    for name, w, lead in (("w_soft", w_soft, ((), (B,))), ("w_lin", w_lin, ((),)),
                          ("w_out", w_out, ((),))):
        check_float_tensor(w, name, w.dim())
        if tuple(w.shape[:-2]) not in lead or w.dim() < 2 or w.shape[-1] != c:
            raise ValueError(f"{name} must have shape (rows, {c})"
                             + (f" or ({B}, rows, {c})" if len(lead) > 1 else "")
                             + f", got {tuple(w.shape)}")
    check_mask_on(mask, x.shape[0], x.shape[1], x)
    w_soft, w_lin, w_out = (w.to(x.dtype) for w in (w_soft, w_lin, w_out))
    x_l, out, _, _ = compress_positions_op(x.contiguous(), w_soft, w_lin, w_out, mask)
    return x_l, out
