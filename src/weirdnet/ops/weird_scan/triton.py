"""Fused Triton kernels for the Weird-attention scan: backend ``"triton"`` of ``weird_scan``.

Same contracts as ``weird_scan.pytorch`` and the C kernels (``fwd``, ``bwd``, ``extend``).
The state is the running-max triple ``(m, h, u)`` of docs/design.md §8 (``H = e^m h``,
``U = e^m u``) in float32 (float64 for float64 inputs) whatever the input dtype; A, V and
the output gradient are read in their own dtype (bf16, fp16, fp32, fp64), and O, dA, dV
are written in it.

Why no single pass with a small carry.  The scan is the causal convolution
``H_i = sum_d a_d X_{i-d}`` with ``a_d = prod_{k in bits(d)} W_k``.  A streaming
evaluation must carry, from one tile to the next, at least the rank of the kernel's Hankel
matrix ``[a_{i+j}]``, and for generic W that rank is full (checked: n x n matrices have
rank n for n = 32 and 128; a geometric kernel, as in linear attention or Mamba, has rank
1).  So the past must be read again; the kernels read it in ``ceil(K / c)`` passes over
memory instead of the K passes of the level-by-level PyTorch scan (K = ceil(log2 L)).

Exact multi-pass form.  Write the distance in base ``C = 2^c`` (``c = LEVELS_PER_PASS``):
``d = sum_j d_j C^j`` with digits ``d_j < C``.  bits(d) is the disjoint union of the
digits' bits shifted by ``jc``, so ``a_d = prod_j a^(j)_{d_j}`` exactly, ``a^(j)`` being the
kernel of levels ``[jc, jc + c)`` (docs/design.md §8's ``a_{qC+r} = a_r a'_q``, applied
recursively).  The scan is therefore the composition of passes: pass j runs levels
``[jc, jc + c)`` along "rows" ``q`` of ``2^(jc)`` residues ``r`` (position
``p = q 2^(jc) + r``), with shifts of ``1 .. C/2`` rows that together reach back at most
``C - 1`` rows.  A program owns a tile of ``TILE = C`` rows of a block of (residue,
channel) columns, loads it with the ``C`` rows before it (the halo), runs the levels on
that window of ``2C`` rows in registers / shared memory (a shift is ``tl.gather`` along the
rows) and stores its ``C`` rows, which are exact: everything they depend on is in the
window.  Each row gets the arithmetic of a plain level-by-level scan in the order
0, 1, ..., K-1, with one change of form ``(m, h, u) -> (m + log u, h / u, 1)`` between
passes (the same ``(H, U)``; a zero-weight state, U = 0 from -inf logits, passes as
``(-inf, h)`` and is rebuilt by ``_token``, which reads pass inputs like (A, V)).  The
last pass has at most ``C`` rows: one program per column block holds whole columns, with
no halo.  Nothing is approximated (the change of form adds one rounding per pass), and
rows never read later rows: causality is bitwise.

Packed documents (``doc``, the (B, L) canonical ids).  Every level of every pass
compares the ids of the two positions it would combine (row i and row i - s of a window
are positions p and p - 2^k) and leaves the state at i as it is when they differ; the
backward gates its adjoint merge and its d log_w term by the same comparison, as
``weird_scan.pytorch`` does.  A pass's input is a position's own state after the lower
levels, so nothing else is carried from position to position: halos, passes and the
recomputed forward all go through the gated levels.  The ids are loaded once per window
(every pass, not only the first), as a (rows, columns) tensor gathered like the state.
Without ``doc`` the gate is compiled out (``HAS_DOC``).

Memory traffic.  ``L <= 2^c`` (32 by default) is one pass: one read of A and V, one write
of O.  Each further pass (up to ``2^(2c)`` = 1,024 two, up to 32,768 three, up to 2^20
four) adds one float32 intermediate ``(log U, O)`` written and read once (8 bytes per
element each way).  The halo is read twice; tiles of a column are consecutive in the
grid so that the second read can come from L2 (not measured).  The intermediate loads as
``(m, h, u) = (log U, O, 1)``, exactly like ``(A, V)``: every pass is the same kernel.

Backward (the mirrored scan of docs/design.md §8).  The intermediates of passes
1 .. n-1 are recomputed, then the passes run backwards, n .. 1.  A program recomputes its
window's forward levels; in the last pass (whole columns, so exact ``U`` and ``O`` in every
row) it turns the output gradient G into the adjoint ``(bm, b1, b2) = (-log U, G, G O)``,
in the others it loads the adjoint the pass above wrote.  It then runs the adjoint levels
from the top down, adding level k's term ``W_k e^{bm_i + m_{i-s}} (h_{i-s} b1_i -
u_{i-s} b2_i)`` to d log_w.  The forward state before level k is recomputed from the
window's input for every k (``c (c - 1) / 2`` level steps, on chip) rather than stored:
between passes only ``(bm, b1, b2)`` goes through memory.  With a halo the window is
``[(q-1) C, (q+1) C)``: the program writes the adjoint of rows ``[(q-1) C, q C)`` (each
sees the ``C - 1`` rows ahead it needs) and the level-k terms whose source row is in
``[(q-1) C + 2^k, q C + 2^k)``, exactly the rows whose forward state (``2^k - 1`` rows
back) and adjoint after level k (``C - 2^(k+1)`` rows ahead) are complete in the window;
over ``q = 0 .. tiles`` those ranges tile the sequence.  d log_w partial sums go to one
slot per program and are summed in float64 (deterministic, no atomics).  Only the op's
inputs are kept between forward and backward, so the forward does not write ``log U``:
the backward's last pass computes it exactly, for free.

Decoding (``extend``): one launch per call; one program per (batch row, channel block)
walks the tokens and levels in order over the ring buffers of ``weird_scan.pytorch.extend``, with
the full pass's change of form every ``c`` levels, so its outputs are ``fwd``'s bit for bit
(same combine, same order; checked under the interpreter).  The PyTorch step runs about
20 small kernels per level, ~20 K launches per token on a GPU; this is one.

Compile time.  The level loops are run-time loops (``range``), not unrolled
(``tl.static_range``): unrolled, the backward's ``c (c + 1) / 2`` level steps made about
81,000 lines of PTX and 31 s of compilation per specialization, 42 s for the four kernels a
first step at L = 1024 needs; as loops, 5 s (``lab/benchmarks/triton_compile_time.py``, sm_90,
on a CPU); with the passes of 5 levels below, 1.7 s.  On an H200 the loops cost run
time at c = 8 (the unrolled e01cd49 kernels: forward 0.76 against 1.88 ms, forward +
backward 11.4 against 15.2 ms at L = 1024, B = 8, D = 1024, bf16), a cost that the choice
of c below outweighs many times.

Tuning (``lab/benchmarks/scan_kernel_variants.py``, one run on an H200, Triton 3.6, 2026-11-27;
``lab/results/gpu/h200-2026-11-27-variants/``).  ``LEVELS_PER_PASS`` is the knob
that matters: a window of ``2^(c+1)`` rows is the state the ``tl.gather`` shifts move
around, and at c = 8 (512 rows x 16 channels, three state tensors) the kernels ran at 1%
of the copy bandwidth.  Forward + backward, L = 1024 / 16384: c = 8 15.2 / 214 ms, c = 6
2.41 / 67.5, c = 5 1.41 / 37.9, c = 4 1.91 / 40.9; so c = 5.  Fewer warps (4) or wider
channel blocks (32) made c = 8 10-20x slower still; ``TILE_ELEMENTS`` and the other
combinations were not reached in that run.

The tests run the kernels under the Triton interpreter (``TRITON_INTERPRET=1``) on CPU
tensors, and compiled on a GPU where there is one: on an H100 (Triton 3.6, 2026-11-26)
91 of 92 passed with passes of 8 (the failure a test flaw, since fixed;
lab/results/gpu/).
"""
from __future__ import annotations

