"""``weird_scan`` over a process group: one sequence in contiguous shards, exact.

Each rank of a ``torch.distributed`` group holds one contiguous shard of the sequence
(group rank order = sequence order; shards of any length >= 1).  The scan is the
single-process log-step scan of ``pytorch.py`` (the ``"torch"`` backend), level by level,
with *distributed halos* (:mod:`.halo`): at level k a position combines its running-max
state with the state 2^k back, and where that state lives on an earlier rank it arrives by
point-to-point messages, posted before the rank combines the positions whose partners it
already holds (the communication overlaps that work).  The combine is the same function
on the same operands, so outputs, dA and dV are bitwise those of
``weird_scan(..., backend="torch")`` on the whole sequence.

Backward: the mirrored scan of ``pytorch.py``, written out (the custom op
``weirdnet::weird_scan_cp`` with its registered backward, not autograd through the
levels).  With ``halos="keep"`` the forward keeps, besides the inputs, the halos it
received (about ``2 n + n log2 P`` positions' states for equal shards: the same order as
the inputs) and the backward recomputes the local levels from them without
communicating; with ``halos="resend"`` it keeps the inputs only and the backward
receives each channel block's halos again.  Then it runs the adjoint scan, whose partners
lie 2^k *ahead*, so the adjoint halos come from later ranks.  Being a custom op, its
outputs can be kept by selective activation checkpointing
(:func:`weirdnet.ops.sharded_checkpoint_context`).  Both directions run one block of
channels at a time
(:func:`channel_blocks`: 16 MiB of temporaries, sized for the longest shard so
every rank cuts the same blocks and the per-block messages pair up), so the backward holds
all levels' states of one block, not of every channel: the same bytes as one block for all
channels, in more messages.

Packed documents: ``doc_ids`` is sharded like the sequence.  One ``all_gather`` of a few
integers per row and rank gives every position the global bounds of its document, so the
per-level check (partner in the same document) needs no further messages.

d log_w: each rank returns the contribution of its own positions (see
:func:`weird_scan_context_parallel`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..checks import FLOAT_DTYPES, check_finite_log_w, check_scan_inputs, levels_needed, on_host
from ..shard_transfers import ReadyHalo, ShardLayout, op_group, op_group_name, start_halo
from .dispatch import compute_dtype
from .pytorch import adjoint_scale, combine, initial_state, level_weights, merge_level, natural

_META = 8  # n, B, D, dtype, K, mask?, doc?, local error?
HALOS = ("keep", "resend")
"""What the backward recomputes the forward levels from (``halos=``)."""
# Values of (B, n, block) temporaries a channel block may hold at once, times levels: 16 MiB
# of float32, an eighth of the single-process torch backend's (the sharded scan exists to
# hold less than one process; more blocks only mean more, smaller messages).
_BLOCK_BUDGET = 1 << 22


def weird_scan_context_parallel(a, v, log_w, *, group=None, reverse=False, mask=None,
                                doc_ids=None, halos="keep"):
    """:func:`weirdnet.ops.weird_scan` of a sequence sharded over a process group.

    Every rank of ``group`` calls this with its own contiguous shard; group rank r holds
    the r-th shard in sequence order.  Shards may have any lengths >= 1 (they need not be
    equal or divide anything); batch, channels, dtype, ``log_w`` and the presence of
    ``mask`` / ``doc_ids`` must agree across ranks.

    Args:
        a, v: (B, n, D) this rank's shard of the logits and values (n may differ by rank).
        log_w: (K, D), the same on every rank, K >= ceil(log2 L) for the global length L.
        group: the ``torch.distributed`` process group (None: the default group, which
            must be initialised).  Works with gloo (CPU) and NCCL (CUDA).
        reverse: the anti-causal scan (each output sees its shard and the later ones).
        mask: optional (B, n) bool shard of the mask.
        doc_ids: optional (B, n) integer shard of the packed documents' ids; a document
            may span shards (a change of id at a shard's first position, against the
            previous shard's last, starts a document, as on one process).
        halos: what the backward recomputes the forward levels from.  "keep": the halos
            the forward received, kept between forward and backward (about
            3 (2 + log2 P) values per position and channel on the last rank); "resend":
            nothing kept but the inputs, the forward's halos are exchanged again in the
            backward, one channel block at a time (the forward's bytes once more; the
            memory of one block).  Under activation checkpointing,
            :func:`weirdnet.ops.sharded_checkpoint_context` keeps the op's outputs so
            the recomputation does not run it: a step sends what it sends unchecked.

    Returns:
        O: (B, n) x D, this rank's shard of the single-process output, in ``a``'s dtype.

    Gradients: dA and dV are this rank's shards of the single-process gradients (they
    include what the later ranks' outputs contribute).  d log_w is this rank's *share*:
    the part of the single-process d log_w that its positions contribute, so the sum over
    the group is the single-process d log_w.  That is the convention of every other
    weight of a context-parallel model (a projection's gradient on a rank comes from that
    rank's tokens alone), so the usual gradient reduction of DDP / FSDP over the ranks
    that share the weights (data-parallel x context-parallel) gives the right gradient;
    summing here as well would count it P times.

    Raises:
        ValueError: on every rank alike, for no initialised process group; a rank
            holding no positions (e.g. P larger than L); shards that disagree in batch,
            channels, dtype, ``log_w``'s shape or the presence of ``mask`` /
            ``doc_ids``; ``log_w`` with too few levels for L; a rank whose own arguments
            are invalid (that rank raises its own message, the others say which rank);
            ``halos`` not one of :data:`HALOS` (this rank, before any message).

    Computation in float32 (float64 for float64 inputs), on any device.  Bytes sent:
    ``docs/context_parallel.md`` (:func:`weirdnet.ops.shard_transfers.count_sent_bytes`
    counts them).
    """
    if halos not in HALOS:
        raise ValueError(f"halos must be one of {HALOS}, got {halos!r}")
    group = _check_group(group)
    layout = _layout(a, v, log_w, mask, doc_ids, group, bool(reverse))
    flip = (lambda x: x.flip(1)) if reverse else (lambda x: x)
    bounds = None if doc_ids is None else document_bounds(flip(doc_ids), layout, group)
    mask = None if mask is None else flip(mask)
    start, end = bounds if bounds is not None else (None, None)
    out, _ = torch.ops.weirdnet.weird_scan_cp(
        flip(a), flip(v), log_w, mask, start, end, *layout.op_args(), op_group_name(group),
        halos == "keep")
    return flip(out)


def weird_scan_bidirectional_context_parallel(a, v, log_w, *, group=None, mask=None,
                                              doc_ids=None, split=None, halos="keep"):
    """:func:`weirdnet.ops.weird_scan_bidirectional` of a sharded sequence: channels
    [0, split) causal, [split, D) anti-causal (split defaults to D // 2); arguments and
    gradients as :func:`weird_scan_context_parallel`.  Returns O (B, n, D)."""
    D = a.shape[-1]
    split = D // 2 if split is None else int(split)
    if not 0 <= split <= D:
        raise ValueError(f"split must be in [0, D={D}], got {split}")
    parts = []
    for sl, rev in ((slice(0, split), False), (slice(split, D), True)):
        if sl.start < sl.stop:
            parts.append(weird_scan_context_parallel(
                a[..., sl], v[..., sl], log_w[:, sl], group=group, reverse=rev, mask=mask,
                doc_ids=doc_ids, halos=halos))
    return torch.cat(parts, -1)


# --- arguments and layout --------------------------------------------------------------


def _check_group(group):
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("weird_scan_context_parallel needs an initialised torch.distributed "
                         "process group (torch.distributed.init_process_group, or torchrun)")
    return group if group is not None else dist.group.WORLD


def _local_meta(a, v, log_w, mask, doc_ids) -> tuple[list[int], ValueError | None]:
    """This rank's row of the gathered shapes, or a row flagged invalid and the error."""
    try:
        B, n, D = check_scan_inputs(a, v, log_w, mask, doc_ids)
    except ValueError as err:
        return [-1] * (_META - 1) + [1], err
    return [n, B, D, FLOAT_DTYPES.index(a.dtype), *log_w.shape[:1],
            mask is not None, doc_ids is not None, 0], None


def _layout(a, v, log_w, mask, doc_ids, group, reverse: bool) -> ShardLayout:
    """Gather every rank's shard shape and check that they fit together (ValueError on
    every rank alike); returns the layout in scan order (reversed for ``reverse``)."""
    meta, err = _local_meta(a, v, log_w, mask, doc_ids)
    device = a.device if isinstance(a, torch.Tensor) else torch.device("cpu")
    P, me = dist.get_world_size(group), dist.get_rank(group)
    mine = torch.tensor(meta, dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(P)]
    dist.all_gather(gathered, mine, group=group)
    rows = [[int(x) for x in t.cpu()] for t in gathered]
    if err is not None:
        raise err
    _check_rows(rows, me)
    lengths = [r[0] for r in rows]
    L = sum(lengths)
    if log_w.shape[0] < levels_needed(L):
        raise ValueError(f"log_w has {log_w.shape[0]} levels; the sharded sequence of "
                         f"L = {L} positions needs {levels_needed(L)}")
    if on_host(log_w):
        check_finite_log_w(log_w, levels_needed(L))
    ranks = [dist.get_global_rank(group, q) for q in range(P)]
    order = list(range(P))[::-1] if reverse else list(range(P))
    return ShardLayout(tuple(lengths[q] for q in order), order.index(me),
                       tuple(ranks[q] for q in order), tuple(order))


def _check_rows(rows: list[list[int]], me: int) -> None:
    bad = [q for q, r in enumerate(rows) if r[-1]]
    if bad:
        raise ValueError(f"weird_scan_context_parallel: the arguments of rank {bad[0]} are "
                         "invalid (that rank raised the reason)")
    lengths = [r[0] for r in rows]
    if min(lengths) < 1:
        raise ValueError(f"weird_scan_context_parallel needs at least one position on each "
                         f"of the P = {len(rows)} ranks, got shard lengths {lengths} "
                         f"(L = {sum(lengths)})")
    names = ("batch", "channels D", "dtype", "log_w levels", "mask", "doc_ids")
    for i, name in enumerate(names, start=1):
        values = [r[i] for r in rows]
        if len(set(values)) > 1:
            if name == "dtype":
                values = [str(FLOAT_DTYPES[x]) for x in values]
            raise ValueError(f"weird_scan_context_parallel: the ranks' shards disagree in "
                             f"{name}: {values} (rank order)")


def document_bounds(doc_ids: torch.Tensor, layout: ShardLayout, group):
    """(start, end): (B, n) int64 global bounds [start, end) of each position's document,
    from this rank's (oriented) ``doc_ids`` shard and one all_gather of per-shard
    summaries (first id, last id, first and last start inside the shard)."""
    B, n = doc_ids.shape
    off, L = layout.start, layout.total
    pos = torch.arange(off, off + n, device=doc_ids.device).expand(B, n)
    inner = torch.zeros((B, n), dtype=torch.bool, device=doc_ids.device)
    inner[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    none = torch.full_like(pos, -1)
    first_in = torch.where(inner, pos, torch.full_like(pos, L)).amin(1)
    last_in = torch.where(inner, pos, none).amax(1)
    mine = torch.stack([doc_ids[:, 0].long(), doc_ids[:, -1].long(), first_in, last_in])
    gathered = [torch.empty_like(mine) for _ in layout.lengths]
    dist.all_gather(gathered, mine, group=group)
    first, last, f_in, l_in = torch.stack([gathered[q] for q in layout.members]).unbind(1)
    starts0 = torch.ones_like(first, dtype=torch.bool)  # shard q begins a document
    starts0[1:] = first[1:] != last[:-1]
    offs = torch.tensor([layout.offset(q) for q in range(len(layout.lengths))],
                        device=doc_ids.device).unsqueeze(1)
    first_start = torch.where(starts0, offs, f_in)  # L: none in the shard
    last_start = torch.where(l_in >= 0, l_in, torch.where(starts0, offs, -1))
    q = layout.index
    before = last_start[:q].amax(0) if q else torch.zeros_like(first[0])  # rank 0: 0
    after = first_start[q + 1:].amin(0) if q + 1 < len(layout.lengths) \
        else torch.full_like(first[0], L)
    begin = inner.clone()
    begin[:, 0] = starts0[q]
    start = torch.where(begin, pos, none).cummax(1).values
    start = torch.where(start >= 0, start, before.unsqueeze(1))
    nxt = torch.where(inner, pos, torch.full_like(pos, L))  # a start at t ends t - 1's doc
    nxt = torch.cat([nxt[:, 1:], after.unsqueeze(1)], 1)
    end = nxt.flip(1).cummin(1).values.flip(1)
    return start, end


# --- the scan --------------------------------------------------------------------------


def _where(same, new, old):
    return new if same is None else tuple(torch.where(same, x, y) for x, y in zip(new, old))


def forward_level(state, halo, c, shift: int, layout: ShardLayout, bounds):
    """One forward level: every position with a partner ``shift`` back combines with it.

    state: (m, h, u) (B, n, D); halo: its ``wait()`` gives (3, B, h, D), the partners on
    earlier ranks (called after the local combine, so a pending exchange overlaps it);
    c: (D,); bounds: None or the documents' (start, end), (B, n) each.
    """
    n, s = layout.length, shift
    t0, t1 = _first_with_partner(layout, s), min(s, n)
    weight = level_weights(c)  # path A, as the PyTorch backend's levels
    local = ()
    if n > s:
        local = merge_level(tuple(x[:, s:] for x in state),
                            tuple(x[:, :n - s] for x in state), weight)
    near = merge_level(tuple(x[:, t0:t1] for x in state), halo.wait().unbind(0), weight)
    new = tuple(torch.cat(p, 1) for p in zip(near, local)) if local else near
    same = None if bounds is None else (_positions(layout, state[0]) - s
                                        >= bounds[0]).unsqueeze(-1)[:, t0:]
    new = _where(same, new, tuple(x[:, t0:] for x in state))
    return tuple(torch.cat([x[:, :t0], y], 1) for x, y in zip(state, new))


def _first_with_partner(layout: ShardLayout, shift: int) -> int:
    """Local index of the first position whose partner ``shift`` back exists."""
    return min(layout.length, max(0, shift - layout.start))


def _positions(layout: ShardLayout, like: torch.Tensor) -> torch.Tensor:
    return torch.arange(layout.start, layout.start + layout.length, device=like.device)


def _partners_back(states_k, halo, shift: int, n: int):
    """States at i - shift for the positions that have one: cat(halo, local[: n - s])."""
    return tuple(torch.cat([hx, x[:, :max(0, n - shift)]], 1)
                 for hx, x in zip(halo.unbind(0), states_k))


def channel_blocks(B: int, layout: ShardLayout, D: int, nlev: int) -> list[slice]:
    """Channel blocks of the scan for ``nlev`` levels' temporaries (``_BLOCK_BUDGET``),
    the same on every rank (sized for the longest shard), so that the ranks' per-block
    messages pair up."""
    step = max(1, _BLOCK_BUDGET // max(1, B * max(layout.lengths) * (3 * nlev + 6)))
    return [slice(start, min(D, start + step)) for start in range(0, D, step)]


def scan_forward(a, v, log_w, mask, layout, bounds, group, nlev: int, keep: bool = True):
    """(O, halos): O (B, n, D) and, with ``keep``, the halos every level received,
    concatenated along positions in level order, (3, B, sum h_k, D) (for the backward,
    :func:`halo_sizes` splits them; else None), computed one channel block at a time: it
    holds one block's state."""
    B, _, D = a.shape
    out = torch.empty_like(a)
    kept = levels = None
    if keep:
        sizes = halo_sizes(layout)
        kept = a.new_empty((3, B, sum(sizes), D))
        levels = kept.split(sizes, 2)
    for ch in channel_blocks(B, layout, D, 0):  # it holds two states, not nlev + 1
        state = initial_state(a[..., ch], v[..., ch], mask)
        for k in range(nlev):
            pending = start_halo(state, layout, 1 << k, False, group, "forward")
            state = forward_level(state, pending, log_w[k, ch], 1 << k, layout, bounds)
            if keep:
                levels[k][..., ch] = pending.wait()
        out[..., ch] = state[1] / state[2]
    return out, kept


def halo_sizes(layout: ShardLayout) -> list[int]:
    """h_k: the positions this rank receives at each forward level."""
    return [sum(hi - lo for _, dst, lo, hi in layout.plan(1 << k, False)
                if dst == layout.index) for k in range(levels_needed(layout.total))]


def scan_backward(a, v, log_w, mask, grad, halos, layout, bounds, group, nlev: int):
    """(dA, dV, dlog_w (nlev, D) float64, this rank's share); the mirrored scan, one
    channel block at a time: the forward levels are recomputed from the kept ``halos``
    or, where ``halos`` is None, with the forward's halo exchange again (phase
    "recompute"), so it holds (nlev + 1) states and the halos of one block, not of all
    channels."""
    B, _, D = a.shape
    da, dv = torch.empty_like(a), torch.empty_like(a)
    dlogw = torch.zeros((nlev, D), dtype=torch.float64, device=a.device)
    for ch in channel_blocks(B, layout, D, nlev):
        da[..., ch], dv[..., ch], dlogw[:, ch] = _backward_block(
            a[..., ch], v[..., ch], log_w[:, ch], mask, grad[..., ch],
            None if halos is None else [h[..., ch] for h in halos], layout, bounds,
            group, nlev)
    return da, dv, dlogw


def _forward_levels(a, v, log_w, mask, halos, layout, bounds, group, nlev: int):
    """(states, halos): the state before each level and after the last, (m, h, u)
    (B, n, d) each, and each level's halo (3, B, h_k, d): the given ``halos`` or, where
    None, received again from the earlier ranks."""
    states, received = [initial_state(a, v, mask)], []
    for k in range(nlev):
        halo = ReadyHalo(halos[k]) if halos is not None else start_halo(
            states[-1], layout, 1 << k, False, group, "recompute")
        states.append(forward_level(states[-1], halo, log_w[k], 1 << k, layout, bounds))
        received.append(halo.wait())
    return states, received


def _backward_block(a, v, log_w, mask, grad, halos, layout, bounds, group, nlev: int):
    """:func:`scan_backward` of one channel block: a, v, grad (B, n, d); log_w (nlev, d);
    halos (3, B, h_k, d) per level, or None (exchanged again).  Returns (dA, dV,
    dlog_w (nlev, d) float64)."""
    states, halos = _forward_levels(a, v, log_w, mask, halos, layout, bounds, group, nlev)
    fm, fh, fu = states.pop()
    o = fh / fu
    bm, g = adjoint_scale(fm, fu, o, grad)
    adj = (bm, g, g * o)
    poison = (o * 0).sum((0, 1), dtype=torch.float64)
    dlogw = torch.zeros((nlev, a.shape[-1]), dtype=torch.float64, device=a.device)
    pos = _positions(layout, a)
    n = layout.length
    for k in reversed(range(nlev)):
        s = 1 << k
        pending = start_halo(adj, layout, s, True, group, "backward")
        t0 = _first_with_partner(layout, s)
        sm, sh, su = _partners_back(states[k], halos[k], s, n)
        bm, b1, b2 = (x[:, t0:] for x in adj)
        mq = bm + log_w[k]
        term = torch.exp(mq + natural(sm)) * (sh * b1 - su * b2)
        if bounds is not None:  # no adjoint flows back across a document start
            term = torch.where((pos - s >= bounds[0]).unsqueeze(-1)[:, t0:], term,
                               torch.zeros((), dtype=term.dtype, device=term.device))
        dlogw[k] = term.sum((0, 1), dtype=torch.float64) + poison
        adj = _adjoint_level(adj, pending, log_w[k], s, layout, bounds, pos)
    e = torch.exp(a + adj[0])
    dv = e * adj[1]
    da = v * dv - e * adj[2]
    if mask is not None:  # padded inputs get 0, even beside a NaN
        valid = mask.unsqueeze(-1)
        zero = torch.zeros((), dtype=da.dtype, device=da.device)
        da, dv = torch.where(valid, da, zero), torch.where(valid, dv, zero)
    return da, dv, dlogw


def _adjoint_level(adj, pending, c, s: int, layout: ShardLayout, bounds, pos):
    """Merge into each position j the adjoint at j + s (local first, then the halo from
    later ranks); positions without one keep theirs."""
    n = layout.length
    j1 = max(0, min(n, layout.total - layout.start - s))
    if j1 == 0:
        pending.wait()
        return adj
    halo = pending.wait().unbind(0)
    partner = tuple(torch.cat([x[:, s:], hx], 1) for x, hx in zip(adj, halo))
    merged = combine(*(x[:, :j1] for x in adj), partner[0] + c, *partner[1:])
    same = None if bounds is None else (pos + s < bounds[1]).unsqueeze(-1)[:, :j1]
    merged = _where(same, merged, tuple(x[:, :j1] for x in adj))
    return tuple(torch.cat([y, x[:, j1:]], 1) for x, y in zip(adj, merged))


# --- the op: a custom op, so that selective checkpointing can keep its outputs ---------


@torch.library.custom_op("weirdnet::weird_scan_cp", mutates_args=())
def _scan_op(a: torch.Tensor, v: torch.Tensor, log_w: torch.Tensor,
             mask: torch.Tensor | None, doc_start: torch.Tensor | None,
             doc_end: torch.Tensor | None, lengths: list[int], index: int,
             ranks: list[int], members: list[int], group_name: str,
             keep: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The sharded scan's forward on oriented inputs: (O in a's dtype, the halos every
    level received, concatenated along positions, (3, B, sum h_k, D) in the compute dtype,
    with ``keep``; else an empty tensor)."""
    layout = ShardLayout.from_op_args(lengths, index, ranks, members)
    dtype = compute_dtype(a.dtype)
    bounds = None if doc_start is None else (doc_start, doc_end)
    out, kept = scan_forward(a.to(dtype), v.to(dtype), log_w.to(dtype), mask, layout,
                             bounds, op_group(group_name), levels_needed(layout.total), keep)
    return out.to(a.dtype), kept if keep else a.new_empty(0, dtype=dtype)


@_scan_op.register_fake
def _(a, v, log_w, mask, doc_start, doc_end, lengths, index, ranks, members, group_name,
      keep):
    layout = ShardLayout.from_op_args(lengths, index, ranks, members)
    positions = sum(halo_sizes(layout)) if keep else 0
    shape = (3, a.shape[0], positions, a.shape[2]) if keep else (0,)
    return torch.empty_like(a), a.new_empty(shape, dtype=compute_dtype(a.dtype))


def _setup(ctx, inputs, output):
    a, v, log_w, mask, doc_start, doc_end, lengths, index, ranks, members, name, keep = inputs
    ctx.save_for_backward(a, v, log_w, mask, doc_start, doc_end, output[1] if keep else None)
    ctx.layout = ShardLayout.from_op_args(lengths, index, ranks, members)
    ctx.group_name = name


def _backward(ctx, grad, _grad_halos):
    a, v, log_w, mask, doc_start, doc_end, kept = ctx.saved_tensors
    bounds = None if doc_start is None else (doc_start, doc_end)
    halos = None if kept is None else kept.split(halo_sizes(ctx.layout), 2)
    dtype = compute_dtype(a.dtype)
    nlev = levels_needed(ctx.layout.total)
    da, dv, dlogw = scan_backward(a.to(dtype), v.to(dtype), log_w.to(dtype), mask,
                                  grad.to(dtype), halos, ctx.layout, bounds,
                                  op_group(ctx.group_name), nlev)
    grad_log_w = log_w.new_zeros(log_w.shape)
    grad_log_w[:nlev] = dlogw.to(log_w.dtype)
    return (da.to(a.dtype), dv.to(v.dtype), grad_log_w) + (None,) * 9


_scan_op.register_autograd(_backward, setup_context=_setup)
