"""``weird_scan``: the Weird-attention weighted log-step scan as a public op, exact and stable.

    O_i = sum_{j <= i} a_{i-j} e^{A_j} V_j / sum_{j <= i} a_{i-j} e^{A_j},
    a_d = prod_{k in bits(d)} e^{log_w[k]}

computed by the running-max log-step scan of docs/design.md §8 in float32 (float64 for
float64 inputs), with a custom backward (the mirrored scan) that recomputes the forward
levels instead of storing them: between forward and backward only the inputs are kept.

This module is the whole public op, top to bottom:

1. the public functions (:func:`weird_scan`, :func:`weird_scan_bidirectional`) check their
   arguments (a ValueError naming the argument, before any kernel runs, in eager mode and
   under ``torch.compile`` alike) and call
2. the custom ops, registered with :func:`torch.library.custom_op`, each with a fake
   (meta) implementation, so ``torch.compile(fullgraph=True)`` keeps them in the graph as
   opaque calls and ``torch.export`` records them::

       weirdnet::weird_scan(a, v, log_w, mask?, doc_ids?, n_causal, backend) -> O
       weirdnet::weird_scan_backward(grad, a, v, log_w, mask?, doc_ids?, n_causal,
           backend) -> (dA, dV, dlog_w)
       weirdnet::weird_scan_extend(a, v, log_w, valid?, ring_m!, ring_h!, ring_u!, t0,
           backend) -> O

   The forward op's autograd formula calls the backward op (once differentiable: the
   backward op has no derivative of its own).  The ops check nothing: their callers have
   (the public functions here, or a layer that checked its own inputs, see
   ``layers/weird.py``), so every input is checked once, where it enters.  The decoding
   step runs through its op inside a traced graph and calls the same implementation
   directly in eager mode (:func:`extend`), where the op's dispatch would cost more than
   the step itself;
3. each op resolves a backend of ``dispatch.BACKENDS`` on its real tensors (so a traced
   graph holds no device test) and runs its ``fwd`` / ``bwd`` / ``extend``:
   * ``"cpu"``: fused C kernels (``csrc/weird_scan.c``), built on first use;
   * ``"torch"``: pure PyTorch (``pytorch.py``), any device;
   * ``"triton"``: fused Triton kernels (``triton.py``) for CUDA tensors, checked against
     the PyTorch backend on first use; on CPU tensors only under the Triton interpreter
     (``TRITON_INTERPRET=1``, for tests).

``backend=None`` picks ``"cpu"`` for CPU tensors when the kernels can be built, else
``"torch"``, and ``"triton"`` for CUDA tensors when ``triton`` imports, else ``"torch"``.
``WEIRDNET_SCAN_BACKEND=torch`` forces the fallback everywhere (any name forces that one).

Directions.  The ops and every backend take one direction argument, ``n_causal``:
channels [0, n_causal) are scanned causally (prefix) and [n_causal, D) anti-causally
(suffix).  :func:`weird_scan` passes D (``reverse=False``) or 0 (``reverse=True``);
:func:`weird_scan_bidirectional` passes its public split index ``split``.

Packed documents.  ``doc_ids`` (B, L) (see :mod:`weirdnet.ops.packing`) reaches the
backends as ``doc``, the canonical segment ids (int64, computed inside the ops); a
level's combine of position i with i -/+ 2^k happens only when both carry the same id.
Because documents are contiguous, that one comparison per level keeps every document
exactly as it is alone.

Outputs: O and dA in ``a``'s dtype, dV in ``v``'s, d log_w in ``log_w``'s shape and dtype
(zero in the levels the sequence does not use); extend's O in ``a``'s dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..checks import check_finite_log_w, check_scan_inputs, levels_needed, on_host
from ..packing import segment_ids
from . import dispatch


def scan_backend_name(device: torch.device | str = "cpu") -> str:
    """Name of the backend ``weird_scan`` uses for tensors on ``device``."""
    return dispatch.resolve(torch.device(device)).name


def weird_scan(a, v, log_w, *, reverse=False, mask=None, doc_ids=None, backend=None):
    """Weird-attention scan O = H / U of ``E = exp(a)``-weighted values ``v``.

    Args:
        a: (B, L, D) attention logits A, any floating dtype.
        v: (B, L, D) values V, same dtype as ``a``.
        log_w: (K, D) log of the per-level distance weights, K >= ceil(log2 L).
            Mode "cumexp" passes ``cumsum(w, 0)``, "exp" passes ``w``, PS-attention zeros.
        reverse: False for the causal prefix scan (decoder), True for the anti-causal
            suffix scan.
        mask: optional (B, L) bool, True for real tokens; padded tokens contribute nothing.
            Outputs at padded positions are finite (0 where no real token is in reach).
        doc_ids: optional (B, L) integer tensor of packed documents: a document starts
            wherever the id changes (:mod:`weirdnet.ops.packing`); nothing is mixed across
            a start, and each document's outputs and gradients are those it has alone.
        backend: None (auto), "cpu" (fused C kernel), "torch" or "triton" (fused Triton
            kernels; CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``).

    Returns:
        O: (B, L, D) in ``a``'s dtype, computed with float32 state (float64 for float64).

    Non-finite values are never hidden; every backend, the decoding cache and
    :func:`weirdnet.ops.weird_scan_reference` (the specification) agree, per channel:
      * NaN or +inf in A, or NaN or +-inf in V, at a real position j: every output with j
        in its window (causal i >= j, reverse i <= j) is NaN, as ``torch.softmax`` is NaN
        for +inf.
      * -inf in A is a zero weight: an output with a finite-A real token in its window is
        exactly the output with j padded; one whose real tokens are all -inf is NaN (0/0).
      * Padded positions are left out whatever they hold; a window of padding only gives
        0, as before.
      * Gradients: every real input in the window of a NaN output gets NaN dA and dV
        (padding gets 0), and d log_w of a channel with a NaN output is NaN; elsewhere they
        are finite and exact.  Finite logits are assumed above -1e29 (-1e299 in
        float64), the padding level.
      * ``log_w`` must be finite (the layers make it so): +-inf or NaN in a level the
        scan uses raises a ValueError on CPU tensors, with the custom op and under
        ``torch.compile`` too, as in the reference and the decoding cache.  On CUDA the
        values are not read (that would wait for the device), and the result is undefined.
    """
    backend = _checked(a, v, log_w, mask, doc_ids, backend)
    return scan_op(a, v, log_w, mask, doc_ids, 0 if reverse else a.shape[-1], backend)


def weird_scan_bidirectional(a, v, log_w, *, mask=None, doc_ids=None, split=None,
                             backend=None):
    """Encoder form: channels [0, split) causal, [split, D) anti-causal, in one call.

    Same arguments as :func:`weird_scan`; ``split`` defaults to D // 2, and row k of
    ``log_w`` holds the forward half's weights in [0, split) and the backward half's in
    [split, D).  Returns O (B, L, D).
    """
    D = a.shape[-1] if isinstance(a, torch.Tensor) and a.dim() == 3 else 0
    split = D // 2 if split is None else int(split)
    if not 0 <= split <= D:
        raise ValueError(f"split must be in [0, D={D}], got {split}")
    backend = _checked(a, v, log_w, mask, doc_ids, backend)
    return scan_op(a, v, log_w, mask, doc_ids, split, backend)


def _checked(a, v, log_w, mask, doc_ids, backend: str | None) -> str:
    """Every argument checked (a ValueError naming it); the ops' ``backend`` string."""
    check_scan_inputs(a, v, log_w, mask, doc_ids)
    dispatch.check_name(backend)
    return backend or ""