import contextlib
import os

import torch
import triton
import triton.language as tl

from .pytorch import _parts  # (channel slice, reverse?) of the causal/anti-causal ranges

LEVELS_PER_PASS = 5  # c: levels per pass; a tile is 2^c rows (and 2^c more of halo)
TILE_ELEMENTS = 4096  # target rows x columns of one state tensor in a program
MAX_BLOCK_D = 16  # channels per program (16 bf16 channels = one 32-byte sector per row)
NUM_WARPS = 8
STATE_CHUNK_BYTES = 128 << 20  # the largest float state tensor (B, L, channels) of a pass
CHUNK_ALIGN = 64  # channels: a multiple of MAX_BLOCK_D, so every chunk keeps its blocks


def _interpreting() -> bool:
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


# Whether the kernels of this module were built for the Triton interpreter (CPU tensors)
# or for the GPU: triton.jit decides when the module is imported.
INTERPRETED = _interpreting()

# tl.sum and tl.cdiv are @triton.jit functions of triton.language.standard, built when
# triton is imported: if that happened before TRITON_INTERPRET=1 was set, the interpreter
# cannot call them.  The kernels use tl.reduce with this combine function (what tl.sum
# does; the interpreter maps it to numpy.sum) and plain integer arithmetic instead.
_SUM = tl.standard._sum_combine


# ----------------------------------------------------------------------------------------
# Kernel helpers
# ----------------------------------------------------------------------------------------


@triton.jit
def _combine(m, h, u, mp, hp, up):
    """Merge partner (mp, hp, up) into (m, h, u): the combine of ``pytorch.py`` and the C code."""
    d = m - mp
    e = tl.exp(-tl.abs(d))
    keep = d >= 0
    st = tl.where(keep, 1.0, e)
    sp = tl.where(keep, e, 1.0)
    return tl.where(keep, m, mp), h * st + hp * sp, u * st + up * sp


@triton.jit
def _same_doc(has, seg, idx, HAS_DOC: tl.constexpr):
    """``has`` (broadcast to (WIN, COLS)) and, with documents, ``seg == seg[idx]``: a
    partner in another document is no partner.  Without documents ``has`` as it is."""
    if HAS_DOC:
        has = has & (seg == tl.gather(seg, idx, 0))
    return has


@triton.jit
def _level_fwd(m, h, u, c, seg, w, row, s, WIN: tl.constexpr, COLS: tl.constexpr,
               HAS_DOC: tl.constexpr):
    """One level on a (WIN, COLS) window: row i takes row i - s (out of place).

    ``w``: (WIN,) window rows; ``row``: (WIN,) absolute rows; ``c``: (COLS,) log W;
    ``seg``: (WIN, COLS) document ids when HAS_DOC.  A row before the sequence start
    (absolute row < s), or whose partner lies in another document, keeps its state.
    """
    idx = tl.broadcast_to(tl.maximum(w - s, 0)[:, None], (WIN, COLS))
    m2, h2, u2 = _combine(m, h, u, tl.gather(m, idx, 0) + c[None, :], tl.gather(h, idx, 0),
                          tl.gather(u, idx, 0))
    has = _same_doc(((w >= s) & (row >= s))[:, None], seg, idx, HAS_DOC)
    return tl.where(has, m2, m), tl.where(has, h2, h), tl.where(has, u2, u)


