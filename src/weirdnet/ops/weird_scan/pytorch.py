"""Pure-PyTorch running-max weighted scan: the portable implementation.

Same algorithm and same contracts as the fused C kernels (``csrc/weird_scan.c``), written
with tensor ops so it runs on any device.  It is used on CUDA and wherever the C kernel
cannot be built.  Every function here takes tensors already in the compute dtype
(float32 or float64) and works on channel chunks to bound temporary memory.

State per (batch, position, channel): ``(m, h, u)`` with ``H = 2^m h``, ``U = 2^m u`` and m
an integer (held in the float dtype): the exact running max in powers of two ("path A",
docs/design.md §19).  Every rescale multiplies by an exact power of two built from its
exponent bits (:func:`pow2`), so rescaling adds no rounding; a level's weight
``W_k = e^{log_w[k]}`` is split once into ``f_k 2^{n_k}`` (f_k in [1, 2), n_k an integer).
Padded sources start as ``(NEG, 0, 1)``; non-finite tokens as :func:`initial_state` says.
The backward's adjoint keeps natural-log scales (:func:`combine`), and reads the forward
states through :func:`natural`.
Channels ``[0, n_causal)`` are scanned causally, ``[n_causal, D)`` anti-causally.  With ``doc``
(canonical document ids, (B, L) int64) a level combines position i with its partner only
when both lie in one document; elsewhere the state passes through unchanged.
"""

from __future__ import annotations

import math

import torch

from ..packing import same_document

# Elements of (B, L, chunk) per temporary the backward may hold at once, times levels.
_CHUNK_BUDGET = 1 << 25


def neg_sentinel(dtype: torch.dtype) -> float:
    """The log-weight of a padded source: exactly 0 weight next to any real token."""
    return -1e300 if dtype == torch.float64 else -1e30


def zero_weight_sentinel(dtype: torch.dtype) -> float:
    """The log-scale of a -inf logit's (zero-weight) state: between padding and any real
    logit, so it drops out next to a real token and makes a padding-only window 0/0."""
    return neg_sentinel(dtype) / 4


def combine(m, h, u, mp, hp, up):
    """Merge partner state ``(mp, hp, up)`` into ``(m, h, u)`` with natural-log scales
    (``H = e^m h``); all shapes broadcast.  The backward's adjoint combine.

    Returns the new ``(m, h, u)``.  One exp per element: the larger of the two log-scales
    is kept and the other side is scaled by ``exp(-|m - mp|)``.
    """
    d = m - mp
    e = torch.exp(-d.abs())
    keep = d >= 0
    one = torch.ones((), dtype=m.dtype, device=m.device)
    st = torch.where(keep, one, e)
    sp = torch.where(keep, e, one)
    return torch.where(keep, m, mp), h * st + hp * sp, u * st + up * sp


# (exponent bias, mantissa bits, integer type of the same width) of each state dtype
_FLOAT_BITS = {torch.float32: (127, 23, torch.int32), torch.float64: (1023, 52, torch.int64)}
LN2 = math.log(2.0)


def pow2(e: torch.Tensor) -> torch.Tensor:
    """``2^e`` exactly, for an integer-valued float tensor ``e <= 0`` (float32 or float64),
    built from the exponent bits: 0 below the smallest normal number (2^-126 in float32,
    2^-1022 in float64) and for NaN.  (``torch.ldexp`` multiplies by ``pow(2, e)``, whose
    exactness is the math library's.)"""
    bias, mantissa, itype = _FLOAT_BITS[e.dtype]
    low = torch.full((), -bias, dtype=e.dtype, device=e.device)
    k = torch.where(e >= -bias, e, low)  # also NaN -> 2^-bias, whose bits are 0
    return ((k + bias).to(itype) << mantissa).view(e.dtype)


def split_log(x: torch.Tensor):
    """``(n, f)`` with ``e^x = f 2^n``, n integer-valued (x's dtype) and f in [1, 2), for
    finite x.  ``x log2(e)`` is split in float64 whatever x's dtype, so f is e^x's
    mantissa rounded once (as ``exp`` would round it).  Non-finite x gives NaN f.
    (``torch.exp``, not ``torch.exp2``: on the CPU exp2's vectorised and scalar loops
    round differently, which would make a value depend on its place in the tensor.)"""
    t = x.to(torch.float64) / LN2
    n = torch.floor(t)
    return n.to(x.dtype), torch.exp((t - n) * LN2).to(x.dtype)


