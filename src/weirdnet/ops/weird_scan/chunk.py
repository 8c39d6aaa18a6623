"""The chunked factorization of the scan in plain PyTorch: backend ``"chunk"`` (opt-in).

The readable specification of the tensor-core kernel (``triton_chunk.py``) and a
batched-matmul form of the scan for any device; docs/design.md §18 has the derivation.
Same contract as ``weird_scan.pytorch`` (``fwd``, ``bwd``, ``extend``); tensors arrive in
the compute dtype (float32, float64 for float64 inputs).

Chunks.  With ``C = 2^c`` (``c = LEVELS_PER_CHUNK``, at most the levels in use) a distance
is ``d = q C + r`` (r < C) and ``a_d = a_lo(r) a_hi(q)``, a_lo the kernel of levels below
c, a_hi that of levels c and up.  For position ``p = Q C + rho`` (chunk Q, row rho), with
``X_j = e^{A_j} V_j`` (and ``E_j = e^{A_j}`` for the denominator):

    H_p = sum_{rho' <= rho} a_lo(rho - rho') X_Q[rho']               intra-chunk
        + sum_{rho' <= rho} a_lo(rho - rho') Y_Q[rho']               T_lo Y_Q
        + sum_{rho' >  rho} a_lo(C + rho - rho') Z_{Q-1}[rho']        T_up Z_{Q-1}

    Z_Q[rho'] = sum_{Q' <= Q} a_hi(Q - Q') X_{Q'}[rho'],   Y_Q = sum_{Q' < Q} (the same)

Z is the scan itself at chunk granularity (``L / C`` steps, ``C D`` channels, levels
c ..), Y its exclusive form, computed beside it level by level (never as ``Z - X``,
which would cancel).  The intra-chunk part is the running-max log-step scan of the c low
levels within each chunk; the inter-chunk part is one per-channel ``C x 2C`` matrix
``[T_lo | T_up]`` (the circulant of a_lo, split at its diagonal) times ``B L / C``
right-hand sides: a batched matrix product.

Stability without running maxima inside the product.  The chunk-level carries are
running-max triples ``(m, h, u)`` like every state of the scan.  The right-hand sides of
chunk Q (``Y_Q`` and ``Z_{Q-1}``, both from chunks before Q) are scaled by their maximum
``M`` per (batch row, chunk, channel), the matrix by its per-channel maximum; both scales
come back as the product's log-scale ``M + max log a_lo``, and the product is merged with
the intra-chunk state by the usual combine.  A column whose spread (range of the live
``m`` plus range of ``log a_lo``) exceeds ``SAFE_SPREAD`` (60 in float32, 600 in float64)
could underflow some row's terms, so it takes the exact path instead: per row, the
maximum of ``log T + m`` over the column, then the weighted sums (max-plus / logsumexp).
Every scale and every path decision of chunk Q depends only on chunks before Q (and on
the document ids up to Q's first position); the intra part of row rho on rows <= rho:
outputs are bitwise causal.

Packed documents (``doc``).  Only three comparisons: the chunk-level scan gates its
inclusive carry by the ids of the two positions it combines (as every level does), its
exclusive carry by the partner's id against the id of the chunk's first position, and the
product's ``Z_{Q-1}`` rows are kept only where their id is that of Q's first position;
rows of chunk Q behind a document start inside Q get no inter-chunk part.  Exact: a
document is contiguous (docs/design.md §18).

Non-finite values.  All the product's right-hand sides lie in the window of every row
they reach (earlier chunks, the same document), so a NaN there is a NaN of those outputs
in the reference too; masks are applied with ``where``, never multiplied, so no
``0 * NaN`` from outside a window enters.

Backward: dA and dV through the adjoint, which is this same chunked scan run
anti-causally (the transposed Toeplitz products) on ``(-log U, G, G O)``, exactly the
mirrored scan of ``weird_scan.pytorch``; d log_w by autograd through a recompute of the
forward (with ``a`` and ``v`` detached), plus the same NaN poison as every backend.
Decoding (``extend``) is the PyTorch backend's ring-buffer step: it equals this pass up to
float rounding (it is bitwise the ``"torch"`` backend's pass).
"""