@triton.jit
def _geometry(q0, pid_c, L, nres, d_lo, d_hi, WIN: tl.constexpr, BLOCK_R: tl.constexpr,
              BLOCK_D: tl.constexpr, REV: tl.constexpr):
    """Window of a program: rows q0 .. q0+WIN-1, a block of residues x channels.

    Returns (w, row, d, pm, ok): window rows (WIN,), absolute rows (WIN,), channels
    (COLS,), memory position (WIN, COLS) int64 and ok (WIN, COLS): the element exists.
    """
    w = tl.arange(0, WIN)
    row = q0 + w
    j = tl.arange(0, BLOCK_R * BLOCK_D)
    n_rb = (nres + BLOCK_R - 1) // BLOCK_R
    r = (pid_c % n_rb) * BLOCK_R + j // BLOCK_D
    d = d_lo + (pid_c // n_rb) * BLOCK_D + j % BLOCK_D
    p = row.to(tl.int64)[:, None] * nres + r[None, :]
    ok = (row >= 0)[:, None] & (p < L) & ((r < nres) & (d < d_hi))[None, :]
    if REV:
        p = L - 1 - p
    return w, row, d, p, ok


@triton.jit
def _token(a, v, real, STATE: tl.constexpr, NEG: tl.constexpr):
    """(m, h, u) of a token (A, V) or a pass input (log U, O): ``token_state`` of the C code.

    Finite a: (a, v + 0 v, 1) (v, or NaN for a non-finite v); a = -inf: (NEG / 4, 0 v, 0),
    a zero weight; a NaN or +inf: (a, NaN, 1); not ``real`` (padding): (NEG, 0, 1).
    """
    zero = a == float("-inf")
    h = v + v * 0.0
    h = tl.where(zero, h * 0.0, h)
    h = tl.where(a < float("inf"), h, tl.full(a.shape, float("nan"), STATE))
    m = tl.where(zero, tl.full(a.shape, NEG * 0.25, STATE), a)
    u = tl.where(zero & real, tl.full(a.shape, 0.0, STATE), tl.full(a.shape, 1.0, STATE))
    return tl.where(real, m, tl.full(a.shape, NEG, STATE)), tl.where(real, h, 0.0), u


@triton.jit
def _pass_form(m, h, u):
    """(log U, O) handed from one pass to the next; a zero-weight state (U = 0) becomes
    (-inf, h), which ``_token`` turns back into the same state."""
    return m + tl.log(u), tl.where(u == 0, h, h / u)


@triton.jit
def _pass_inputs(x1_ptr, x2_ptr, mask_ptr, b, pm, d, ok, L, s1b, s1l, s2b, s2l,
                 FIRST: tl.constexpr, HAS_MASK: tl.constexpr, STATE: tl.constexpr):
    """(x1, x2, real) of a pass program's rows (both Triton backends): its input pair at
    memory positions ``pm`` (WIN, COLS) and channels ``d``, in STATE; ``real``: in range
    (``ok``) and, in the first pass with a mask, a real token."""
    real = ok
    if FIRST:
        if HAS_MASK:
            real = ok & (tl.load(mask_ptr + b * L + pm, mask=ok, other=0) != 0)
    x1 = tl.load(x1_ptr + b * s1b + pm * s1l + d[None, :], mask=real, other=0).to(STATE)
    x2 = tl.load(x2_ptr + b * s2b + pm * s2l + d[None, :], mask=real, other=0).to(STATE)
    return x1, x2, real


@triton.jit
def _load_state(x1_ptr, x2_ptr, mask_ptr, s1b, s1l, s2b, s2l, b, pm, d, ok, L,
                FIRST: tl.constexpr, HAS_MASK: tl.constexpr, STATE: tl.constexpr,
                NEG: tl.constexpr):
    """(m, h, u, real) of the pass input, (A, V) or (log U, O), through ``_token``."""
    m, h, real = _pass_inputs(x1_ptr, x2_ptr, mask_ptr, b, pm, d, ok, L, s1b, s1l, s2b, s2l,
                              FIRST, HAS_MASK, STATE)
    m, h, u = _token(m, h, real, STATE, NEG)
    return m, h, u, real


@triton.jit
def _load_doc(doc_ptr, b, pm, ok, L, HAS_DOC: tl.constexpr):
    """(WIN, COLS) document ids of the window's positions (-1 where none), or 0 without
    documents.  Every pass reads them: each level is gated, not only the first pass's."""
    if HAS_DOC:
        return tl.load(doc_ptr + b * L + pm, mask=ok, other=-1)
    else:
        return 0


@triton.jit
def _forward_levels(m, h, u, seg, logw_ptr, D, lo, d, dmask, w, row, n,
                    WIN: tl.constexpr, COLS: tl.constexpr, STATE: tl.constexpr,
                    HAS_DOC: tl.constexpr):
    """Levels lo .. lo+n-1 of the pass, in order."""
    for k in range(n):
        c = tl.load(logw_ptr + (lo + k) * D + d, mask=dmask, other=0).to(STATE)
        m, h, u = _level_fwd(m, h, u, c, seg, w, row, 1 << k, WIN, COLS, HAS_DOC)
    return m, h, u


# ----------------------------------------------------------------------------------------
# Forward pass
# ----------------------------------------------------------------------------------------


@triton.jit
def _fwd_pass_kernel(x1_ptr, x2_ptr, mask_ptr, doc_ptr, logw_ptr, y1_ptr, y2_ptr,
                     s1b, s1l, s2b, s2l, L, D, d_lo, d_hi, lo, nres, nq,
                     NL: tl.constexpr, TILE: tl.constexpr, WIN: tl.constexpr,
                     HALO: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
                     REV: tl.constexpr, FIRST: tl.constexpr, LAST: tl.constexpr,
                     HAS_MASK: tl.constexpr, HAS_DOC: tl.constexpr, STATE: tl.constexpr,
                     NEG: tl.constexpr):
    """One pass: levels lo .. lo+NL-1 over rows of ``nres`` residues, tile TILE rows.

    Input (x1, x2): (A, V) with strides (s*b, s*l, 1) when FIRST, else the previous
    pass's (log U, O).  doc: (B, L) int64 document ids when HAS_DOC.  Output: (log U, O)
    float state, or O alone (y2) when LAST.  Grid: (nq * column blocks, B); the tile
    index varies fastest.
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    q = pid % nq
    q0 = (q - HALO) * TILE
    w, row, d, pm, ok = _geometry(q0, pid // nq, L, nres, d_lo, d_hi, WIN, BLOCK_R, BLOCK_D,
                                  REV)
    COLS: tl.constexpr = BLOCK_R * BLOCK_D
    m, h, u, real = _load_state(x1_ptr, x2_ptr, mask_ptr, s1b, s1l, s2b, s2l, b, pm, d, ok,
                                L, FIRST, HAS_MASK, STATE, NEG)
    seg = _load_doc(doc_ptr, b, pm, ok, L, HAS_DOC)
    m, h, u = _forward_levels(m, h, u, seg, logw_ptr, D, lo, d, d < d_hi, w, row, NL, WIN,
                              COLS, STATE, HAS_DOC)
    out = ok & (w >= WIN - TILE)[:, None]
    offs = (b * L + pm) * D + d[None, :]
    if LAST:
        tl.store(y2_ptr + offs, (h / u).to(y2_ptr.dtype.element_ty), mask=out)
    else:
        y1, y2 = _pass_form(m, h, u)
        tl.store(y1_ptr + offs, y1, mask=out)
        tl.store(y2_ptr + offs, y2, mask=out)


# ----------------------------------------------------------------------------------------
# Backward pass
# ----------------------------------------------------------------------------------------


@triton.jit
def _adjoint_from_grad(g_ptr, sgb, sgl, b, pm, d, ok, m, h, u, STATE: tl.constexpr,
                       NEG: tl.constexpr):
    """(bm, b1, b2) = (-log U, G, G O) from the final forward state; 0 out of reach; bm NaN
    where O is NaN, which makes the adjoint of its whole window NaN.  Also returns
    ``O * 0`` (0, or NaN at a NaN output) for the d log_w poison."""
    o = h / u
    bad = o != o
    live = ok & ((m > NEG * 0.5) | bad)
    g = tl.load(g_ptr + b * sgb + pm * sgl + d[None, :], mask=live, other=0).to(STATE)
    bm = tl.where(live, -(m + tl.log(u)), tl.full(m.shape, NEG, STATE))
    return tl.where(bad, o, bm), g, g * o, tl.where(ok, o * 0.0, 0.0)


@triton.jit
def _dlogw_term(bm, b1, b2, fm, fh, fu, c, seg, w, sel, s, WIN: tl.constexpr,
                COLS: tl.constexpr, HAS_DOC: tl.constexpr):
    """Level term of d log_w per source row, and the adjoint's partner (rows + s); a
    partner in another document is none (no adjoint flows back across a document start)."""
    idx = tl.broadcast_to(tl.minimum(w + s, WIN - 1)[:, None], (WIN, COLS))
    has = _same_doc((w + s < WIN)[:, None], seg, idx, HAS_DOC)
    bmp = tl.gather(bm, idx, 0) + c[None, :]
    b1p = tl.gather(b1, idx, 0)
    b2p = tl.gather(b2, idx, 0)
    term = tl.exp(bmp + fm) * (fh * b1p - fu * b2p)
    term = tl.where(sel & has, term, 0.0)
    return term, bmp, b1p, b2p, has


@triton.jit
def _bwd_pass_kernel(x1_ptr, x2_ptr, mask_ptr, doc_ptr, logw_ptr, g_ptr, bi_m, bi_1, bi_2,
                     bo_m, bo_1, bo_2, part_ptr,
                     s1b, s1l, s2b, s2l, sgb, sgl, L, D, d_lo, d_hi, lo, nres, nq, n_rb,
                     NL: tl.constexpr, TILE: tl.constexpr, WIN: tl.constexpr,
                     HALO: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
                     REV: tl.constexpr, FIRST: tl.constexpr, TOP: tl.constexpr,
                     HAS_MASK: tl.constexpr, HAS_DOC: tl.constexpr, STATE: tl.constexpr,
                     NEG: tl.constexpr):
    """Adjoint of one pass, and its levels' d log_w partial sums.

    Adjoint input: the output gradient G (strided) when TOP (last pass), else the
    (bm, b1, b2) buffers of the pass above.  Output: (dA, dV) into (bo_1, bo_2) when FIRST,
    else (bm, b1, b2) into bo_*.  part: (B, nq, n_rb, NL, D) float, this program's slot
    holding its sum of every level's term.  doc: (B, L) int64 document ids when HAS_DOC.
    Grid: (nq * column blocks, B), where nq counts one program more than tiles when HALO
    (the window is [(q-1) TILE, (q+1) TILE)).
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    q = pid % nq
    pid_c = pid // nq
    w, row, d, pm, ok = _geometry((q - HALO) * TILE, pid_c, L, nres, d_lo, d_hi, WIN,
                                  BLOCK_R, BLOCK_D, REV)
    COLS: tl.constexpr = BLOCK_R * BLOCK_D
    dmask = d < d_hi
    fm0, fh0, fu0, real = _load_state(x1_ptr, x2_ptr, mask_ptr, s1b, s1l, s2b, s2l, b, pm, d,
                                      ok, L, FIRST, HAS_MASK, STATE, NEG)
    seg = _load_doc(doc_ptr, b, pm, ok, L, HAS_DOC)
    offs = (b * L + pm) * D + d[None, :]
    if TOP:
        m, h, u = _forward_levels(fm0, fh0, fu0, seg, logw_ptr, D, lo, d, dmask, w, row, NL,
                                  WIN, COLS, STATE, HAS_DOC)
        bm, b1, b2, o0 = _adjoint_from_grad(g_ptr, sgb, sgl, b, pm, d, ok, m, h, u, STATE,
                                            NEG)
        # NaN in the channels of a NaN output (bwd() spreads it to the lower passes' levels)
        poison = tl.reduce(tl.reshape(tl.reduce(o0, 0, _SUM), (BLOCK_R, BLOCK_D)), 0, _SUM)
    else:
        bm = tl.load(bi_m + offs, mask=ok, other=NEG)
        b1 = tl.load(bi_1 + offs, mask=ok, other=0)
        b2 = tl.load(bi_2 + offs, mask=ok, other=0)
        poison = tl.full((BLOCK_D,), 0.0, STATE)
    part = part_ptr + ((b * nq + q) * n_rb + pid_c % n_rb) * NL * D
    d_blk = d_lo + (pid_c // n_rb) * BLOCK_D + tl.arange(0, BLOCK_D)
    for kk in range(NL):
        k = NL - 1 - kk
        fm, fh, fu = _forward_levels(fm0, fh0, fu0, seg, logw_ptr, D, lo, d, dmask, w, row,
                                     k, WIN, COLS, STATE, HAS_DOC)
        c = tl.load(logw_ptr + (lo + k) * D + d, mask=dmask, other=0).to(STATE)
        src = (w >= (1 << k) * HALO) & (w < (1 << k) * HALO + TILE)
        term, bmp, b1p, b2p, has = _dlogw_term(bm, b1, b2, fm, fh, fu, c, seg, w,
                                               ok & src[:, None], 1 << k, WIN, COLS, HAS_DOC)
        acc = tl.reduce(tl.reshape(tl.reduce(term, 0, _SUM), (BLOCK_R, BLOCK_D)), 0, _SUM)
        tl.store(part + k * D + d_blk, acc + poison, mask=d_blk < d_hi)
        m2, c1, c2 = _combine(bm, b1, b2, bmp, b1p, b2p)
        bm, b1, b2 = tl.where(has, m2, bm), tl.where(has, c1, b1), tl.where(has, c2, b2)
    out = ok & (w < TILE)[:, None]
    if FIRST:
        e = tl.where(real, tl.exp(fm0 + bm), 0.0)
        dv = tl.where(real, e * b1, 0.0)  # padded inputs get 0, even beside a NaN
        da = tl.where(real, fh0 * dv - e * b2, 0.0)
        tl.store(bo_1 + offs, da.to(bo_1.dtype.element_ty), mask=out)
        tl.store(bo_2 + offs, dv.to(bo_2.dtype.element_ty), mask=out)
    else:
        tl.store(bo_m + offs, bm, mask=out)
        tl.store(bo_1 + offs, b1, mask=out)
        tl.store(bo_2 + offs, b2, mask=out)


# ----------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------


@triton.jit
def _decode_columns(D, BLOCK_D: tl.constexpr):
    """(b, d, dm) of a decode program: its batch row, its channels and which are in range."""
    b = tl.program_id(1).to(tl.int64)
    d = tl.program_id(0) * BLOCK_D + tl.arange(0, BLOCK_D)
    return b, d, d < D


@triton.jit
def _decode_inputs(a_ptr, v_ptr, valid_ptr, b, tt, d, dm, sab, sat, svb, svt, T,
                   HAS_MASK: tl.constexpr, STATE: tl.constexpr):
    """(a, v, real) of decoded token ``tt`` of batch row ``b`` over channels ``d`` (in range
    where ``dm``), in STATE; ``real``: in range and, with a mask, a real token (the decode
    kernels of both Triton backends)."""
    real = dm
    if HAS_MASK:
        real = dm & (tl.load(valid_ptr + b * T + tt + d * 0) != 0)  # a (BLOCK_D,) mask
    x1 = tl.load(a_ptr + b * sab + tt * sat + d, mask=real, other=0).to(STATE)
    x2 = tl.load(v_ptr + b * svb + tt * svt + d, mask=real, other=0).to(STATE)
    return x1, x2, real


@triton.jit
def _extend_kernel(a_ptr, v_ptr, valid_ptr, logw_ptr, rm_ptr, rh_ptr, ru_ptr, out_ptr,
                   sab, sat, svb, svt, B, T, D, nlev, t0, cpass,
                   HAS_MASK: tl.constexpr, BLOCK_D: tl.constexpr, STATE: tl.constexpr,
                   NEG: tl.constexpr):
    """Tokens t0 .. t0+T-1 of one batch row and channel block, in order.

    Ring rows as in ``weird_scan.pytorch.extend``: level k owns rows [2^k - 1, 2^(k+1) - 1) of
    (rows, B, D), row (2^k - 1) + (t mod 2^k) holding position t's state before level k.
    After every ``cpass`` levels the state takes the form the full pass hands from one
    pass to the next, so the outputs are bitwise those of the full pass.
    """
    b, d, dm = _decode_columns(D, BLOCK_D)
    for tt in range(T):
        t = t0 + tt
        m, h, real = _decode_inputs(a_ptr, v_ptr, valid_ptr, b, tt, d, dm, sab, sat, svb,
                                    svt, T, HAS_MASK, STATE)
        m, h, u = _token(m, h, real, STATE, NEG)
        for k in range(nlev):
            s = 1 << k
            offs = (((s - 1) + (t & (s - 1))) * B + b) * D + d
            if t >= s:
                c = tl.load(logw_ptr + k * D + d, mask=dm, other=0)
                mp = tl.load(rm_ptr + offs, mask=dm, other=0) + c
                hp = tl.load(rh_ptr + offs, mask=dm, other=0)
                up = tl.load(ru_ptr + offs, mask=dm, other=1)
                tl.store(rm_ptr + offs, m, mask=dm)
                tl.store(rh_ptr + offs, h, mask=dm)
                tl.store(ru_ptr + offs, u, mask=dm)
                m, h, u = _combine(m, h, u, mp, hp, up)
            else:
                tl.store(rm_ptr + offs, m, mask=dm)
                tl.store(rh_ptr + offs, h, mask=dm)
                tl.store(ru_ptr + offs, u, mask=dm)
            if (k + 1) % cpass == 0:
                m, h = _pass_form(m, h, u)
                m, h, u = _token(m, h, dm, STATE, NEG)
        tl.store(out_ptr + (b * T + tt) * D + d, (h / u).to(out_ptr.dtype.element_ty), mask=dm)


# ----------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------


class _Pass:
    """Levels [lo, lo + nl) along rows of ``nres = 2^lo`` residues, in tiles of ``tile`` rows
    (with a halo of one tile before each when ``halo``); ``nq`` tiles."""

    def __init__(self, lo: int, nl: int, length: int, last: bool):
        self.lo, self.nl, self.nres = lo, nl, 1 << lo
        self.halo = 0 if last else 1
        self.tile = 1 << nl
        self.win = self.tile * (1 + self.halo)
        self.nq = triton.cdiv(triton.cdiv(length, self.nres), self.tile)

    def blocks(self, width: int) -> tuple[int, int]:
        """(BLOCK_R, BLOCK_D) for a channel range of ``width``."""
        block_d = min(MAX_BLOCK_D, triton.next_power_of_2(width))
        fill = max(1, TILE_ELEMENTS // (self.win * block_d))
        return min(triton.next_power_of_2(self.nres), fill), block_d


def plan(length: int, nlev: int) -> list[_Pass]:
    """The passes of a scan over ``length`` positions with ``nlev`` levels (at least one)."""
    c = LEVELS_PER_PASS
    los = list(range(0, max(nlev, 1), c))
    return [_Pass(lo, min(c, nlev - lo), length, i == len(los) - 1) for i, lo in enumerate(los)]


def _state(dtype: torch.dtype):
    """(tl state dtype, NEG sentinel) for a compute dtype (float32 or float64)."""
    return (tl.float64, -1e300) if dtype == torch.float64 else (tl.float32, -1e30)


def _device(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _common(ps: _Pass, x, part: slice, mask, doc, log_w, first: bool):
    """Arguments shared by the forward and backward launches of one pass and part."""
    x1, x2 = x
    B, L, D = x1.shape
    block_r, block_d = ps.blocks(part.stop - part.start)
    n_rb = triton.cdiv(ps.nres, block_r)
    n_cb = n_rb * triton.cdiv(part.stop - part.start, block_d)
    state, neg = _state(log_w.dtype)
    strides = (x1.stride(0), x1.stride(1), x2.stride(0), x2.stride(1))
    consts = dict(NL=ps.nl, TILE=ps.tile, WIN=ps.win, HALO=ps.halo, BLOCK_R=block_r,
                  BLOCK_D=block_d, HAS_MASK=first and mask is not None,
                  HAS_DOC=doc is not None, STATE=state, NEG=neg, num_warps=NUM_WARPS)
    return B, L, D, n_rb, n_cb, strides, consts


def _launch_fwd(ps: _Pass, x, y, mask, doc, log_w, part: slice, rev: bool, first: bool,
                last: bool) -> None:
    B, L, D, _, n_cb, strides, consts = _common(ps, x, part, mask, doc, log_w, first)
    mask_arg = x[0] if mask is None else mask
    doc_arg = x[0] if doc is None else doc  # never read without documents
    _fwd_pass_kernel[(ps.nq * n_cb, B)](
        x[0], x[1], mask_arg, doc_arg, log_w, y[0], y[1], *strides, L, D, part.start,
        part.stop, ps.lo, ps.nres, ps.nq, REV=rev, FIRST=first, LAST=last, **consts)


def _launch_bwd(ps: _Pass, x, adj, out, mask, doc, log_w, part: slice, rev: bool,
                first: bool) -> torch.Tensor:
    """Run one backward pass on ``part``; returns its d log_w rows (nl, D) float64."""
    B, L, D, n_rb, n_cb, strides, consts = _common(ps, x, part, mask, doc, log_w, first)
    nq = ps.nq + ps.halo
    top = isinstance(adj, torch.Tensor)
    g = adj if top else x[0]
    bi = (x[0],) * 3 if top else adj
    part_sums = torch.zeros((B, nq, n_rb, ps.nl, D), dtype=log_w.dtype, device=log_w.device)
    _bwd_pass_kernel[(nq * n_cb, B)](
        x[0], x[1], x[0] if mask is None else mask, x[0] if doc is None else doc, log_w, g,
        *bi, *out, part_sums, *strides, g.stride(0), g.stride(1), L, D, part.start,
        part.stop, ps.lo, ps.nres, nq, n_rb, REV=rev, FIRST=first, TOP=top, **consts)
    return part_sums.sum((0, 1, 2), dtype=torch.float64)


def channel_chunks(B: int, L: int, D: int, state_dtype: torch.dtype) -> list[slice]:
    """The channel ranges the scan runs one after another: channels never mix, so a
    chunk's passes are the whole scan's restricted to its channels (the same blocks, the
    same bits), and each pass's state tensors, (B, L, chunk) in ``state_dtype``, stay
    within ``STATE_CHUNK_BYTES``.  One range, all of D, up to that size (B = 8, D = 1024
    in float32: L = 4K); four at L = 16K."""
    per_channel = B * L * (torch.finfo(state_dtype).bits // 8)
    width = STATE_CHUNK_BYTES // max(per_channel, 1) // CHUNK_ALIGN * CHUNK_ALIGN
    width = max(width, CHUNK_ALIGN)
    return [slice(c, min(c + width, D)) for c in range(0, D, width)] or [slice(0, D)]


def _in_chunks(whole, a, v, log_w, n_causal: int, nlev: int, *rest):
    """Run ``whole(a, v, log_w, *rest, n_causal, nlev)`` (a ``_fwd_whole`` or ``_bwd_whole``)
    on each channel chunk of :func:`channel_chunks` and put the pieces together: the
    (B, L, D) outputs along the channels, d log_w (nlev, D) along its columns."""
    B, L, D = a.shape
    chunks = channel_chunks(B, L, D, log_w.dtype)
    if len(chunks) == 1:
        return whole(a, v, log_w, *rest, n_causal, nlev)
    outs = None
    for c in chunks:
        rows = [x[..., c] if isinstance(x, torch.Tensor) and x.dim() == 3 else x
                for x in rest]
        local_n_causal = min(max(n_causal - c.start, 0), c.stop - c.start)
        piece = whole(a[..., c], v[..., c], log_w[:, c].contiguous(), *rows, local_n_causal,
                      nlev)
        pieces = piece if isinstance(piece, tuple) else (piece,)
        if outs is None:
            outs = tuple(torch.empty((*p.shape[:-1], D), dtype=p.dtype, device=p.device)
                         for p in pieces)
        for out, p in zip(outs, pieces):
            out[..., c] = p
        del piece, pieces
    return outs if len(outs) > 1 else outs[0]


def fwd(a, v, log_w, mask, doc, n_causal: int, nlev: int) -> torch.Tensor:
    """O = H / U in ``a``'s dtype.

    a, v: (B, L, D) any float dtype, unit channel stride; log_w: (>= nlev, D) contiguous in
    the state dtype (float32, or float64 for float64 inputs); mask: (B, L) bool or None;
    doc: (B, L) int64 C-contiguous canonical document ids, or None.  Channels [0, n_causal)
    are causal, [n_causal, D) anti-causal.  Runs in channel chunks (:func:`channel_chunks`).
    """
    return _in_chunks(_fwd_whole, a, v, log_w, n_causal, nlev, mask, doc)


def _fwd_whole(a, v, log_w, mask, doc, n_causal: int, nlev: int) -> torch.Tensor:
    mask = None if mask is None else mask.contiguous()

    def launch(ps, x, y, out, part, rev, first, last):
        _launch_fwd(ps, x, y, mask, doc, log_w, part, rev, first, last)

    return run_passes(a, v, log_w.dtype, plan(a.shape[1], nlev), n_causal, launch)


def run_passes(a, v, state_dtype: torch.dtype, passes: list, n_causal: int,
               launch) -> torch.Tensor:
    """The forward's pass loop, shared by the Triton backends: O (B, L, D) in ``a``'s dtype.

    Pass i reads the previous pass's intermediate (A, V for the first), writes a new
    float intermediate of ``state_dtype`` (two (B, L, D) tensors), the last one O itself;
    ``launch(ps, x, y, out, part, rev, first, last)`` runs pass ``ps`` on one channel part
    (:func:`weird_scan.pytorch._parts`: the causal and anti-causal channels)."""
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    if out.numel() == 0:
        return out
    x = (a, v)
    with _device(a):
        for i, ps in enumerate(passes):
            last = i == len(passes) - 1
            y = (out, out) if last else _buffers(a, state_dtype, 2)
            for part, rev in _parts(a.shape[2], n_causal):
                launch(ps, x, y, out, part, rev, i == 0, last)
            x = y
    return out


def _buffers(a: torch.Tensor, dtype: torch.dtype, n: int):
    return tuple(torch.empty(a.shape, dtype=dtype, device=a.device) for _ in range(n))


def bench_passes(a, v, log_w, nlev: int) -> list[tuple[str, object, object]]:
    """Measuring hook (``weirdnet bench gpu``, issue 73): each pass of :func:`fwd` alone.

    a, v: (B, L, D) causal, no mask or documents; log_w: (>= nlev, D) in the state dtype.
    Runs the forward once, pass by pass, keeping each pass's input, and returns per pass
    (label, run, run_without_levels): ``run()`` launches that pass on its input, and
    ``run_without_levels()`` the same launch with the level loop emptied (NL = 0: the
    loads, layout conversions and stores alone).  All D channels go in one launch (fwd
    splits them into :func:`channel_chunks` at large B·L: the same bytes, more launches).
    """
    B, L, D = a.shape
    passes, x, out = plan(L, nlev), (a, v), []
    for i, ps in enumerate(passes):
        last = i == len(passes) - 1
        y = (torch.empty_like(a),) * 2 if last else _buffers(a, log_w.dtype, 2)
        empty = _Pass(ps.lo, ps.nl, L, last)
        empty.nl = 0  # same tile and window, no level

        def launch(p, x=x, y=y, first=i == 0, last=last):
            with _device(a):
                _launch_fwd(p, x, y, None, None, log_w, slice(0, D), False, first, last)

        out.append(_bench_entry(i, len(passes), ps, empty, launch))
        x = y
    return out


def _bench_entry(i: int, n: int, ps, empty, launch) -> tuple[str, object, object]:
    """Pass ``i`` of ``n`` of a ``bench_passes`` hook (both Triton backends): runs it once
    (``launch(p)`` launches pass ``p`` on that pass's input, so the next pass has its
    input) and returns (label, run, run_without_levels), ``empty`` being the pass with
    no level."""
    launch(ps)
    return (f"pass {i + 1} of {n}: levels {ps.lo}-{ps.lo + ps.nl - 1}",
            lambda: launch(ps), lambda: launch(empty))


def bwd(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int):
    """Gradients (dA, dV, dlog_w) of ``sum(grad * fwd(...))``.

    a, v, grad: (B, L, D) unit channel stride; mask, doc as in :func:`fwd`; dA, dV in
    ``a``'s dtype; dlog_w (nlev, D) float64.  Runs in channel chunks
    (:func:`channel_chunks`), each as :func:`_bwd_whole`.
    """
    return _in_chunks(_bwd_whole, a, v, log_w, n_causal, nlev, mask, doc, grad)


def _bwd_whole(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int):
    """:func:`bwd` on all of a's channels at once: recomputes the forward intermediates,
    then runs the passes backwards.

    Memory: the recomputed inputs of passes 2 .. n (two state-dtype (B, L, D) tensors
    each), each freed once its backward pass has run, and two adjoints (three tensors
    each: the later pass's and this one's).  dA and dV are allocated when the first pass's
    backward starts, so they are not held beside a middle pass's input and two adjoints,
    the peak from three passes (L > 1,024 at five levels a pass) on.
    """
    B, L, D = a.shape
    dlogw = torch.zeros((nlev, D), dtype=torch.float64, device=a.device)
    if a.numel() == 0:
        return torch.empty_like(a), torch.empty_like(a), dlogw
    passes, mask = plan(L, nlev), None if mask is None else mask.contiguous()
    with _device(a):
        xs = [(a, v)]
        for i, ps in enumerate(passes[:-1]):
            xs.append(_buffers(a, log_w.dtype, 2))
            for part, rev in _parts(D, n_causal):
                _launch_fwd(ps, xs[-2], xs[-1], mask, doc, log_w, part, rev, i == 0, False)
        adj = grad
        for i in reversed(range(len(passes))):
            ps, x = passes[i], xs.pop()
            if i == 0:
                da, dv = _buffers(a, a.dtype, 2)
                out = (da, da, dv)
            else:
                out = _buffers(a, log_w.dtype, 3)
            for part, rev in _parts(D, n_causal):
                dlogw[ps.lo : ps.lo + ps.nl] += _launch_bwd(ps, x, adj, out, mask, doc, log_w,
                                                            part, rev, i == 0)
            adj = out
    return da, dv, dlogw + dlogw.sum(0) * 0  # a NaN level poisons all levels of its channel


def _decode_setup(a: torch.Tensor, log_w: torch.Tensor):
    """(out, state, neg, block_d) of a decode launch over ``a`` (B, T, D): the empty
    output, the state dtype and its floor, and the channels of one program."""
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    state, neg = _state(log_w.dtype)
    return out, state, neg, min(256, triton.next_power_of_2(a.shape[-1]))


def extend(a, v, log_w, valid, ring_m, ring_h, ring_u, nlev: int, t0: int) -> torch.Tensor:
    """Decode tokens t0 .. t0+T-1 in one launch; contract of ``weird_scan.pytorch.extend``.

    a, v: (B, T, D) in the state dtype; valid: (B, T) bool or None; ring_*:
    (2^nlev - 1, B, D) contiguous.  Returns O (B, T, D), bitwise ``fwd``'s outputs.
    """
    B, T, D = a.shape
    out, state, neg, block_d = _decode_setup(a, log_w)
    if out.numel() == 0:
        return out
    mask_arg = a if valid is None else valid.contiguous()
    with _device(a):
        _extend_kernel[(triton.cdiv(D, block_d), B)](
            a, v, mask_arg, log_w, ring_m, ring_h, ring_u, out, a.stride(0), a.stride(1),
            v.stride(0), v.stride(1), B, T, D, nlev, t0, LEVELS_PER_PASS,
            HAS_MASK=valid is not None, BLOCK_D=block_d, STATE=state, NEG=neg, num_warps=4)
    return out