def _segments(doc_ids: Tensor | None) -> Tensor | None:
    """The backends' ``doc``: canonical segment ids (B, L) int64, or None."""
    return None if doc_ids is None else segment_ids(doc_ids)


# --- the custom ops --------------------------------------------------------------------


def _levels_of_ring(ring: Tensor) -> int:
    """K for ring buffers of 2^K - 1 rows."""
    return (ring.shape[0] + 1).bit_length() - 1


@torch.library.custom_op("weirdnet::weird_scan", mutates_args=())
def scan_op(a: Tensor, v: Tensor, log_w: Tensor, mask: Tensor | None, doc_ids: Tensor | None,
            n_causal: int, backend: str) -> Tensor:
    """O (B, L, D): channels [0, n_causal) causal, [n_causal, D) anti-causal, on checked
    inputs (module docstring); ``backend`` "" picks one."""
    impl = dispatch.resolve(a.device, backend or None)
    nlev = levels_needed(a.shape[1])
    if on_host(log_w):  # the values are at hand (in a compiled graph too: an opaque op)
        check_finite_log_w(log_w, nlev)
    out = impl.fwd(a, v, log_w, mask, _segments(doc_ids), n_causal, nlev)
    return out.to(a.dtype).contiguous()


@scan_op.register_fake
def _scan_fake(a, v, log_w, mask, doc_ids, n_causal, backend):
    return a.new_empty(a.shape)


@torch.library.custom_op("weirdnet::weird_scan_backward", mutates_args=())
def scan_backward_op(grad: Tensor, a: Tensor, v: Tensor, log_w: Tensor, mask: Tensor | None,
                     doc_ids: Tensor | None, n_causal: int,
                     backend: str) -> tuple[Tensor, Tensor, Tensor]:
    """(dA, dV, dlog_w) of ``sum(grad * scan_op(a, v, log_w, mask, doc_ids, n_causal))``."""
    impl = dispatch.resolve(a.device, backend or None)
    nlev = levels_needed(a.shape[1])
    da, dv, dlogw = impl.bwd(a, v, log_w, mask, _segments(doc_ids), grad, n_causal, nlev)
    grad_log_w = log_w.new_zeros(log_w.shape)
    grad_log_w[:nlev] = dlogw.to(log_w.dtype)
    return da.to(a.dtype).contiguous(), dv.to(v.dtype).contiguous(), grad_log_w


@scan_backward_op.register_fake
def _scan_backward_fake(grad, a, v, log_w, mask, doc_ids, n_causal, backend):
    return a.new_empty(a.shape), v.new_empty(v.shape), log_w.new_empty(log_w.shape)


def _setup_context(ctx, inputs, output) -> None:
    a, v, log_w, mask, doc_ids, n_causal, backend = inputs
    ctx.save_for_backward(a, v, log_w, mask, doc_ids)
    ctx.n_causal, ctx.backend = n_causal, backend


def _backward(ctx, grad):
    a, v, log_w, mask, doc_ids = ctx.saved_tensors
    da, dv, dlogw = scan_backward_op(grad, a, v, log_w, mask, doc_ids, ctx.n_causal,
                                     ctx.backend)
    return da, dv, dlogw, None, None, None, None


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