from __future__ import annotations

import torch

from ..packing import same_document
from .pytorch import (
    _chunks,
    _oriented,
    _parts,
    adjoint_scale,
    apply_level,
    combine,
    initial_state,
    neg_sentinel,
    zero_weight_sentinel,
)
from .pytorch import extend as extend  # decoding: the ring buffers of the "torch" backend
from .reference import log_kernel

LEVELS_PER_CHUNK = 6  # c: chunks of C = 2^c positions (at most the levels a scan uses)
SAFE_SPREAD = {torch.float32: 60.0, torch.float64: 600.0}  # log-range the product may span
EXACT_BLOCK = 1 << 22  # elements of (columns, C, 2C) the exact path holds at once
TEMPORARIES = 4  # (B, L, chunk) triples alive at once, in channel-chunk budgeting


# --- pieces -----------------------------------------------------------------------------


def chunk_levels(nlev: int) -> int:
    """c for a scan of ``nlev`` levels: ``LEVELS_PER_CHUNK``, or all levels if fewer."""
    return min(LEVELS_PER_CHUNK, nlev)


def _zero_state(like: torch.Tensor):
    """The padding state (NEG, 0, 1) in ``like``'s shape: contributes exactly nothing."""
    neg = neg_sentinel(like.dtype)
    return (torch.full_like(like, neg), torch.zeros_like(like), torch.ones_like(like))


def _select(keep: torch.Tensor, state, other):
    """``state`` where ``keep``, else ``other`` (triples; ``keep`` broadcasts)."""
    return tuple(torch.where(keep, x, y) for x, y in zip(state, other))


def toeplitz_logs(log_w: torch.Tensor, c: int) -> torch.Tensor:
    """log [T_lo | T_up]: (C, 2C, D), -inf where the matrix is 0.

    Row rho, column rho' < C: log a_lo(rho - rho') for rho >= rho' (T_lo, applied to Y_Q);
    column C + rho': log a_lo(C + rho - rho') for rho < rho' (T_up, applied to Z_{Q-1}).
    """
    C = 1 << c
    la = log_kernel(log_w[:c], C).to(log_w.dtype)  # (C, D): log a_lo(r), r < C
    rho = torch.arange(C, device=log_w.device)
    lag = (rho[:, None] - rho[None, :]) % C
    lower = rho[:, None] >= rho[None, :]
    ok = torch.cat([lower, ~lower], 1).unsqueeze(-1)
    logs = la[torch.cat([lag, lag], 1)]
    return torch.where(ok, logs, torch.full((), float("-inf"), dtype=la.dtype,
                                            device=la.device))


def _intra(x, log_w, doc, c: int):
    """Levels 0 .. c-1 within each chunk.  x: (B, N, C, D) triples; doc (B, N, C) or None."""
    B, N, C, D = x[0].shape
    flat = tuple(t.reshape(B * N, C, D) for t in x)
    flat_doc = None if doc is None else doc.reshape(B * N, C)
    for k in range(c):
        flat = apply_level(flat, 1 << k, log_w[k], flat_doc)
    return tuple(t.reshape(B, N, C, D) for t in flat)


def _exclusive_level(excl, full, s: int, weight, doc):
    """The exclusive carry's level: chunk Q adds its partner Q - s's inclusive state
    (before this level), when the partner's row lies in the document of Q's first
    position (then every source of the partner does; otherwise none does)."""
    new = combine(*(t[:, s:] for t in excl), full[0][:, :-s] + weight,
                  full[1][:, :-s], full[2][:, :-s])
    if doc is not None:
        same = (doc[:, :-s] == doc[:, s:, :1]).unsqueeze(-1)
        new = _select(same, new, tuple(t[:, s:] for t in excl))
    return tuple(torch.cat([old[:, :s], t], 1) for old, t in zip(excl, new))