def natural(m: torch.Tensor) -> torch.Tensor:
    """A state's natural-log scale: ``m ln 2`` (the sentinels stay below any real scale)."""
    return m * LN2


def merge(m, h, u, mp, hp, up, fp):
    """Path A: merge the partner ``2^mp fp (hp, up)`` into ``2^m (h, u)``; shapes broadcast.

    m, mp integers: the larger exponent is kept and the other side is scaled by
    ``2^-|m - mp|``, exact (it is 0 below the smallest normal, where the term is below
    float rounding of the kept side).  The weight's mantissa ``fp`` rides on the partner's
    factor: ``h' = h st + hp (fp sp)`` with st, sp powers of two, so a merge rounds
    exactly twice per value, as a plain ``h + W hp`` does (the basis of path B's
    bit-for-bit equality, docs/design.md §19).  The decoding step uses this very
    function, which makes it bitwise equal to the full pass.
    """
    d = m - mp
    down = pow2(-d.abs())
    keep = d >= 0
    one = torch.ones((), dtype=m.dtype, device=m.device)
    st = torch.where(keep, one, down)
    sp = torch.where(keep, down * fp, fp)
    return torch.where(keep, m, mp), h * st + hp * sp, u * st + up * sp


def level_weights(log_w: torch.Tensor):
    """``(n, f)``: each level weight ``e^{log_w}`` as ``f 2^n`` (log_w's shape)."""
    return split_log(log_w)


def merge_level(state, partner, weight):
    """``state`` merged with ``partner`` across one level of weight ``(n_k, f_k)``."""
    n, f = weight
    return merge(*state, partner[0] + n, partner[1], partner[2], f)


def _const(x: float, like: torch.Tensor) -> torch.Tensor:
    return torch.full((), x, dtype=like.dtype, device=like.device)


def initial_state(a, v, mask, pow2_scale: bool = True):
    """(m, h, u) before any level.  In powers of two (this backend's states), with
    ``e^A = f 2^n`` (:func:`split_log`):

    finite A: (n, (V + 0 V) f, f) (NaN h for a NaN or infinite V); A = -inf: (ZW, 0 V, 0),
    a zero weight; A NaN or +inf: (A, NaN, 1); padding (``mask`` False): (NEG, 0, 1).

    With ``pow2_scale=False``, the natural-log states of the C and Triton kernels (their
    ``token_state``): n = A and f = 1.
    """
    zero = a == float("-inf")
    finite = torch.isfinite(a)
    if pow2_scale:
        n, f = split_log(torch.where(finite, a, _const(0.0, a)))
    else:
        n, f = a, _const(1.0, a)
    h = (v + v * 0) * f
    h = torch.where(zero, h * 0, h)
    h = torch.where(a < float("inf"), h, _const(float("nan"), h))
    m = torch.where(finite, n, torch.where(zero, _const(zero_weight_sentinel(a.dtype), a), a))
    u = torch.where(finite, f, torch.where(zero, _const(0.0, a), _const(1.0, a)))
    if mask is None:
        return m, h, u
    valid = mask.unsqueeze(-1)
    return (torch.where(valid, m, _const(neg_sentinel(a.dtype), m)),
            torch.where(valid, h, _const(0.0, h)), torch.where(valid, u, _const(1.0, u)))


def apply_level(state, s: int, weight, doc=None):
    """Level with shift ``s`` and weight ``weight = (n_k, f_k)`` (D,) each
    (:func:`level_weights`), out of place along dim 1; with ``doc`` (B, L) a position whose
    partner lies in another document keeps its state."""
    new = merge_level(tuple(x[:, s:] for x in state), tuple(x[:, :-s] for x in state),
                      weight)
    if doc is not None:
        same = same_document(doc, s).unsqueeze(-1)
        new = tuple(torch.where(same, x, x_old[:, s:]) for x, x_old in zip(new, state))
    return tuple(torch.cat([x_old[:, :s], x], 1) for x, x_old in zip(new, state))


def _parts(D: int, n_causal: int):
    """(channel slice, reverse?) for the causal and the anti-causal channel ranges."""
    parts = []
    if n_causal > 0:
        parts.append((slice(0, n_causal), False))
    if n_causal < D:
        parts.append((slice(n_causal, D), True))
    return parts


