"""The chunked scan with its Toeplitz products on tensor cores: backend ``"triton-chunk"``.

Opt-in (docs/design.md §18).  The algorithm is ``weird_scan.chunk``'s, step for step (its
intra-chunk levels, chunk-level carries, column scales, exact path and backward); what
this module replaces is the product ``[T_lo | T_up] rhs`` (and its transpose in the
backward), the part that ``tl.dot`` runs on tensor cores:

* one program per (channel, block of ``BLOCK_N`` columns); a column is a (batch row,
  chunk) pair, so all of a channel's chunks share one C x 2C matrix;
* the matrix tile is built in registers from the channel's table of scaled weights
  ``a_lo(r) / max a_lo`` (C numbers, the matrix's first column) by index arithmetic:
  entry (rho, s) is the table at lag ``(rho - s) mod C``, zero on the wrong side of the
  diagonal, read with ``tl.load`` (no ``tl.gather``, whose code generation goes through
  shared memory, triton-lang/triton#5262);
* the right-hand sides (scaled by the column maxima, so every entry is at most 1 in
  magnitude times |h|) are loaded as a (2C, BLOCK_N) tile and multiplied with
  ``tl.dot(..., input_precision="ieee")`` in the state dtype (float32, or float64): the
  tolerances are float32's.  TF32 (``DOT_PRECISION = "tf32"``) would be the GPU's fast
  choice at a 1e-3 relative error of the inter-chunk part, which the tests do not accept.

The scales, the spread test and the exact columns stay in PyTorch (``chunk.inter``), as do
the levels; so this backend is correct wherever ``chunk`` is, and a GPU run measures the
product.  Backward: ``chunk.bwd`` with this product for the transposed Toeplitz
products; its lag correlations for d log_w are ``chunk``'s einsum.  Decoding: the PyTorch
backend's ring buffers (``chunk.extend``).

Under ``TRITON_INTERPRET=1`` (set before this module is first imported) the kernel runs
on CPU tensors, which is how the tests check it without a GPU.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from . import chunk
from .triton import _interpreting

INTERPRETED = _interpreting()
BLOCK_N = 32  # columns (batch row, chunk) per program
DOT_PRECISION = "ieee"  # float32 products at float32 accuracy (see the module docstring)
NUM_WARPS = 4


@triton.jit
def _toeplitz_dot_kernel(tab_ptr, rhs_ptr, out_ptr, ncol, D,
                         C: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                         BR: tl.constexpr, BS: tl.constexpr, BLOCK: tl.constexpr,
                         TRANSPOSED: tl.constexpr, PRECISION: tl.constexpr):
    """out[n, :, d] = T_d rhs[n, :, d] for a block of columns n and channel d.

    tab: (C, D) scaled a_lo(r); rhs: (ncol, S, D); out: (ncol, R, D).  T_d is
    [T_lo | T_up] (R = C, S = 2C), or its transpose (R = 2C, S = C) when TRANSPOSED.
    BR, BS: R and S padded to powers of two of at least 16 (tl.dot's smallest tile).
    """
    d = tl.program_id(0).to(tl.int64)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    r = tl.arange(0, BR)
    s = tl.arange(0, BS)
    if TRANSPOSED:  # entry (r, s) of T^T is T[s, r]
        rho = s[None, :]
        col = r[:, None]
    else:
        rho = r[:, None]
        col = s[None, :]
    prev = col % C  # the column's row rho' of Y_Q (col < C) or of Z_{Q-1} (col >= C)
    lag = (rho - prev + C) % C
    side = tl.where(col < C, rho >= prev, rho < prev)
    inside = (r[:, None] < R) & (s[None, :] < S)
    t = tl.load(tab_ptr + lag * D + d, mask=inside & side, other=0.0)
    ok_n = n < ncol
    rows = n.to(tl.int64)[None, :] * S + s[:, None]
    x = tl.load(rhs_ptr + rows * D + d, mask=(s[:, None] < S) & ok_n[None, :], other=0.0)
    acc = tl.dot(t, x, input_precision=PRECISION)
    dest = n.to(tl.int64)[None, :] * R + r[:, None]
    tl.store(out_ptr + dest * D + d, acc, mask=(r[:, None] < R) & ok_n[None, :])


def _pow2_tile(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def product(t: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """``chunk.product`` on the kernel: t (R, S, D), the scaled [T_lo | T_up] (C, 2C, D)
    or its transpose (2C, C, D); rhs (B, N, S, D).  Returns (B, N, R, D).

    The kernel reads only the matrix's first column (or row, transposed): the table
    ``a_lo(r) / max a_lo`` of the channel, from which it builds its tiles."""
    R, S, D = t.shape
    transposed = R > S
    C = S if transposed else R
    table = (t[0] if transposed else t[:, 0]).contiguous()  # (C, D)
    B, N = rhs.shape[:2]
    ncol = B * N
    x = rhs.contiguous()
    out = torch.empty((B, N, R, D), dtype=rhs.dtype, device=rhs.device)
    if out.numel() == 0:
        return out
    ctx = torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
    with ctx:
        _toeplitz_dot_kernel[(D, triton.cdiv(ncol, BLOCK_N))](
            table, x, out, ncol, D, C=C, R=R, S=S, BR=_pow2_tile(R), BS=_pow2_tile(S),
            BLOCK=BLOCK_N, TRANSPOSED=transposed, PRECISION=DOT_PRECISION,
            num_warps=NUM_WARPS)
    return out


def fwd(a, v, log_w, mask, doc, n_causal: int, nlev: int) -> torch.Tensor:
    """``chunk.fwd`` with the products on the kernel; same contract."""
    return chunk.fwd(a, v, log_w, mask, doc, n_causal, nlev, mul=product)


def bwd(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int):
    """``chunk.bwd`` with the (transposed) products on the kernel; same contract."""
    return chunk.bwd(a, v, log_w, mask, doc, grad, n_causal, nlev, mul=product)


extend = chunk.extend  # decoding: the PyTorch backend's ring buffers