def carries(x, log_w, doc, c: int, nlev: int, keep: list | None = None):
    """(Z, Y): the inclusive and exclusive chunk-level scans of x over levels c .. nlev-1.

    x: (B, N, C, D) triples (the chunk axis is the sequence, (rows, channels) the
    channels); doc (B, N, C) or None.  Both are running-max triples (B, N, C, D).
    ``keep`` collects Z before each level (for the backward).
    """
    full, excl = x, _zero_state(x[0])
    for k in range(c, nlev):
        s = 1 << (k - c)
        if keep is not None:
            keep.append(full)
        excl = _exclusive_level(excl, full, s, log_w[k], doc)
        full = apply_level(full, s, log_w[k], doc)
    return full, excl


def _previous_rows_kept(doc):
    """(B, N, C, 1) bool: row rho' of Z_{Q-1} lies in the document of chunk Q's first
    position (False for Q = 0, which has no Z_{Q-1})."""
    first = doc[:, :, :1]
    none = torch.zeros_like(doc[:, :1], dtype=torch.bool)
    return torch.cat([none, doc[:, :-1] == first[:, 1:]], 1).unsqueeze(-1)


def _rows_kept(doc):
    """(B, N, C, 1) bool: row rho of chunk Q lies in the document of Q's first position
    (the others start a document inside Q: no inter-chunk part)."""
    return (doc == doc[:, :, :1]).unsqueeze(-1)


def right_hand_sides(full, excl, doc):
    """(B, N, 2C, D) triples: rows [Y_Q ; Z_{Q-1}] of chunk Q (zero state for Q = 0, and
    for rows of Z_{Q-1} outside the document of Q's first position)."""
    zero = _zero_state(full[0][:, :1])
    prev = tuple(torch.cat([z, t[:, :-1]], 1) for z, t in zip(zero, full))
    if doc is not None:
        prev = _select(_previous_rows_kept(doc), prev, _zero_state(prev[0]))
    return tuple(torch.cat([e, p], 2) for e, p in zip(excl, prev))


