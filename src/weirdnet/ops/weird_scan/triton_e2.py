"""Backend ``"triton-e2"`` of ``weird_scan``: exponent-aligned tiles, fewer passes (issue 73).

Same contracts as ``weird_scan.triton`` (``fwd``, ``bwd``, ``extend``); opt-in by name until
a GPU record shows it faster than ``"triton"`` at every length.  docs/kernels.md has the
byte and launch counts.

State.  ``(m, h, u)`` with ``H = 2^m h`` and ``U = 2^m u``: ``m`` is an integer (held in the
float state dtype) and every rescale multiplies by an exact power of two built from the
exponent bits (:func:`_pow2`), never by ``exp``.  A token (A, V) enters as
``(floor(t), V f, f)`` with ``t = A log2(e)`` and ``f = 2^(t - floor t)``; the level weight
``W_k = e^(log_w[k])`` is split the same way into ``g_k 2^(n_k)`` (:func:`_split`).

Path A (exact running max, every program can take it).  A level merges partner
``(m_p + n, h_p, u_p)`` into ``(m, h, u)``: ``M = max(m, m_p + n)``,
``h' = fma(h_p, g 2^(m_p + n - M), h 2^(m - M))`` and the same for ``u``.

Path B (FMA levels).  A program whose window passes :func:`_b_plan` rescales its state
once to one exponent ``E`` per column (``h~ = h 2^(m - E)``) and runs each level as
``h~ += W h~_p; u~ += W u~_p``: two FMAs, no max, no exp.  Scaling by a power of two
commutes with rounding while no value is subnormal or overflows, so B's numbers are A's
times ``2^(M - E)`` bit for bit; the plan proves that bound for the inputs (spread of m,
magnitudes, W normal) and the level loop checks the one thing it cannot bound in advance,
cancellation in ``h`` (a nonzero ``|h~|`` below ``2^(-100 - min(0, n_min))``, fp32).  A
segment whose check fails is run again with A from its start state (kept in registers).
Both paths leave a segment through the same representation-free form below, so the choice
changes no output bit: causality, batch invariance and decoding are those of path A.

Form points.  After the levels before each *form point* ``j`` (``form_points``: 5, 7, 9,
then every 9, fixed whatever the length) every state takes the form
``(log2 U, O) = ((m + e) + log2 fr, h / u)`` with ``(fr, e) = frexp(u)`` (the same bits from
A's and B's representations) and re-enters as a token.  A kernel boundary is always a form
point, so the fp32 intermediate between passes is exactly this form, and an in-register
form point does the same arithmetic: the pass structure (which depends on L) changes no
bit.  The output of position p is ``h / u`` at the first form point ``j`` with
``p < 2^j`` (every level from j on is a no-op for p), or at the end: it does not depend
on L either, which makes decoding (:func:`extend`) bitwise equal to the full pass.

Passes (:func:`plan`).  Up to ``ONE_PASS_LEVELS`` (10, L <= 1K) levels: one kernel holding
whole columns.  Beyond: a last, whole-column pass over the levels from the lowest form
point ``c`` with ``nlev - c <= COARSE_LEVELS`` (columns of at most 512 rows of ``2^c``
residues, no halo), after fine passes over levels ``0 .. c - 1`` on tiles with a halo of
``2^nl`` rows.  Each pass is one launch over every batch row, channel block and tile (grid
``(tiles x column blocks, B)``), causal and anti-causal channels together (a column from
``n_causal`` on reads and writes position ``L - 1 - p``): one launch up to L = 1K, two up
to 256K, nothing on the host between them (no channel chunks, no sync).  The fp32
intermediate between two passes is held whole, two (B, L, D) tensors of the state dtype.

Shifts are ``tl.gather`` along the window rows.  A program's window is WIN rows of
BLOCK_R x BLOCK_D columns (16 columns by default), and Triton lays a gather out so that
the gathered axis lies within one warp: the whole window of a column is in one warp's
registers, and the gather compiles to warp shuffles, with no ``bar.sync`` and no shared
memory inside the level loops (sm_90 PTX, ``weirdnet bench scan-cost``).  Its cost is one
``shfl.sync`` and one select per row a thread holds, WIN / 32, for each gathered tensor and
element: 8 at WIN = 256, 16 at 512.  The forms of issue 73 that cost one shuffle (below
32 rows) or none (register renaming from 32 rows up) are not built: a (WIN / 32, 32,
columns) view for the shifts of 32 rows and more compiled to one shuffle per element, but
made Triton convert layouts (bar.sync, shared memory) inside the other level loops, and
raised compile time from 2-4 s to 23-58 s (docs/kernels.md).

Backward: ``weird_scan.triton_e2_backward`` (its module docstring has the method), the
exact gradient of the same function to float32 accuracy (not the derivative of this
forward's rounding): fixed-scale FMA levels (path B) per program, with a running-max
fallback (path A) where the spread test fails; the adjoint goes between passes as
``(P, Q) = U_in S``; d log_w as per-program float32 partial sums added in float64, one
reduction; one launch per pass and direction (per channel chunk), no host sync.
"""
from __future__ import annotations

