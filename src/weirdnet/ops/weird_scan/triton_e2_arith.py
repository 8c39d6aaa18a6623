"""Exact power-of-two arithmetic shared by the ``"triton-e2"`` kernels: the forward's
(``weird_scan.triton_e2``) and the backward's (``weird_scan.triton_e2_backward``).

A state is ``(m, h, u)`` with ``H = 2^m h``, ``U = 2^m u`` and ``m`` an integer held in
the state dtype (fp32 or fp64); :func:`_split` turns a logit into its integer and
fractional parts, :func:`_token` a token ``(A, V)`` or an intermediate ``(log2 U, O)``
into a state, and :func:`_div` is the division rounded to nearest that both directions
use.  ``_EXACT`` is the compile option both kernels launch with.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton import INTERPRETED

# Compile options: libdevice's fma (tl.fma) without flush-to-zero, so that a subnormal
# result stays nonzero and path B's cancellation check sees it (the interpreter has none).
# (an option of Triton's CUDA backend only: ROCm builds keep libdevice's default)
_EXACT = {} if INTERPRETED or torch.version.hip else {"enable_reflect_ftz": False}

LOG2E_HI = tl.constexpr(1.4426950216293335)  # float32(log2 e); HI + LO = log2 e
LOG2E_LO = tl.constexpr(1.9259629911266175e-08)


@triton.jit
def _div(h, u):
    """h / u rounded to nearest: tl.div_rn in float32 (plain ``/`` compiles to an
    approximate division there), ``/`` in float64 (IEEE already; div_rn takes fp32 only)."""
    if h.dtype == tl.float64:
        q = h / u
    else:
        q = tl.div_rn(h, u)
    return q


# The combine functions of the kernels' max and min reductions (tl.reduce(x, axis, _max2)):
# triton.language's own, which is what tl.max and tl.min compile to (tl.maximum: max.f32
# ignores a NaN operand) and what the interpreter recognises and hands to numpy.nanmax /
# nanmin.  A combine function of our own would be called by the interpreter once per
# element in Python: the 64K stability forward took 240 s instead of a few (issue 74).
# (tl.max itself is a jit function built when triton is imported, which the interpreter
# cannot call if that happened before TRITON_INTERPRET=1 was set: see triton._SUM.)
_max2 = tl.standard._elementwise_max
_min2 = tl.standard._elementwise_min


@triton.jit
def _split(x, NATURAL: tl.constexpr):
    """(n, f): n = floor(t) and f = 2^(t - n) (in [1, 2) up to rounding), t = x log2(e) for a
    natural log (NATURAL) or t = x for a log2."""
    if NATURAL:
        n = tl.floor(x * LOG2E_HI)
        r = tl.fma(x, LOG2E_HI, -n)
        r = tl.fma(x, LOG2E_LO, r)
    else:
        n = tl.floor(x)
        r = x - n
    return n, tl.exp2(r)


@triton.jit
def _token(x, v, real, NATURAL: tl.constexpr, STATE: tl.constexpr, NEG: tl.constexpr):
    """(m, h, u) of a token (A, V) (NATURAL) or of a form point's (log2 U, O).

    Finite x: (n, (v + 0 v) f, f); x = -inf: (NEG / 4, 0 v, 0), a zero weight; NaN or +inf:
    NaN h; not ``real`` (padding): (NEG, 0, 1).  ``weird_scan.triton._token``'s cases.
    """
    zero = x == float("-inf")
    n, f = _split(x, NATURAL)
    h = v + v * 0.0
    h = tl.where(zero, h * 0.0, h)
    h = tl.where(x < float("inf"), h, tl.full(x.shape, float("nan"), STATE))
    h = tl.where(zero, h, h * f)
    m = tl.where(zero, tl.full(x.shape, NEG * 0.25, STATE), n)
    u = tl.where(zero, tl.where(real, 0.0, 1.0), f).to(STATE)
    return tl.where(real, m, tl.full(x.shape, NEG, STATE)), tl.where(real, h, 0.0), \
        tl.where(real, u, 1.0)


@triton.jit
def _level_weight(logw_ptr, stride_k, k, d, dmask, STATE: tl.constexpr):
    """(n, g) of level k's weight per column ``d``: W = g 2^n (log_w's rows ``stride_k``
    apart)."""
    c = tl.load(logw_ptr + k * stride_k + d, mask=dmask, other=0).to(STATE)
    return _split(c, True)