def product(t: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """(B, N, R, D): the per-channel matrix t (R, S, D) times rhs (B, N, S, D)."""
    return torch.einsum("rsd,bnsd->bnrd", t, rhs)


def spread(rm: torch.Tensor, logs: torch.Tensor):
    """(M, spread) per column: M = max of m over the column's rows (B, N, 1, D), and the
    range of its live m plus the range of the finite log T (NaN where m holds a NaN)."""
    live = rm > zero_weight_sentinel(rm.dtype) / 2  # carries a real token
    top = rm.amax(2, keepdim=True)
    inf = torch.full((), float("inf"), dtype=rm.dtype, device=rm.device)
    low = torch.where(live, rm, inf).amin(2, keepdim=True)
    width = logs.amax((0, 1)) - torch.where(torch.isfinite(logs), logs, inf).amin((0, 1))
    return top, (top - low).clamp_min(0) + width


def _columns(x: torch.Tensor) -> torch.Tensor:
    """(B, N, R, D) -> (B N D, R): one row per column (batch row, chunk, channel)."""
    return x.permute(0, 1, 3, 2).reshape(-1, x.shape[2])


def _uncolumns(x: torch.Tensor, B: int, N: int, D: int) -> torch.Tensor:
    return x.reshape(B, N, D, x.shape[-1]).permute(0, 1, 3, 2)


def _column_blocks(cols: torch.Tensor, logs: torch.Tensor):
    """Slices of ``cols`` whose (columns, R, S) logits stay within ``EXACT_BLOCK``."""
    step = max(1, EXACT_BLOCK // (logs.shape[0] * logs.shape[1]))
    return [slice(lo, lo + step) for lo in range(0, cols.numel(), step)]


def exact_columns(rhs, logs: torch.Tensor, cols: torch.Tensor):
    """The exact product of columns ``cols`` (indices into B N D): per row the maximum of
    log T + m over the column, then the weighted sums.  Returns (m, h, u), (n, R) each."""
    rm, rh, ru = (_columns(t)[cols] for t in rhs)
    per_channel = logs.permute(2, 0, 1)  # (D, R, S)
    outs = []
    for sl in _column_blocks(cols, logs):
        logits = per_channel[cols[sl] % logs.shape[-1]] + rm[sl, None, :]
        # a row of T may be all zero (in T^T, Z_{Q-1}'s first row): it holds padding
        top = logits.amax(2).clamp_min(neg_sentinel(logits.dtype))
        w = torch.exp(logits - top.unsqueeze(-1))
        outs.append((top, (w * rh[sl, None, :]).sum(2), (w * ru[sl, None, :]).sum(2)))
    return tuple(torch.cat(parts) for parts in zip(*outs))


def inter(rhs, logs: torch.Tensor, mul=product):
    """``T rhs`` for the per-channel matrix T = exp(logs) (R, S, D) and right-hand sides
    rhs (B, N, S, D) triples, scaled by maxima, exact where the spread leaves the safe
    range.  Returns the (B, N, R, D) triple and the exact columns' flags (B, N, 1, D).
    ``mul`` is the plain product (the Triton backend passes its kernel)."""
    rm, rh, ru = rhs
    B, N, _, D = rm.shape
    top, width = spread(rm, logs)
    lmax = logs.amax((0, 1))  # (D,)
    t = torch.exp(logs - lmax)
    scale = torch.exp(rm - top)
    h, u = mul(t, scale * rh), mul(t, scale * ru)
    m = (top + lmax).expand_as(h)
    exact = width > SAFE_SPREAD[rm.dtype]
    cols = _columns(exact.expand(B, N, 1, D)).squeeze(1).nonzero().squeeze(1)
    if cols.numel() == 0:
        return (m, h, u), exact
    got = exact_columns(rhs, logs, cols)
    state = tuple(_uncolumns(_columns(x).index_put((cols,), g), B, N, D)
                  for x, g in zip((m, h, u), got))
    return state, exact


# --- the scan ---------------------------------------------------------------------------


def _padded(x: torch.Tensor, n: int, value) -> torch.Tensor:
    """x (B, L, ...) padded along dim 1 to n with ``value`` (a scalar, or x's last row)."""
    extra = n - x.shape[1]
    if extra == 0:
        return x
    if value is None:
        fill = x[:, -1:].expand(-1, extra, *x.shape[2:])
    else:
        fill = torch.full((x.shape[0], extra, *x.shape[2:]), value, dtype=x.dtype,
                          device=x.device)
    return torch.cat([x, fill], 1)


def _in_chunks(state, fill, N: int, C: int):
    """(B, L, D) triples -> (B, N, C, D), padded at the end with the triple ``fill``."""
    B, _, D = state[0].shape
    return tuple(_padded(t, N * C, f).reshape(B, N, C, D) for t, f in zip(state, fill))


def chunk_states(m, h, u, log_w, doc, nlev: int, mul=product, record: dict | None = None):
    """Final running-max states (m, h, u) (B, L, D) of the causal scan of initial states
    (m, h, u) (B, L, D) (``initial_state``'s), log_w (>= nlev, D), doc (B, L) or None.
    ``record`` (a dict) receives what the backward's d log_w needs."""
    B, L, D = m.shape
    c = chunk_levels(nlev)
    C = 1 << c
    N = -(-L // C)
    if L == 0:
        return m, h, u
    x = _in_chunks((m, h, u), (neg_sentinel(m.dtype), 0.0, 1.0), N, C)
    dq = None if doc is None else _padded(doc, N * C, None).reshape(B, N, C)
    keep_intra = None if record is None else []
    state = _intra(x, log_w, dq, c, keep_intra)
    keep_full = None if record is None else []
    if N > 1:
        full, excl = carries(x, log_w, dq, c, nlev, keep_full)
        rhs = right_hand_sides(full, excl, dq)
        logs = toeplitz_logs(log_w, c)
        part, exact = inter(rhs, logs, mul)
        if dq is not None:  # rows behind a document start inside their chunk: none
            part = _select(_rows_kept(dq), part, _zero_state(part[0]))
        state = combine(*state, *part)
        if record is not None:
            record.update(rhs=rhs, logs=logs, exact=exact)
    if record is not None:
        record.update(c=c, N=N, C=C, doc=dq, intra=keep_intra, full=keep_full)
    return tuple(t.reshape(B, N * C, D)[:, :L] for t in state)


def _intra(x, log_w, doc, c: int, keep: list | None = None):
    """Levels 0 .. c-1 within each chunk.  x: (B, N, C, D) triples; doc (B, N, C) or None.
    ``keep`` collects the (B N, C, D) states before each level (for the backward)."""
    B, N, C, D = x[0].shape
    flat = tuple(t.reshape(B * N, C, D) for t in x)
    flat_doc = None if doc is None else doc.reshape(B * N, C)
    for k in range(c):
        if keep is not None:
            keep.append(flat)
        flat = apply_level(flat, 1 << k, log_w[k], flat_doc)
    return tuple(t.reshape(B, N, C, D) for t in flat)


# --- backward ---------------------------------------------------------------------------


def _dead(like: torch.Tensor):
    """The adjoint of an output out of reach, (NEG, 0, 0): it sends nothing back."""
    return (torch.full_like(like, neg_sentinel(like.dtype)), torch.zeros_like(like),
            torch.zeros_like(like))


def mirrored_levels(states, adj, weights, shifts, doc) -> torch.Tensor:
    """d log_w of a run of log-step levels: (len(shifts), D) float64.

    states[i]: the forward triple before level i (shift ``shifts[i]``, log-weight
    ``weights[i]`` (D,)), along dim 1; adj: the adjoint triple after the last level.
    The adjoint runs down the levels, each adding its term
    ``W e^{bm_i + m_{i-s}} (h_{i-s} b1_i - u_{i-s} b2_i)``, as in the PyTorch backend.
    """
    bm, b1, b2 = adj
    rows = []
    for i in reversed(range(len(shifts))):
        s, (sm, sh, su) = shifts[i], states[i]
        mq = bm[:, s:] + weights[i]
        term = torch.exp(mq + sm[:, :-s]) * (sh[:, :-s] * b1[:, s:] - su[:, :-s] * b2[:, s:])
        merged = combine(bm[:, :-s], b1[:, :-s], b2[:, :-s], mq, b1[:, s:], b2[:, s:])
        if doc is not None:  # no adjoint flows back across a document start
            same = same_document(doc, s).unsqueeze(-1)
            term = torch.where(same, term, torch.zeros((), dtype=term.dtype,
                                                       device=term.device))
            merged = _select(same, merged, (bm[:, :-s], b1[:, :-s], b2[:, :-s]))
        rows.append(term.sum(tuple(range(term.dim() - 1)), dtype=torch.float64))
        bm, b1, b2 = (torch.cat([x, old[:, -s:]], 1) for x, old in zip(merged, (bm, b1, b2)))
    return torch.stack(rows[::-1]) if rows else weights.new_zeros((0, bm.shape[-1]),
                                                                   dtype=torch.float64)


def _lag_bits(C: int, c: int, device) -> torch.Tensor:
    """(C, 2C, c) float: bit k of the lag (rho - rho') mod C of each matrix entry."""
    rho = torch.arange(C, device=device)
    lag = (rho[:, None] - rho[None, :]) % C
    lag = torch.cat([lag, lag], 1)
    return ((lag.unsqueeze(-1) >> torch.arange(c, device=device)) & 1).to(torch.float64)


def product_log_w_grad(adj, rec) -> torch.Tensor:
    """d log_w of the low levels through the matrix: (c, D) float64.

    Per channel ``P[rho, rho'] = sum over columns T e^{bm_rho + m_rho'} (b1 h - b2 u)``
    (the lag correlations of adjoint and right-hand sides, one batched product), then
    reduced along the diagonals: level k collects the entries whose lag has bit k.  The
    column scales are those of the forward; a row whose scaled adjoint would leave the
    safe range has no live entry under T (its terms are 0), exact columns are summed
    exactly."""
    (bm, b1, b2), (rm, rh, ru), logs = adj, rec["rhs"], rec["logs"]
    top = rm.amax(2, keepdim=True)
    lmax = logs.amax((0, 1))
    expo = bm + top + lmax
    ok = (expo <= SAFE_SPREAD[bm.dtype]) & ~rec["exact"]
    left = torch.where(ok, torch.exp(expo.clamp_max(SAFE_SPREAD[bm.dtype])), 0.0)
    right = torch.exp(rm - top)
    grad = (torch.einsum("bnrd,bnsd->rsd", left * b1, right * rh)
            - torch.einsum("bnrd,bnsd->rsd", left * b2, right * ru))
    P = torch.exp(logs - lmax) * grad
    B, N, _, D = bm.shape
    cols = _columns(rec["exact"].expand(B, N, 1, D)).squeeze(1).nonzero().squeeze(1)
    if cols.numel():
        P = P.index_add(2, *_exact_lag_correlations(adj, rec["rhs"], logs, cols))
    bits = _lag_bits(rec["C"], rec["c"], logs.device)
    return torch.einsum("rsk,rsd->kd", bits, P.to(torch.float64))


def _exact_lag_correlations(adj, rhs, logs, cols):
    """(channel index, values (C, 2C, n)) of the exact columns' P terms (index_add form)."""
    bm, b1, b2 = (_columns(t)[cols] for t in adj)
    rm, rh, ru = (_columns(t)[cols] for t in rhs)
    per_channel = logs.permute(2, 0, 1)
    parts = []
    for sl in _column_blocks(cols, logs):
        logit = per_channel[cols[sl] % logs.shape[-1]] + bm[sl, :, None] + rm[sl, None, :]
        parts.append(torch.exp(logit) * (b1[sl, :, None] * rh[sl, None, :]
                                         - b2[sl, :, None] * ru[sl, None, :]))
    return cols % logs.shape[-1], torch.cat(parts).permute(1, 2, 0)


def carry_adjoint(adj, rec, mul=product):
    """The adjoint of the chunk-level carries, one triple (B, N, C, D): ``T^T adj`` (the
    transposed products) gives chunk Q's adjoint of Y_Q and of Z_{Q-1}; the latter moves
    to chunk Q - 1 and the two are merged (with the row gates of the chunk-level scan they
    are one adjoint: docs/design.md §18)."""
    logs, dq, C = rec["logs"], rec["doc"], rec["C"]
    out, _ = inter(adj, logs.transpose(0, 1), mul)
    lam_y = tuple(t[:, :, :C] for t in out)
    lam_z = tuple(t[:, :, C:] for t in out)  # chunk Q's adjoint of Z_{Q-1}
    if dq is not None:
        lam_z = _select(_previous_rows_kept(dq), lam_z, _dead(lam_z[0]))
    dead = _dead(lam_z[0][:, :1])
    lam_z = tuple(torch.cat([t[:, 1:], d], 1) for t, d in zip(lam_z, dead))
    return combine(*lam_y, *lam_z)


def log_w_grad(adj, log_w, rec, nlev: int, mul=product) -> torch.Tensor:
    """d log_w (nlev, D) float64 from the output adjoint ``adj`` (bm, b1, b2) (B, L, D)
    and the forward's ``record``: the low levels' terms in the chunks' own levels and
    through the matrix, the high levels' in the chunk-level scan."""
    B, L, D = adj[0].shape
    c, N, C, dq = rec["c"], rec["N"], rec["C"], rec["doc"]
    out = torch.zeros((nlev, D), dtype=torch.float64, device=log_w.device)
    adj4 = _in_chunks(adj, (neg_sentinel(adj[0].dtype), 0.0, 0.0), N, C)
    flat = tuple(t.reshape(B * N, C, D) for t in adj4)
    flat_doc = None if dq is None else dq.reshape(B * N, C)
    out[:c] = mirrored_levels(rec["intra"], flat, log_w[:c], [1 << k for k in range(c)],
                              flat_doc)
    if N > 1:
        if dq is not None:  # rows behind a document start inside their chunk sent nothing
            adj4 = _select(_rows_kept(dq), adj4, _dead(adj4[0]))
        out[:c] += product_log_w_grad(adj4, rec)
        out[c:] = mirrored_levels(rec["full"], carry_adjoint(adj4, rec, mul),
                                  log_w[c:nlev], [1 << (k - c) for k in range(c, nlev)], dq)
    return out


def _flip(state):
    return tuple(None if t is None else t.flip(1) for t in state)


def fwd(a, v, log_w, mask, doc, n_causal: int, nlev: int, mul=product) -> torch.Tensor:
    """O = H / U.  a, v: (B, L, D); log_w: (>= nlev, D); mask: (B, L) bool or None;
    doc: (B, L) int64 or None.  Channels [0, n_causal) causal, the rest anti-causal."""
    B, L, D = a.shape
    out = torch.empty_like(a)
    for part, rev in _parts(D, n_causal):
        msk, dc = _oriented(mask, rev), _oriented(doc, rev)
        for ch in _chunks(part, B, L, TEMPORARIES):
            state = initial_state(_oriented(a[..., ch], rev), _oriented(v[..., ch], rev), msk)
            _, fh, fu = chunk_states(*state, log_w[:, ch], dc, nlev, mul)
            out[..., ch] = _oriented(fh / fu, rev)
    return out


def bwd(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int, mul=product):
    """Gradients (dA, dV, dlog_w) of ``sum(grad * fwd(...))``; dlog_w (nlev, D) float64."""
    B, L, D = a.shape
    da, dv = torch.empty_like(a), torch.empty_like(a)
    dlogw = torch.zeros((nlev, D), dtype=torch.float64, device=a.device)
    for part, rev in _parts(D, n_causal):
        msk, dc = _oriented(mask, rev), _oriented(doc, rev)
        for ch in _chunks(part, B, L, TEMPORARIES + nlev):
            args = [_oriented(x[..., ch], rev) for x in (a, v, grad)]
            gA, gV, gw = _bwd_chunk(*args, log_w[:nlev, ch], msk, dc, nlev, mul)
            da[..., ch], dv[..., ch] = _oriented(gA, rev), _oriented(gV, rev)
            dlogw[:, ch] = gw
    return da, dv, dlogw


def _bwd_chunk(a, v, g, log_w, mask, doc, nlev: int, mul):
    """Causal backward of one channel chunk (already oriented)."""
    record: dict = {}
    fm, fh, fu = chunk_states(*initial_state(a, v, mask), log_w, doc, nlev, mul, record)
    o = fh / fu
    bm, g = adjoint_scale(fm, fu, o, g)
    adj = (bm, g, g * o)
    # dA, dV: the same scan run anti-causally on the adjoint (the transposed products)
    rm, r1, r2 = _flip(chunk_states(*_flip(adj), log_w, None if doc is None else doc.flip(1),
                                    nlev, mul))
    e = torch.exp(a + rm)
    dv = e * r1
    da = v * dv - e * r2
    if mask is not None:  # padded inputs get 0, even beside a NaN
        valid = mask.unsqueeze(-1)
        zero = torch.zeros((), dtype=da.dtype, device=da.device)
        da, dv = torch.where(valid, da, zero), torch.where(valid, dv, zero)
    if nlev == 0 or a.shape[1] == 0:  # no level in use
        return da, dv, torch.zeros(log_w.shape, dtype=torch.float64, device=a.device)
    poison = (o * 0).sum((0, 1), dtype=torch.float64)  # NaN for a channel with a NaN output
    return da, dv, log_w_grad(adj, log_w, record, nlev, mul) + poison