import copy

import torch
import triton
import triton.language as tl

from . import triton_e2_backward as _backward
from .triton import (  # shared helpers of the "triton" backend (not its kernels)
    INTERPRETED,
    _bench_entry,
    _decode_columns,
    _decode_inputs,
    _decode_setup,
    _device,
    _geometry,
    _load_doc,
    _pass_inputs,
    _same_doc,
    _state,
)
from .triton_e2_arith import _EXACT, _div, _level_weight, _max2, _min2, _token

__all__ = ["fwd", "bwd", "extend", "plan", "form_points", "INTERPRETED"]

FORM_LEVELS = (5, 7, 9)  # form points; above the last one, every FORM_STEP levels
FORM_STEP = 9
ONE_PASS_LEVELS = 10  # up to this many levels (L <= 1K): one kernel, whole columns
COARSE_LEVELS = 9  # at most this many levels in the last, whole-column pass
FINE_LEVELS = 9  # at most this many levels in a pass with a halo
FINE_WINDOW = 256  # rows of a halo pass's window (at least twice the halo)
TILE_ELEMENTS = 4096  # target rows x columns of one state tensor in a program
MAX_BLOCK_D = 16
NUM_WARPS = 8
PATH_B = True  # False: every program takes path A (the property tests compare the two)


# ----------------------------------------------------------------------------------------
# Arithmetic helpers
# ----------------------------------------------------------------------------------------


@triton.jit
def _colmax(x):
    """(COLS,) maximum over the rows of a (WIN, COLS) tensor."""
    return tl.reduce(x, 0, _max2)


@triton.jit
def _colmin(x):
    return tl.reduce(x, 0, _min2)


