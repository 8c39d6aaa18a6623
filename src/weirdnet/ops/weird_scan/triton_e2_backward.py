"""The backward of backend ``"triton-e2"`` (issue 73, part 4): fixed-scale FMA levels.

``bwd`` computes (dA, dV, d log_w) of ``sum(G * O)``, the exact gradient of the scan's
function (matched to float32 accuracy against the float64 reference, like every
backend's backward; it is not the derivative of the forward's rounding).

The adjoint.  Per channel, with ``X_j = e^(A_j) (V_j, 1)``, ``(H, U) = P X`` (the product
of the levels ``I + W_k Z_k``, Z_k the shift by 2^k) and ``O = H / U``:
``dL/dH_i = G_i / U_i`` and ``dL/dU_i = -G_i O_i / U_i``, so with
``T = (G / U, G O / U)`` the adjoint is ``S = P^T T`` (the same levels, partner p + 2^k),
``dV_j = e^(A_j) S1_j``, ``dA_j = V_j dV_j - e^(A_j) S2_j`` and
``d log_w[k] = W_k sum_p (F_k,h[p] S_k+1,1[p + 2^k] - F_k,u[p] S_k+1,2[p + 2^k])``, F_k the
forward state before level k and S_k+1 the adjoint after the levels above k.

Passes (:func:`plan`).  Up to ``triton_e2.ONE_PASS_LEVELS`` levels, one kernel on whole
columns.  Beyond: the forward's fine passes are recomputed (``MODE = 0``, each writes the
fp32 intermediate ``(log2 U, O)`` at its end, as the forward does; path B where the plan
allows, else A: the intermediate need not be the forward's bits); the last pass (whole
columns of ``2^lo`` residues, at most ``triton_e2.COARSE_LEVELS`` levels, no halo) turns G
into T and runs its levels down; then each fine pass runs its levels down on windows
with a halo before (the forward state) and after (the adjoint).  Between passes the
adjoint travels as ``(P, Q) = U_in S`` per element, U_in the pass input's U: scale-free
(``|P| <= sum |G|`` since every term's ratio ``a U_in / U_i`` is at most 1), so two fp32
numbers with no exponent.  The top pass writes it over its input in place.

Fixed-scale levels (path B).  A program whose window passes :func:`_plan_b` takes one
power-of-two exponent ``E`` per column (``E = max m + sum_k max(n_k, 0)``) and works with
``X~ = X 2^-E`` and ``S~ = S 2^E``: each forward level is ``h += W h_p; u += W u_p`` and each
adjoint level ``s1 += W s1_q; s2 += W s2_q``, two FMAs, no max, no exp; the scales cancel in
the d log_w term (``F~ S~ = F S``) and in ``dV = X~u S~1``.  The plan requires real finite
states (no padding, zero weight, NaN or inf), a spread ``max m - min m + sum max(n_k, 0)``
of at most 96 bits (fp32; 960 in fp64: every own term ``u~ >= 2^-97``, so a term that
underflows is below 2^-29 of the sum it joins), ``|n_k| <= 100``, and a bound on the
adjoint's growth from the magnitudes of h and of the adjoint input (G, or P and Q) below
the overflow (:func:`_plan_b`).  Otherwise the program takes path A: the
exact running max in powers of two (per element ``(m, h, u)`` forward, ``(bm, b1, b2)``
adjoint with ``S = 2^bm b``), which also carries NaN and padding as the reference says.
Both compute the same gradient up to float32 rounding: the choice is per program and
needs no host sync.

The forward state before level k is recomputed from the window's input for every k
(``nl (nl - 1) / 2`` level steps in registers) instead of being stored: nothing but the
intermediates and the adjoint goes through memory.

d log_w.  Each program writes, per residue column, its float32 sum over its rows of each
of its levels' terms (source rows in its tile) into its own slots of one buffer (levels,
slots, D), one slot per residue of its block, and zeroes the slots its pass does not use
(a sum over the rows alone stays within a warp: no barrier in the level loop); the host
sums the slots in float64, one reduction, in a fixed order:
deterministic, no atomics.  A NaN output (or NaN adjoint input) adds NaN to every partial
of its program: the reference's poisoning of the channel's d log_w.

Launches per direction: 1 kernel + 1 sum up to ``ONE_PASS_LEVELS`` levels; 3 kernels + 1
sum with one fine pass (L <= 2^16 at the defaults); the channel chunks of
``weird_scan.triton.channel_chunks`` (for memory, as the forward) repeat the kernels only.
No host sync.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import triton as _old
from .pytorch import _parts
from .triton import _device, _geometry, _load_doc, _pass_inputs, _same_doc, _state
from .triton_e2_arith import _EXACT, _div, _level_weight, _max2, _min2, _token

__all__ = ["bwd", "plan", "path_counts"]


def _e2():
    """``weird_scan.triton_e2`` (which imports this module): its pass and tile settings,
    read at each call (the tests set them)."""
    import importlib

    return importlib.import_module(__package__ + ".triton_e2")

FINE_LEVELS = 7  # at most this many levels in a backward pass with halos (2^7 rows each side)
WINDOW = 256  # rows of a halo pass's window (at least four times the halo)
PATH_B = True  # False: every program takes path A (the tests compare the two)

_SUM = tl.standard._sum_combine


# ----------------------------------------------------------------------------------------
# Arithmetic helpers
# ----------------------------------------------------------------------------------------


@triton.jit
def _pow2(e, F64: tl.constexpr):
    """2^e for integer-valued e in the normal range; 0 below it and for NaN."""
    if F64:
        keep = (e >= -1022.0) & (e <= 1023.0)
        ei = tl.where(keep, e, 0.0).to(tl.int64)
        p = ((ei + 1023) << 52).to(tl.float64, bitcast=True)
    else:
        keep = (e >= -126.0) & (e <= 127.0)
        ei = tl.where(keep, e, 0.0).to(tl.int32)
        p = ((ei + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(keep, p, 0.0)


@triton.jit
def _pow2w(e, F64: tl.constexpr):
    """2^e over twice the exponent range (two factors); 0 far below it."""
    if F64:
        top = 1023.0
        bot = -1022.0
    else:
        top = 127.0
        bot = -126.0
    e1 = tl.minimum(tl.maximum(e, bot), top)
    return _pow2(e1, F64) * _pow2(e - e1, F64)


@triton.jit
def _form(m, h, u, F64: tl.constexpr):
    """(log2 U, O) of a state; U = 0 gives (-inf, h)."""
    o = tl.where(u == 0, h, _div(h, u))
    lu = m + tl.log2(u)
    return lu, o


@triton.jit
def _rowsum(x):
    """(1, COLS) sum over the rows of a (WIN, COLS) tensor, kept in its layout (stored as
    it is: a (COLS,) result would go through shared memory to a store layout)."""
    return tl.reduce(x, 0, _SUM, keep_dims=True)


@triton.jit
def _back(w, row, s, seg, WIN: tl.constexpr, COLS: tl.constexpr, HAS_DOC: tl.constexpr):
    """Forward partner (row - s) of each row, and whether it has one."""
    idx = tl.broadcast_to(tl.maximum(w - s, 0)[:, None], (WIN, COLS))
    has = _same_doc(((w >= s) & (row >= s))[:, None], seg, idx, HAS_DOC)
    return idx, has


@triton.jit
def _ahead(w, s, seg, WIN: tl.constexpr, COLS: tl.constexpr, HAS_DOC: tl.constexpr):
    """Adjoint partner (row + s) of each row, and whether it has one in the window (rows
    past the sequence hold a zero adjoint)."""
    idx = tl.broadcast_to(tl.minimum(w + s, WIN - 1)[:, None], (WIN, COLS))
    has = _same_doc((w + s < WIN)[:, None], seg, idx, HAS_DOC)
    return idx, has


# ----------------------------------------------------------------------------------------
# Level loops
# ----------------------------------------------------------------------------------------


@triton.jit
def _fwd_a(m, h, u, seg, logw_ptr, swk, lo, nk, d, dmask, w, row,
           WIN: tl.constexpr, COLS: tl.constexpr, STATE: tl.constexpr,
           HAS_DOC: tl.constexpr, F64: tl.constexpr):
    """Path A: levels lo .. lo+nk-1, exact power-of-two running max."""
    for k in range(nk):
        n, g = _level_weight(logw_ptr, swk, lo + k, d, dmask, STATE)
        idx, has = _back(w, row, 1 << k, seg, WIN, COLS, HAS_DOC)
        mq = tl.gather(m, idx, 0) + n[None, :]
        big = tl.where(m >= mq, m, mq)
        sp = g[None, :] * _pow2(mq - big, F64)
        ss = _pow2(m - big, F64)
        h2 = tl.fma(tl.gather(h, idx, 0), sp, h * ss)
        u2 = tl.fma(tl.gather(u, idx, 0), sp, u * ss)
        m = tl.where(has, big, m)
        h = tl.where(has, h2, h)
        u = tl.where(has, u2, u)
    return m, h, u


@triton.jit
def _fwd_b(h, u, seg, logw_ptr, swk, lo, nk, d, dmask, w, row,
           WIN: tl.constexpr, COLS: tl.constexpr, STATE: tl.constexpr,
           HAS_DOC: tl.constexpr, F64: tl.constexpr):
    """Path B: the same levels as two FMAs on one exponent per column."""
    for k in range(nk):
        n, g = _level_weight(logw_ptr, swk, lo + k, d, dmask, STATE)
        wk = (g * _pow2(n, F64))[None, :]
        idx, has = _back(w, row, 1 << k, seg, WIN, COLS, HAS_DOC)
        h = tl.where(has, tl.fma(tl.gather(h, idx, 0), wk, h), h)
        u = tl.where(has, tl.fma(tl.gather(u, idx, 0), wk, u), u)
    return h, u


@triton.jit
def _plan_b(m, h, u, ok, t1, t2, logw_ptr, swk, lo, nl, d, dmask, WIN: tl.constexpr,
            STATE: tl.constexpr, NEG: tl.constexpr, F64: tl.constexpr):
    """(use, E): whether this program's window may take path B, and each column's
    exponent.  See the module docstring for the conditions.

    Per column, with s = max m - min m + sum_k max(n_k, 0) (bits): every own term is at
    least 2^(-s - 1) after the scaling, so s <= 96 (fp32; 960 in fp64) keeps a term that
    underflows below 2^-29 of the sum it joins; the adjoint grows to at most
    WIN max|T| (1 + 2 max|h|) 2^(s + 1) (T the adjoint input: G or P, Q; |O| <= 2 max|h|),
    which must stay below 2^124 (2^1020)."""
    if F64:
        spread = 960.0
        ovf = 1020.0
        nlim = 900.0
        hlim = 1e150
    else:
        spread = 96.0
        ovf = 124.0
        nlim = 100.0
        hlim = 1e12
    inf = float("inf")
    fine = (~ok) | ((m > NEG * 0.1) & (m < inf) & (tl.abs(h) < hlim) & (u >= 0.5)
                    & (u < inf) & (tl.abs(t1) < inf) & (tl.abs(t2) < inf))
    mx = tl.reduce(tl.where(ok, m, -inf), 0, _max2)
    mn = tl.reduce(tl.where(ok, m, inf), 0, _min2)
    tmax = tl.reduce(tl.where(ok, tl.maximum(tl.abs(t1), tl.abs(t2)), 0.0), 0, _max2)
    hmax = tl.reduce(tl.where(ok, tl.abs(h), 0.0), 0, _max2)
    nsum = tl.full(mx.shape, 0.0, STATE)
    wfine = mx == mx
    for k in range(nl):
        n, g = _level_weight(logw_ptr, swk, lo + k, d, dmask, STATE)
        nsum += tl.maximum(n, 0.0)
        wfine = wfine & (tl.abs(n) <= nlim)
    live = mx > -inf
    e = tl.where(live, mx + nsum, 0.0)
    bits = (mx + nsum) - mn
    grow = tl.log2(tmax * (1.0 + 2.0 * hmax) + 1e-30) + tl.log2(WIN * 1.0) + 2.0
    col = (~live) | ((bits <= spread) & (bits + grow <= ovf) & wfine)
    use = tl.reduce(tl.reduce(fine.to(tl.int32), 0, _min2), 0, _min2) \
        * tl.reduce(col.to(tl.int32), 0, _min2)
    return use > 0, e


@triton.jit
def _store_parts(part_ptr, spk, sps, lo, nl, first, rr, nslot, slot_n, acc, d, dmask,
                 NL: tl.constexpr):
    """This program's partials of levels lo .. lo+nl-1, ``acc`` (NL, COLS) (row kk: level
    lo + kk), at the slots first + rr (rr: each column's residue in the block), and zeros
    at the slots first + rr + j slot_n (j >= 1) below nslot: every slot of each level is
    written exactly once.  After the level loop: its layout change goes through shared
    memory once per program, not once per level."""
    kk = tl.arange(0, NL)
    base = part_ptr + (lo + kk)[:, None] * spk + d[None, :]
    use = (kk < nl)[:, None] & dmask[None, :]
    tl.store(base + (first + rr[None, :]) * sps, acc, mask=use)
    t = first + slot_n
    while t < nslot:
        tl.store(base + (t + rr[None, :]) * sps, acc * 0.0, mask=use & (t + rr < nslot)[None, :])
        t += slot_n


@triton.jit
def _put_level(acc, kk, part):
    """``acc`` (NL, COLS) with row kk replaced by ``part`` (1, COLS)."""
    return tl.where((tl.arange(0, acc.shape[0]) == kk)[:, None], part, acc)


# ----------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------


@triton.jit
def _e2_bwd_kernel(x1_ptr, x2_ptr, mask_ptr, doc_ptr, logw_ptr, g_ptr, c1_ptr, c2_ptr,
                   y1_ptr, y2_ptr, part_ptr, stat_ptr,
                   s1b, s1l, s2b, s2l, sgb, sgl, scb, scl, syb, syl, swk, spk, sps,
                   L, d_lo, d_hi, lo, nl, nres, nq, tile, halo, nslot,
                   MODE: tl.constexpr, NL: tl.constexpr, WIN: tl.constexpr,
                   BLOCK_R: tl.constexpr,
                   BLOCK_D: tl.constexpr, REV: tl.constexpr, FIRST: tl.constexpr,
                   TOP: tl.constexpr, HAS_MASK: tl.constexpr, HAS_DOC: tl.constexpr,
                   STATE: tl.constexpr, NEG: tl.constexpr, TRY_B: tl.constexpr,
                   STATS: tl.constexpr, F64: tl.constexpr):
    """One pass, levels lo .. lo+nl-1 over rows of ``nres`` residues; windows of WIN rows,
    ``halo`` before and after a tile of ``tile`` rows (halo 0: whole columns).

    Input (x1, x2): (A, V) when FIRST, else the intermediate (log2 U, O) before this pass.
    MODE 0: write the intermediate after this pass's levels into (y1, y2).
    MODE 1: the adjoint: from G (strided, TOP) or from the carry (c1, c2) = (P, Q) of the
    pass above; writes (dA, dV) (FIRST) or this pass's carry into (y1, y2), and its
    levels' d log_w partials into part (levels, nslot, D).  stat: per program, 1 when it
    took path B.  Grid: (nq * column blocks, B).
    """
    pid = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    q = pid % nq
    pid_c = pid // nq
    w, row, d, pm, ok = _geometry(q * tile - halo, pid_c, L, nres, d_lo, d_hi, WIN, BLOCK_R,
                                  BLOCK_D, REV)
    COLS: tl.constexpr = BLOCK_R * BLOCK_D
    dmask = d < d_hi
    x1, x2, real = _pass_inputs(x1_ptr, x2_ptr, mask_ptr, b, pm, d, ok, L, s1b, s1l, s2b,
                                s2l, FIRST, HAS_MASK, STATE)
    m0, h0, u0 = _token(x1, x2, real, FIRST, STATE, NEG)
    seg = _load_doc(doc_ptr, b, pm, ok, L, HAS_DOC)
    mine = ok & ((w >= halo) & (w < halo + tile))[:, None]
    yoff = b * syb + pm * syl + d[None, :]
    if MODE == 0:
        use_b = False
        e = tl.full((COLS,), 0.0, STATE)
        if TRY_B:
            zero = h0 * 0.0
            use_b, e = _plan_b(m0, h0, u0, ok, zero, zero, logw_ptr, swk, lo, nl, d, dmask,
                               WIN, STATE, NEG, F64)
        if use_b:
            scale = _pow2(m0 - e[None, :], F64)
            h, u = _fwd_b(h0 * scale, u0 * scale, seg, logw_ptr, swk, lo, nl, d, dmask, w,
                          row, WIN, COLS, STATE, HAS_DOC, F64)
            m = tl.broadcast_to(e[None, :], (WIN, COLS))
        else:
            m, h, u = _fwd_a(m0, h0, u0, seg, logw_ptr, swk, lo, nl, d, dmask, w, row, WIN,
                             COLS, STATE, HAS_DOC, F64)
        lu, o = _form(m, h, u, F64)
        tl.store(y1_ptr + yoff, lu, mask=mine)
        tl.store(y2_ptr + yoff, o, mask=mine)
    else:
        if TOP:
            t1 = tl.load(g_ptr + b * sgb + pm * sgl + d[None, :], mask=ok, other=0).to(STATE)
            t2 = t1 * 0.0
        else:
            coff = b * scb + pm * scl + d[None, :]
            t1 = tl.load(c1_ptr + coff, mask=ok, other=0).to(STATE)
            t2 = tl.load(c2_ptr + coff, mask=ok, other=0).to(STATE)
        n_rb = (nres + BLOCK_R - 1) // BLOCK_R
        # d log_w: a slot per residue column, the program's first + the column's residue
        first = ((b * nq + q) * n_rb + pid_c % n_rb) * BLOCK_R
        rr = tl.arange(0, COLS) // BLOCK_D
        slot_n = tl.num_programs(1) * nq * n_rb * BLOCK_R
        use_b = False
        e = tl.full((COLS,), 0.0, STATE)
        if TRY_B:
            use_b, e = _plan_b(m0, h0, u0, ok, t1, t2, logw_ptr, swk, lo, nl, d, dmask,
                               WIN, STATE, NEG, F64)
        took = tl.full((), 0, tl.int32)
        dlw = tl.full((NL, COLS), 0.0, STATE)  # row kk: level lo + kk's partials
        if use_b:
            took += 1
            scale = _pow2(m0 - e[None, :], F64)
            hs = h0 * scale
            us = u0 * scale
            hf, uf = _fwd_b(hs, us, seg, logw_ptr, swk, lo, nl, d, dmask, w, row, WIN,
                            COLS, STATE, HAS_DOC, F64)
            if TOP:
                o = _div(hf, uf)
                t2 = t1 * o
            t1 = tl.where(ok, _div(t1, uf), 0.0)
            t2 = tl.where(ok, _div(t2, uf), 0.0)
            for kk in range(nl):
                k = nl - 1 - kk
                fh, fu = _fwd_b(hs, us, seg, logw_ptr, swk, lo, k, d, dmask, w, row, WIN,
                                COLS, STATE, HAS_DOC, F64)
                n, g = _level_weight(logw_ptr, swk, lo + k, d, dmask, STATE)
                wk = (g * _pow2(n, F64))[None, :]
                idx, has = _ahead(w, 1 << k, seg, WIN, COLS, HAS_DOC)
                p1 = tl.gather(t1, idx, 0)
                p2 = tl.gather(t2, idx, 0)
                term = tl.where(mine & has, wk * (fh * p1 - fu * p2), 0.0)
                dlw = _put_level(dlw, k, _rowsum(term))
                t1 = tl.where(has, tl.fma(p1, wk, t1), t1)
                t2 = tl.where(has, tl.fma(p2, wk, t2), t2)
            if FIRST:
                dv = us * t1
                da = x2 * dv - us * t2
            else:
                da = us * t1  # the carry (P, Q) = U_in S of the pass below
                dv = us * t2
        else:
            mf, hf, uf = _fwd_a(m0, h0, u0, seg, logw_ptr, swk, lo, nl, d, dmask, w, row,
                                WIN, COLS, STATE, HAS_DOC, F64)
            if TOP:
                o = _div(hf, uf)
                bad = o != o
                live = ok & ((mf > NEG * 0.5) | bad)
                t1 = tl.where(live, t1, 0.0)
                b1 = tl.where(live, _div(t1, uf), 0.0)
                b2 = tl.where(live, _div(t1 * o, uf), 0.0)
                b1 = tl.where(bad, o, b1)
                b2 = tl.where(bad, o, b2)
                bm = tl.where(live, -mf, tl.full(mf.shape, NEG, STATE))
                poison = _rowsum(tl.where(ok, o * 0.0, 0.0))
            else:
                live = ok & (mf > NEG * 0.5) & (uf > 0)
                b1 = tl.where(live, _div(t1, uf), t1 * 0.0)
                b2 = tl.where(live, _div(t2, uf), t2 * 0.0)
                bm = tl.where(live, -mf, tl.full(mf.shape, NEG, STATE))
                poison = _rowsum(tl.where(ok, t1 * 0.0 + t2 * 0.0, 0.0))
            for kk in range(nl):
                k = nl - 1 - kk
                fm, fh, fu = _fwd_a(m0, h0, u0, seg, logw_ptr, swk, lo, k, d, dmask, w, row,
                                    WIN, COLS, STATE, HAS_DOC, F64)
                n, g = _level_weight(logw_ptr, swk, lo + k, d, dmask, STATE)
                idx, has = _ahead(w, 1 << k, seg, WIN, COLS, HAS_DOC)
                bq = tl.gather(bm, idx, 0) + n[None, :]
                p1 = tl.gather(b1, idx, 0)
                p2 = tl.gather(b2, idx, 0)
                scale = g[None, :] * _pow2w(fm + bq, F64)
                term = tl.where(mine & has, scale * (fh * p1 - fu * p2), 0.0)
                dlw = _put_level(dlw, k, _rowsum(term) + poison)
                big = tl.where(bm >= bq, bm, bq)
                sp = g[None, :] * _pow2(bq - big, F64)
                ss = _pow2(bm - big, F64)
                c1 = tl.fma(p1, sp, b1 * ss)
                c2 = tl.fma(p2, sp, b2 * ss)
                bm = tl.where(has, big, bm)
                b1 = tl.where(has, c1, b1)
                b2 = tl.where(has, c2, b2)
            x = u0 * _pow2w(m0 + bm, F64)  # e^A 2^bm (FIRST) or U_in 2^bm
            if FIRST:
                dv = tl.where(real, x * b1, 0.0)
                da = tl.where(real, x2 * dv - x * b2, 0.0)
            else:
                da = tl.where(real, x * b1, 0.0)
                dv = tl.where(real, x * b2, 0.0)
        tl.store(y1_ptr + yoff, da.to(y1_ptr.dtype.element_ty), mask=mine)
        tl.store(y2_ptr + yoff, dv.to(y2_ptr.dtype.element_ty), mask=mine)
        _store_parts(part_ptr, spk, sps, lo, nl, first, rr, nslot, slot_n, dlw, d, dmask, NL)
        if STATS:
            tl.store(stat_ptr + b * tl.num_programs(0) + pid, took)


# ----------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------


class _BPass:
    """Levels [lo, lo + nl) along rows of ``nres = 2^lo`` residues: whole columns when
    ``whole``, else windows of ``win`` rows with ``halo = 2^nl`` rows before and after a
    tile of ``win - 2 halo``."""

    def __init__(self, lo: int, nl: int, length: int, whole: bool):
        self.lo, self.nl, self.nres, self.whole = lo, nl, 1 << lo, whole
        rows = triton.cdiv(length, self.nres)
        if whole:
            self.halo, self.win = 0, triton.next_power_of_2(max(rows, 1))
        else:
            self.halo = 1 << nl
            self.win = min(max(4 * self.halo, WINDOW),
                           triton.next_power_of_2(rows + 2 * self.halo))
        self.tile = self.win - 2 * self.halo
        self.nq = triton.cdiv(rows, self.tile)

    def blocks(self, width: int) -> tuple[int, int]:
        """(BLOCK_R, BLOCK_D) for a channel range of ``width``."""
        block_d = min(_e2().MAX_BLOCK_D, triton.next_power_of_2(width))
        fill = max(1, _e2().TILE_ELEMENTS // (self.win * block_d))
        return min(triton.next_power_of_2(self.nres), fill), block_d

    def slots(self, batch: int, width: int) -> int:
        """d log_w slots of one launch on ``width`` channels (one per program, column
        block of residues and residue of the block)."""
        block_r, _ = self.blocks(width)
        return batch * self.nq * triton.cdiv(self.nres, block_r) * block_r


def plan(length: int, nlev: int) -> list[_BPass]:
    """The backward's passes: one on whole columns up to ``triton_e2.ONE_PASS_LEVELS``
    levels; else fine passes of at most ``FINE_LEVELS`` (and ``triton_e2.FINE_LEVELS``)
    levels with halos, then the last ``triton_e2.COARSE_LEVELS`` levels on whole
    columns."""
    if nlev <= _e2().ONE_PASS_LEVELS:
        return [_BPass(0, nlev, length, True)]
    coarse = max(nlev - _e2().COARSE_LEVELS, 1)
    step = max(1, min(FINE_LEVELS, _e2().FINE_LEVELS))
    passes = [_BPass(lo, min(step, coarse - lo), length, False)
              for lo in range(0, coarse, step)]
    return passes + [_BPass(coarse, nlev - coarse, length, True)]


def _launch(ps: _BPass, mode: int, x, c, g, y, part, stat, mask, doc, log_w, part_slice,
            rev: bool, first: bool, top: bool, nslot: int) -> None:
    x1, x2 = x
    B, L, _ = x1.shape
    width = part_slice.stop - part_slice.start
    block_r, block_d = ps.blocks(width)
    n_cb = triton.cdiv(ps.nres, block_r) * triton.cdiv(width, block_d)
    state, neg = _state(log_w.dtype)
    c1, c2 = c if c is not None else (x1, x1)
    g_arg = g if g is not None else x1
    _e2_bwd_kernel[(ps.nq * n_cb, B)](
        x1, x2, x1 if mask is None else mask, x1 if doc is None else doc, log_w, g_arg, c1,
        c2, y[0], y[1], part, x1 if stat is None else stat,
        x1.stride(0), x1.stride(1), x2.stride(0), x2.stride(1), g_arg.stride(0),
        g_arg.stride(1), c1.stride(0), c1.stride(1), y[0].stride(0), y[0].stride(1),
        log_w.stride(0), part.stride(0), part.stride(1),
        L, part_slice.start, part_slice.stop, ps.lo, ps.nl, ps.nres, ps.nq, ps.tile,
        ps.halo, nslot,
        MODE=mode, NL=triton.next_power_of_2(max(ps.nl, 1)), WIN=ps.win, BLOCK_R=block_r,
        BLOCK_D=block_d, REV=rev, FIRST=first,
        TOP=top, HAS_MASK=first and mask is not None, HAS_DOC=doc is not None, STATE=state,
        NEG=neg, TRY_B=PATH_B, STATS=stat is not None, F64=log_w.dtype == torch.float64,
        num_warps=_e2().NUM_WARPS, **_EXACT)


def bwd(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int, stats: list | None = None):
    """Gradients (dA, dV, dlog_w) of ``sum(grad * fwd(...))``; the contract of
    ``weird_scan.triton.bwd``.  ``stats``: a list that receives, per backward launch,
    ``(lo, tensor)`` of each program's path (1: B) (:func:`path_counts`)."""
    B, L, D = a.shape
    da = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    dv = torch.empty(a.shape, dtype=a.dtype, device=a.device)
    if a.numel() == 0:
        return da, dv, torch.zeros((nlev, D), dtype=torch.float64, device=a.device)
    mask = None if mask is None else mask.contiguous()
    log_w = log_w[:nlev]
    passes = plan(L, nlev)
    chunks = _old.channel_chunks(B, L, D, log_w.dtype)
    layout = [(c, _parts(c.stop - c.start, min(max(n_causal - c.start, 0),
                                                c.stop - c.start))) for c in chunks]
    nslot = max([ps.slots(B, p.stop - p.start) for ps in passes for _, parts in layout
                 for p, _ in parts] or [1])
    part = torch.empty((nlev, nslot, D), dtype=log_w.dtype, device=a.device)
    with _device(a):
        for c, parts in layout:
            _bwd_chunk(passes, a[..., c], v[..., c], log_w[:, c], mask, doc, grad[..., c],
                       da[..., c], dv[..., c], part[:, :, c], parts, nslot, stats)
    return da, dv, part.sum(1, dtype=torch.float64)


def _bwd_chunk(passes, a, v, log_w, mask, doc, grad, da, dv, part, parts, nslot, stats):
    """The passes on one channel chunk (views of the whole tensors)."""
    fine, top = passes[:-1], passes[-1]
    xs = [(a, v)]
    for i, ps in enumerate(fine):  # recompute the intermediates
        y = _old._buffers(a, log_w.dtype, 2)
        for p, rev in parts:
            _launch(ps, 0, xs[-1], None, None, y, part, None, mask, doc, log_w, p, rev,
                    i == 0, False, nslot)
        xs.append(y)
    carry = None
    for i in reversed(range(len(passes))):
        ps, x = passes[i], xs.pop()
        out = (da, dv) if i == 0 else (x if ps is top else _old._buffers(a, log_w.dtype, 2))
        for p, rev in parts:
            stat = None
            if stats is not None:
                n_cb = triton.cdiv(ps.nres, ps.blocks(p.stop - p.start)[0]) \
                    * triton.cdiv(p.stop - p.start, ps.blocks(p.stop - p.start)[1])
                stat = torch.zeros((a.shape[0], ps.nq * n_cb), dtype=torch.int32,
                                   device=a.device)
                stats.append((ps.lo, stat))
            _launch(ps, 1, x, carry, grad if ps is top else None, out, part, stat, mask,
                    doc, log_w, p, rev, i == 0, ps is top, nslot)
        carry = out
        del x


def path_counts(a, v, log_w, grad, mask=None, doc=None, n_causal: int | None = None):
    """(grads, counts): :func:`bwd` and, per backward pass (keyed by its first level), the
    programs that took path B and all programs, ``{lo: (b_programs, programs)}``."""
    B, L, D = a.shape
    nlev = max(0, L - 1).bit_length()
    stats: list = []
    a_, v_, g_ = (x if x.stride(-1) == 1 else x.contiguous() for x in (a, v, grad))
    grads = bwd(a_, v_, log_w.contiguous(), mask, doc, g_, D if n_causal is None else n_causal,
                nlev, stats)
    counts: dict[int, tuple[int, int]] = {}
    for lo, stat in stats:
        took, n = counts.get(lo, (0, 0))
        counts[lo] = (took + int(stat.sum()), n + stat.numel())
    return grads, counts