def _chunks(part: slice, B: int, L: int, nlev: int):
    """Channel sub-slices of ``part`` small enough for the temporaries of ``nlev`` levels."""
    step = max(1, _CHUNK_BUDGET // max(1, B * L * (3 * nlev + 6)))
    for start in range(part.start, part.stop, step):
        yield slice(start, min(part.stop, start + step))


def _oriented(x, reverse: bool):
    return None if x is None else (x.flip(1) if reverse else x)


def fwd(a, v, log_w, mask, doc, n_causal: int, nlev: int) -> torch.Tensor:
    """O = H / U.  a, v: (B, L, D); log_w: (>= nlev, D); mask: (B, L) bool or None;
    doc: (B, L) int64 or None."""
    B, L, D = a.shape
    out = torch.empty_like(a)
    n, f = level_weights(log_w[:nlev])
    for part, rev in _parts(D, n_causal):
        msk, dc = _oriented(mask, rev), _oriented(doc, rev)
        for ch in _chunks(part, B, L, 0):
            state = initial_state(_oriented(a[..., ch], rev), _oriented(v[..., ch], rev), msk)
            for k in range(nlev):
                state = apply_level(state, 1 << k, (n[k, ch], f[k, ch]), dc)
            out[..., ch] = _oriented(state[1] / state[2], rev)
    return out


def bwd(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int):
    """Gradients (dA, dV, dlog_w) of ``sum(grad * fwd(...))``; dlog_w (nlev, D) float64."""
    B, L, D = a.shape
    da, dv = torch.empty_like(a), torch.empty_like(a)
    dlogw = torch.zeros((nlev, D), dtype=torch.float64, device=a.device)
    for part, rev in _parts(D, n_causal):
        msk, dc = _oriented(mask, rev), _oriented(doc, rev)
        for ch in _chunks(part, B, L, nlev):
            args = [_oriented(x[..., ch], rev) for x in (a, v, grad)]
            gA, gV, gw = _bwd_chunk(*args, log_w[:nlev, ch], msk, dc, nlev)
            da[..., ch], dv[..., ch] = _oriented(gA, rev), _oriented(gV, rev)
            dlogw[:, ch] = gw
    return da, dv, dlogw


def adjoint_scale(fm, fu, o, g):
    """(bm, g): bm = -log U (natural log; ``U = 2^fm fu``, summed in float64 and rounded
    once) where a real token is in reach, NEG (and g = 0) where only padding is, NaN where
    the output ``o`` is NaN (its whole window's adjoint turns NaN)."""
    neg = neg_sentinel(fm.dtype)
    bad = torch.isnan(o)
    live = (fm > neg / 2) | bad
    g = torch.where(live, g, _const(0.0, g))
    log_u = natural(fm.to(torch.float64)) + fu.to(torch.float64).log()
    bm = torch.where(live, (-log_u).to(fm.dtype), _const(neg, fm))
    return torch.where(bad, o, bm), g


def _bwd_chunk(a, v, g, log_w, mask, doc, nlev: int):
    """Causal backward of one channel chunk (already oriented)."""
    states = [initial_state(a, v, mask)]
    n, f = level_weights(log_w)
    for k in range(nlev):
        states.append(apply_level(states[-1], 1 << k, (n[k], f[k]), doc))
    fm, fh, fu = states.pop()
    o = fh / fu
    bm, g = adjoint_scale(fm, fu, o, g)
    b1, b2 = g, g * o
    poison = (o * 0).sum((0, 1), dtype=torch.float64)  # NaN for a channel with a NaN output
    dlogw = torch.zeros(log_w.shape, dtype=torch.float64, device=a.device)
    for k in reversed(range(nlev)):
        s = 1 << k
        sm, sh, su = states[k]
        mq = bm[:, s:] + log_w[k]
        w = torch.exp(mq + natural(sm[:, :-s]))
        term = w * (sh[:, :-s] * b1[:, s:] - su[:, :-s] * b2[:, s:])
        merged = combine(bm[:, :-s], b1[:, :-s], b2[:, :-s], mq, b1[:, s:], b2[:, s:])
        if doc is not None:  # no adjoint flows back across a document start
            same = same_document(doc, s).unsqueeze(-1)
            term = torch.where(same, term, _const(0.0, term))
            merged = tuple(torch.where(same, x, x_old[:, :-s])
                           for x, x_old in zip(merged, (bm, b1, b2)))
        dlogw[k] = term.sum((0, 1), dtype=torch.float64) + poison
        mn, b1n, b2n = merged
        bm = torch.cat([mn, bm[:, -s:]], 1)
        b1 = torch.cat([b1n, b1[:, -s:]], 1)
        b2 = torch.cat([b2n, b2[:, -s:]], 1)
    e = torch.exp(a + bm)
    dv = e * b1
    da = v * dv - e * b2
    if mask is not None:  # padded inputs get 0, even beside a NaN
        valid = mask.unsqueeze(-1)
        da, dv = torch.where(valid, da, _const(0.0, da)), torch.where(valid, dv, _const(0.0, dv))
    return da, dv, dlogw


def extend(a, v, log_w, valid, ring_m, ring_h, ring_u, nlev: int, t0: int) -> torch.Tensor:
    """Decode tokens t0 .. t0+T-1; the C kernel's ring layout and contract, its states in
    powers of two (H = 2^m h, path A; the C kernel's rings hold H = e^m h).

    a, v: (B, T, D); valid: (B, T) bool or None; ring_*: (2^nlev - 1, B, D), where level k
    owns rows [2^k - 1, 2^(k+1) - 1) and row (2^k - 1) + (t mod 2^k) holds position t's
    state before level k.
    """
    B, T, D = a.shape
    out = torch.empty_like(a)
    n, f = level_weights(log_w[:nlev])
    for tt in range(T):
        t = t0 + tt
        msk = None if valid is None else valid[:, tt]
        m, h, u = initial_state(a[:, tt].unsqueeze(1), v[:, tt].unsqueeze(1),
                                None if msk is None else msk.unsqueeze(1))
        m, h, u = m[:, 0], h[:, 0], u[:, 0]
        for k in range(nlev):
            s = 1 << k
            row = (s - 1) + (t & (s - 1))
            if t >= s:
                partner = ring_m[row].clone(), ring_h[row].clone(), ring_u[row].clone()
                ring_m[row], ring_h[row], ring_u[row] = m, h, u
                m, h, u = merge_level((m, h, u), partner, (n[k], f[k]))
            else:
                ring_m[row], ring_h[row], ring_u[row] = m, h, u
        out[:, tt] = h / u
    return out


def extend_at(a, v, log_w, valid, ring_m, ring_h, ring_u, nlev: int,
              position: torch.Tensor, pow2_scale: bool = True) -> torch.Tensor:
    """:func:`extend` of one token at the position held in the 0-dim int64 tensor
    ``position`` (not a Python int): the same ring update and merge, with the rows
    picked by tensor indices and "has a partner" as a ``torch.where``, so the step runs the
    same kernels at every position and can be captured in a CUDA graph.  a, v: (B, 1, D).
    Its outputs are those of :func:`extend` at that position, bit for bit.

    ``pow2_scale=False`` steps rings in the natural-log format of the C and Triton
    kernels (a cache whose prompt one of them filled): their initial state and
    :func:`combine`, the operations of their own decoding step."""
    if a.shape[1] != 1:
        raise ValueError(f"a step at a tensor position takes one token, got {a.shape[1]}")
    m, h, u = initial_state(a, v, None if valid is None else valid[:, :1], pow2_scale)
    m, h, u = m[:, 0], h[:, 0], u[:, 0]
    t = position.reshape(1)
    n, f = level_weights(log_w[:nlev])
    for k in range(nlev):
        s = 1 << k
        row = (s - 1) + torch.bitwise_and(t, s - 1)
        previous = [ring.index_select(0, row)[0] for ring in (ring_m, ring_h, ring_u)]
        for ring, value in zip((ring_m, ring_h, ring_u), (m, h, u)):
            ring.index_copy_(0, row, value[None])
        if pow2_scale:
            merged = merge_level((m, h, u), previous, (n[k], f[k]))
        else:
            merged = combine(m, h, u, previous[0] + log_w[k], previous[1], previous[2])
        has = t >= s
        m, h, u = (torch.where(has, new, old) for new, old in zip(merged, (m, h, u)))
    return (h / u)[:, None]