@triton.jit
def _pow2(e, F64: tl.constexpr):
    """2^e exactly for integer-valued e <= 127 (1023 in float64); 0 below the normal range
    (and for NaN)."""
    if F64:
        keep = e >= -1022.0
        ei = tl.where(keep, e, 0.0).to(tl.int64)
        p = ((ei + 1023) << 52).to(tl.float64, bitcast=True)
    else:
        keep = e >= -126.0
        ei = tl.where(keep, e, 0.0).to(tl.int32)
        p = ((ei + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(keep, p, 0.0)


@triton.jit
def _form(m, h, u, F64: tl.constexpr):
    """(log2 U, O) of a state, the same bits for every power-of-two representation of it:
    ``(m + e) + log2(fr)`` with ``u = fr 2^e``, fr in [0.5, 1).  U = 0 gives (-inf, h)."""
    o = tl.where(u == 0, h, _div(h, u))
    if F64:
        bits = u.to(tl.int64, bitcast=True)
        e = ((bits >> 52) & 0x7FF) - 1022
        fr = ((bits & 0xFFFFFFFFFFFFF) | (1022 << 52)).to(tl.float64, bitcast=True)
        normal = (u >= 2.2250738585072014e-308) & (u < float("inf"))
    else:
        bits = u.to(tl.int32, bitcast=True)
        e = ((bits >> 23) & 0xFF) - 126
        fr = ((bits & 0x7FFFFF) | (126 << 23)).to(tl.float32, bitcast=True)
        normal = (u >= 1.1754943508222875e-38) & (u < float("inf"))
    lu = tl.where(normal, (m + e.to(m.dtype)) + tl.log2(fr), m + tl.log2(u))
    return lu, o


@triton.jit
def _partner(w, row, s, seg, WIN: tl.constexpr, COLS: tl.constexpr, HAS_DOC: tl.constexpr):
    """(idx, has): the row each row takes at shift s, and whether it has one (in the
    sequence and, with documents, in the same document)."""
    idx = tl.broadcast_to(tl.maximum(w - s, 0)[:, None], (WIN, COLS))
    has = _same_doc(((w >= s) & (row >= s))[:, None], seg, idx, HAS_DOC)
    return idx, has


@triton.jit
def _levels_a(m, h, u, seg, logw_ptr, D, lo, k0, k1, d, dmask, w, row,
              WIN: tl.constexpr, COLS: tl.constexpr, STATE: tl.constexpr,
              HAS_DOC: tl.constexpr, F64: tl.constexpr):
    """Path A: levels lo+k0 .. lo+k1-1, exact power-of-two running max."""
    for k in range(k0, k1):
        n, g = _level_weight(logw_ptr, D, lo + k, d, dmask, STATE)
        idx, has = _partner(w, row, 1 << k, seg, WIN, COLS, HAS_DOC)
        mq = tl.gather(m, idx, 0) + n[None, :]
        hp = tl.gather(h, idx, 0)
        up = tl.gather(u, idx, 0)
        big = tl.where(m >= mq, m, mq)
        ss = _pow2(m - big, F64)
        sp = g[None, :] * _pow2(mq - big, F64)
        h2 = tl.fma(hp, sp, h * ss)
        u2 = tl.fma(up, sp, u * ss)
        m = tl.where(has, big, m)
        h = tl.where(has, h2, h)
        u = tl.where(has, u2, u)
    return m, h, u


@triton.jit
def _levels_b(h, u, tiny, ok, seg, logw_ptr, D, lo, k0, k1, d, dmask, w, row,
              WIN: tl.constexpr, COLS: tl.constexpr, STATE: tl.constexpr,
              HAS_DOC: tl.constexpr, F64: tl.constexpr):
    """Path B: the same levels as two FMAs on one exponent per column.  Returns (h, u, bad):
    bad when a nonzero |h| fell below ``tiny`` (then A must run the segment)."""
    badv = ok & (h != 0) & (tl.abs(h) < tiny[None, :])
    for k in range(k0, k1):
        n, g = _level_weight(logw_ptr, D, lo + k, d, dmask, STATE)
        wk = (g * _pow2(n, F64))[None, :]
        idx, has = _partner(w, row, 1 << k, seg, WIN, COLS, HAS_DOC)
        h = tl.where(has, tl.fma(tl.gather(h, idx, 0), wk, h), h)
        u = tl.where(has, tl.fma(tl.gather(u, idx, 0), wk, u), u)
        badv = badv | ((h != 0) & (tl.abs(h) < tiny[None, :]))
    bad = tl.reduce(tl.reduce((badv & ok).to(tl.int32), 0, _max2), 0, _max2)
    return h, u, bad


@triton.jit
def _b_plan(m, h, u, ok, logw_ptr, D, lo, k0, k1, d, dmask, STATE: tl.constexpr,
            NEG: tl.constexpr, F64: tl.constexpr):
    """Whether path B gives path A's bits on levels lo+k0 .. lo+k1-1 of this window, and
    its per-column exponent E and cancellation floor ``tiny``.

    Sufficient conditions (float32; float64 with its own limits): every element in the
    sequence is a real finite state (no padding, zero weight, NaN or inf; u >= 1/2); every
    W_k normal; E = max m + sum max(n_k, 0) bounds every running max, and min m >= E - 99
    keeps every u~ >= 2^-100 (a subnormal product beside it is below a quarter ulp in both
    paths); max|h| max u / min u 3^levels < 2^24 bounds |h| below 2^26 in both, so a partner
    product A flushes (scale below 2^-126) is zero in B as well, given that every nonzero
    |h~| >= tiny = 2^(-100 - min(0, n_min)), which _levels_b checks level by level.
    """
    if F64:
        emin = 1022.0
        margin = 56.0
    else:
        emin = 126.0
        margin = 27.0
    inf = float("inf")
    fine = (~ok) | ((m > NEG * 0.1) & (m < inf) & (tl.abs(h) < inf) & (u >= 0.5)
                    & (u < inf))
    mx = _colmax(tl.where(ok, m, -inf))
    mn = _colmin(tl.where(ok, m, inf))
    hmax = _colmax(tl.where(ok, tl.abs(h), 0.0))
    umax = _colmax(tl.where(ok, u, 1.0))
    umin = _colmin(tl.where(ok, u, 1.0))
    nsum = tl.full(mx.shape, 0.0, STATE)
    nmin = tl.full(mx.shape, 0.0, STATE)
    wfine = mx == mx
    grow = 1.0
    for k in range(k0, k1):
        n, g = _level_weight(logw_ptr, D, lo + k, d, dmask, STATE)
        nsum += tl.maximum(n, 0.0)
        nmin = tl.minimum(nmin, n)
        wfine = wfine & (n >= -emin) & (n <= emin)
        grow = grow * 3.0
    live = mx > -inf
    e = tl.where(live, mx + nsum, 0.0)
    col = ~live | ((mn >= e - (emin - margin)) & wfine & (hmax * (umax / umin) * grow < 16777216.0))
    tiny = _pow2(-(emin - margin + 1.0) - nmin, F64)
    use = tl.reduce(tl.reduce(fine.to(tl.int32), 0, _min2), 0, _min2) \
        * tl.reduce(col.to(tl.int32), 0, _min2)
    return use > 0, e, tiny


@triton.jit
def _segment(m, h, u, ok, seg, logw_ptr, D, lo, k0, k1, d, dmask, w, row,
             TRY_B: tl.constexpr, WIN: tl.constexpr, COLS: tl.constexpr,
             STATE: tl.constexpr, NEG: tl.constexpr, HAS_DOC: tl.constexpr,
             F64: tl.constexpr):
    """Levels lo+k0 .. lo+k1-1 (between two form points) by path B where it gives A's bits,
    else A.  Returns (m, h, u, took_b): with B, m is the column exponent E broadcast."""
    took = tl.full((), 0, tl.int32)
    if TRY_B:
        use, e, tiny = _b_plan(m, h, u, ok, logw_ptr, D, lo, k0, k1, d, dmask, STATE, NEG,
                               F64)
        if use:
            scale = _pow2(m - e[None, :], F64)
            hb, ub, bad = _levels_b(h * scale, u * scale, tiny, ok, seg, logw_ptr, D, lo,
                                    k0, k1, d, dmask, w, row, WIN, COLS, STATE, HAS_DOC, F64)
            if bad == 0:
                m = tl.broadcast_to(e[None, :], (WIN, COLS))
                h = hb
                u = ub
                took = took + 1
    if took == 0:
        m, h, u = _levels_a(m, h, u, seg, logw_ptr, D, lo, k0, k1, d, dmask, w, row, WIN,
                            COLS, STATE, HAS_DOC, F64)
    return m, h, u, took


# ----------------------------------------------------------------------------------------
# Forward pass
# ----------------------------------------------------------------------------------------


@triton.jit
def _e2_pass_kernel(x1_ptr, x2_ptr, mask_ptr, doc_ptr, logw_ptr, y1_ptr, y2_ptr, out_ptr,
                    stat_ptr, s1b, s1l, s2b, s2l, L, D, n_causal, lo, nl, cuts, band0,
                    nres, nq, tile, halo,
                    WIN: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr,
                    FIRST: tl.constexpr, LAST: tl.constexpr,
                    HAS_MASK: tl.constexpr, HAS_DOC: tl.constexpr, STATE: tl.constexpr,
                    NEG: tl.constexpr, TRY_B: tl.constexpr, STATS: tl.constexpr,
                    F64: tl.constexpr):
    """One pass: levels lo .. lo+nl-1 over rows of ``nres`` residues, windows of WIN rows
    whose first ``halo`` rows are halo (0 in a whole-column pass).

    Input (x1, x2): (A, V) when FIRST, else the previous pass's (log2 U, O).  ``cuts``: bit
    i set when lo+i is a form point (0 < i < nl).  Writes O (``out``) of every position at
    its first form point past it (from ``band0``, the first position not yet written) and,
    when LAST, of the rest; else (log2 U, O) at the pass's end (a form point) into y1, y2.
    stat: (programs, 2) int32, segments run by path B and segments, when STATS.
    Grid: (nq * column blocks, B): every channel in one launch, those from ``n_causal``
    on anti-causal (their positions mirrored, L - 1 - p, when loaded and stored).
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    q = pid % nq
    w, row, d, p, ok = _geometry(q * tile - halo, pid // nq, L, nres, 0, D, WIN, BLOCK_R,
                                 BLOCK_D, False)
    COLS: tl.constexpr = BLOCK_R * BLOCK_D
    dmask = d < D
    # p: the position in scan order; pm: in memory (channels from n_causal on run backwards)
    pm = tl.where((d >= n_causal)[None, :], L - 1 - p, p)
    x1, x2, real = _pass_inputs(x1_ptr, x2_ptr, mask_ptr, b, pm, d, ok, L, s1b, s1l, s2b,
                                s2l, FIRST, HAS_MASK, STATE)
    m, h, u = _token(x1, x2, real, FIRST, STATE, NEG)
    seg = _load_doc(doc_ptr, b, pm, ok, L, HAS_DOC)
    offs = (b * L + pm) * D + d[None, :]
    mine = ok & (w >= halo)[:, None]  # the rows this program writes
    band_lo = band0.to(tl.int64)
    took = tl.full((), 0, tl.int32)
    nseg = tl.full((), 0, tl.int32)
    k0 = tl.full((), 0, tl.int32)
    while k0 < nl:
        if k0 > 0:  # form point lo + k0: outputs of positions before 2^(lo+k0), new form
            top = tl.full((), 1, tl.int64) << (lo + k0)
            tl.store(out_ptr + offs, _div(h, u).to(out_ptr.dtype.element_ty),
                     mask=mine & (p >= band_lo) & (p < top))
            band_lo = top
            lu, o = _form(m, h, u, F64)
            m, h, u = _token(lu, o, ok, False, STATE, NEG)
        k1 = k0 + 1
        while (k1 < nl) & (((cuts >> k1) & 1) == 0):
            k1 += 1
        m, h, u, t = _segment(m, h, u, ok, seg, logw_ptr, D, lo, k0, k1, d, dmask, w, row,
                              TRY_B, WIN, COLS, STATE, NEG, HAS_DOC, F64)
        took += t
        nseg += 1
        k0 = k1
    if LAST:
        tl.store(out_ptr + offs, _div(h, u).to(out_ptr.dtype.element_ty),
                 mask=mine & (p >= band_lo))
    else:
        top = tl.full((), 1, tl.int64) << (lo + nl)
        tl.store(out_ptr + offs, _div(h, u).to(out_ptr.dtype.element_ty),
                 mask=mine & (p >= band_lo) & (p < top))
        lu, o = _form(m, h, u, F64)
        tl.store(y1_ptr + offs, lu, mask=mine)
        tl.store(y2_ptr + offs, o, mask=mine)
    if STATS:
        slot = stat_ptr + (b * tl.num_programs(0) + pid) * 2
        tl.store(slot, took)
        tl.store(slot + 1, nseg)


# ----------------------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------------------


@triton.jit
def _e2_extend_kernel(a_ptr, v_ptr, valid_ptr, logw_ptr, rm_ptr, rh_ptr, ru_ptr, out_ptr,
                      sab, sat, svb, svt, B, T, D, nlev, t0, points,
                      HAS_MASK: tl.constexpr, BLOCK_D: tl.constexpr, STATE: tl.constexpr,
                      NEG: tl.constexpr, F64: tl.constexpr):
    """Tokens t0 .. t0+T-1 of one batch row and channel block, in order, by path A.

    Ring rows as in ``weird_scan.pytorch.extend`` (level k: rows [2^k - 1, 2^(k+1) - 1),
    row (2^k - 1) + (t mod 2^k) holding position t's state before level k), in this
    backend's form: m an integer, H = 2^m h.  ``points``: bit j set when j is a form point.
    """
    b, d, dm = _decode_columns(D, BLOCK_D)
    for tt in range(T):
        t = t0 + tt
        x1, x2, real = _decode_inputs(a_ptr, v_ptr, valid_ptr, b, tt, d, dm, sab, sat, svb,
                                      svt, T, HAS_MASK, STATE)
        m, h, u = _token(x1, x2, real, True, STATE, NEG)
        o_out = _div(h, u)
        done = tl.full((), 0, tl.int32)
        for k in range(nlev):
            s = 1 << k
            if ((points >> k) & 1) != 0:
                if done == 0:
                    o_out = _div(h, u)
                    if t < s:
                        done = 1
                lu, o = _form(m, h, u, F64)
                m, h, u = _token(lu, o, dm, False, STATE, NEG)
            offs = (((s - 1) + (t & (s - 1))) * B + b) * D + d
            mp = tl.load(rm_ptr + offs, mask=dm, other=0)
            hp = tl.load(rh_ptr + offs, mask=dm, other=0)
            up = tl.load(ru_ptr + offs, mask=dm, other=1)
            tl.store(rm_ptr + offs, m, mask=dm)
            tl.store(rh_ptr + offs, h, mask=dm)
            tl.store(ru_ptr + offs, u, mask=dm)
            if t >= s:
                n, g = _level_weight(logw_ptr, D, k, d, dm, STATE)
                mq = mp + n
                big = tl.where(m >= mq, m, mq)
                ss = _pow2(m - big, F64)
                sp = g * _pow2(mq - big, F64)
                h = tl.fma(hp, sp, h * ss)
                u = tl.fma(up, sp, u * ss)
                m = big
        if done == 0:
            o_out = _div(h, u)
        tl.store(out_ptr + (b * T + tt) * D + d, o_out.to(out_ptr.dtype.element_ty), mask=dm)


# ----------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------


def form_points(nlev: int) -> list[int]:
    """The form points below ``nlev``: ``FORM_LEVELS``, then every ``FORM_STEP`` levels."""
    points = set(j for j in FORM_LEVELS if j > 0)
    j = max(FORM_LEVELS)
    while j + FORM_STEP < nlev:
        j += FORM_STEP
        points.add(j)
    return sorted(p for p in points if p < nlev)


class _E2Pass:
    """Levels [lo, hi) along rows of ``nres = 2^lo`` residues; whole columns when ``last``,
    else windows of ``win`` rows, the first ``halo = 2^(hi - lo)`` of them halo."""

    def __init__(self, lo: int, hi: int, length: int, last: bool, points: list[int]):
        self.lo, self.nl, self.nres, self.last = lo, hi - lo, 1 << lo, last
        rows = triton.cdiv(length, self.nres)
        self.cuts = sum(1 << (p - lo) for p in points if lo < p < hi)
        before = [p for p in points if p <= lo]
        self.band0 = (1 << before[-1]) if before else 0
        if last:
            self.halo, self.win = 0, triton.next_power_of_2(max(rows, 1))
        else:
            self.halo = 1 << self.nl
            self.win = min(max(2 * self.halo, FINE_WINDOW),
                           triton.next_power_of_2(rows + self.halo))
        self.tile = self.win - self.halo
        self.nq = triton.cdiv(rows, self.tile)

    def blocks(self, width: int) -> tuple[int, int]:
        """(BLOCK_R, BLOCK_D) for a channel range of ``width``."""
        block_d = min(MAX_BLOCK_D, triton.next_power_of_2(width))
        fill = max(1, TILE_ELEMENTS // (self.win * block_d))
        return min(triton.next_power_of_2(self.nres), fill), block_d


def plan(length: int, nlev: int) -> list[_E2Pass]:
    """The passes of a scan over ``length`` positions with ``nlev`` levels."""
    points = form_points(nlev)
    if nlev <= ONE_PASS_LEVELS:
        return [_E2Pass(0, nlev, length, True, points)]
    coarse = min(p for p in points if nlev - p <= COARSE_LEVELS)
    groups, lo = [], 0
    while lo < coarse:
        ends = [p for p in points if lo < p <= min(coarse, lo + FINE_LEVELS)]
        if not ends:
            raise ValueError(f"no form point within {FINE_LEVELS} levels above level {lo}")
        groups.append((lo, ends[-1]))
        lo = ends[-1]
    passes = [_E2Pass(a, z, length, False, points) for a, z in groups]
    return passes + [_E2Pass(coarse, nlev, length, True, points)]


def _launch(ps: _E2Pass, x, y, out, mask, doc, log_w, n_causal: int, first: bool,
            stats: list | None) -> None:
    """Pass ``ps`` over every channel in one launch (causal and anti-causal alike)."""
    x1, x2 = x
    B, L, D = x1.shape
    block_r, block_d = ps.blocks(D)
    n_cb = triton.cdiv(ps.nres, block_r) * triton.cdiv(D, block_d)
    state, neg = _state(log_w.dtype)
    grid = (ps.nq * n_cb, B)
    stat = torch.zeros((B, grid[0], 2), dtype=torch.int32, device=x1.device) \
        if stats is not None else out
    _e2_pass_kernel[grid](
        x1, x2, x1 if mask is None else mask, x1 if doc is None else doc, log_w, y[0], y[1],
        out, stat, x1.stride(0), x1.stride(1), x2.stride(0), x2.stride(1), L, D, n_causal,
        ps.lo, ps.nl, ps.cuts, ps.band0, ps.nres, ps.nq, ps.tile, ps.halo,
        WIN=ps.win, BLOCK_R=block_r, BLOCK_D=block_d, FIRST=first, LAST=ps.last,
        HAS_MASK=first and mask is not None, HAS_DOC=doc is not None, STATE=state, NEG=neg,
        TRY_B=PATH_B, STATS=stats is not None, F64=log_w.dtype == torch.float64,
        num_warps=NUM_WARPS, **_EXACT)
    if stats is not None:
        stats.append((ps.lo, stat))


def fwd(a, v, log_w, mask, doc, n_causal: int, nlev: int, stats=None) -> torch.Tensor:
    """O = H / U in ``a``'s dtype; the contract of ``weird_scan.triton.fwd``.

    One launch per pass (:func:`plan`: one up to L = 1K, two up to 256K), each over every
    batch row, channel and tile, with nothing on the host between them: no channel
    chunks, no host op, no sync.  The fp32 intermediate (log2 U, O) between two passes is
    held whole: two (B, L, D) tensors of the state dtype (at B = 8, D = 1024, float32:
    1 GiB at L = 16K, 16 GiB at 256K), freed when the next pass has run.  ``stats``: a
    list that receives each pass's path counts (:func:`path_counts`).
    """
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    if out.numel() == 0:
        return out
    mask = None if mask is None else mask.contiguous()
    passes = plan(a.shape[1], nlev)
    x = (a, v)
    with _device(a):
        for i, ps in enumerate(passes):
            y = (out, out) if ps.last else tuple(
                torch.empty(a.shape, dtype=log_w.dtype, device=a.device) for _ in range(2))
            _launch(ps, x, y, out, mask, doc, log_w, n_causal, i == 0, stats)
            x = y
    return out


def bench_passes(a, v, log_w, nlev: int, out: torch.Tensor | None = None
                 ) -> list[tuple[str, object, object]]:
    """Measuring hook (``weirdnet bench gpu``, issue 73): each pass of :func:`fwd` alone,
    as ``weird_scan.triton.bench_passes``.

    a, v: (B, L, D) causal, no mask or documents; log_w: (>= nlev, D) in the state dtype.
    Runs the forward once, pass by pass, keeping each pass's input, and returns per pass
    (label, run, run_without_levels): ``run()`` launches that pass on its input (one
    launch over every channel, as :func:`fwd`), ``run_without_levels()`` the same launch
    with no level and no form point (the loads, the token states and the stores alone).
    ``out``: where the last pass writes O (a new tensor if None).
    """
    B, L, D = a.shape
    out = torch.empty(a.shape, dtype=a.dtype, device=a.device) if out is None else out
    passes, x, runs = plan(L, nlev), (a, v), []
    for i, ps in enumerate(passes):
        y = (out, out) if ps.last else tuple(
            torch.empty(a.shape, dtype=log_w.dtype, device=a.device) for _ in range(2))
        empty = copy.copy(ps)
        empty.nl, empty.cuts = 0, 0  # same tiles and windows, no level

        def launch(p, x=x, y=y, first=i == 0):
            with _device(a):
                _launch(p, x, y, out, None, None, log_w, D, first, None)

        runs.append(_bench_entry(i, len(passes), ps, empty, launch))
        x = y
    return runs


def path_counts(a, v, log_w, mask=None, doc=None, n_causal: int | None = None):
    """(O, counts): the forward and, per pass (keyed by its first level), the segments its
    programs ran by path B and in all, as ``{lo: (b_segments, segments)}``: how often
    path A is taken."""
    B, L, D = a.shape
    nlev = max(0, L - 1).bit_length()
    stats: list = []
    a_, v_ = (x if x.stride(-1) == 1 else x.contiguous() for x in (a, v))
    out = fwd(a_, v_, log_w.contiguous(), mask, doc, D if n_causal is None else n_causal, nlev,
              stats)
    counts: dict[int, tuple[int, int]] = {}
    for lo, stat in stats:
        took, segs = counts.get(lo, (0, 0))
        counts[lo] = (took + int(stat[..., 0].sum()), segs + int(stat[..., 1].sum()))
    return out, counts


def bwd(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int):
    """Gradients (dA, dV, dlog_w): the fixed-scale backward of
    ``weird_scan.triton_e2_backward`` (see the module docstring)."""
    return _backward.bwd(a, v, log_w, mask, doc, grad, n_causal, nlev)


def extend(a, v, log_w, valid, ring_m, ring_h, ring_u, nlev: int, t0: int) -> torch.Tensor:
    """Decode tokens t0 .. t0+T-1 in one launch, bitwise :func:`fwd`'s outputs.

    a, v: (B, T, D) in the state dtype; valid: (B, T) bool or None; ring_*:
    (2^nlev - 1, B, D) contiguous, in this backend's form (m an integer; a fresh or reset
    ring's (NEG, 0, 1) rows are that form too).
    """
    B, T, D = a.shape
    out, state, neg, block_d = _decode_setup(a, log_w)
    if out.numel() == 0:
        return out
    points = sum(1 << p for p in form_points(nlev))
    with _device(a):
        _e2_extend_kernel[(triton.cdiv(D, block_d), B)](
            a, v, a if valid is None else valid.contiguous(), log_w, ring_m, ring_h, ring_u,
            out, a.stride(0), a.stride(1), v.stride(0), v.stride(1), B, T, D, nlev, t0,
            points, HAS_MASK=valid is not None, BLOCK_D=block_d, STATE=state, NEG=neg,
            F64=log_w.dtype == torch.float64, num_warps=4, **_EXACT)
    return out
