"""Differentiable exchanges between the ranks that hold one sequence's contiguous shards.

The sharded forms of the sequence ops other than the weird scan and softmax attention
(which have their own modules) are built from these; group rank order is sequence order,
shards of any length >= 1 (:class:`~weirdnet.ops.shard_transfers.ShardLayout`)::

    shard_layout(n, group, device)     every rank's shard length (one all_gather)
    global_positions(mask, layout, ..) (B, n) token positions in the whole sequence
    window_halo(x, layout, b, a, grp)  x with the b positions in front of the shard and
                                       the a behind it (point to point; backward sends the
                                       halo's gradient back to its owners)
    gather_sequence(x, layout, grp)    the whole sequence's x (all_gather; backward: the
                                       sum of every rank's gradient, own slice)
    exclusive_prefix(s, layout, grp)   sum of s over the earlier shards (all_gather)
    group_sum(s, grp)                  sum of s over the group (all_reduce)

Every gradient returned is this rank's share of the single-process gradient's inputs:
what flows back to a tensor on this rank from every rank's outputs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .shard_transfers import ShardLayout, post_transfers


def shard_layout(n: int, group, device) -> ShardLayout:
    """The layout of a sequence whose shard on this rank has ``n`` positions (one
    all_gather of the lengths).  ValueError on every rank alike if a shard is empty."""
    P, me = dist.get_world_size(group), dist.get_rank(group)
    mine = torch.tensor([n], dtype=torch.int64, device=device)
    gathered = [torch.empty_like(mine) for _ in range(P)]
    dist.all_gather(gathered, mine, group=group)
    lengths = tuple(int(t) for t in gathered)
    if min(lengths) < 1:
        raise ValueError(f"a sharded sequence needs at least one position on each of the "
                         f"P = {P} ranks, got shard lengths {list(lengths)} "
                         f"(L = {sum(lengths)})")
    ranks = tuple(dist.get_global_rank(group, q) for q in range(P))
    return ShardLayout(lengths, me, ranks, tuple(range(P)))


def _gathered(x: torch.Tensor, layout: ShardLayout, group) -> list[torch.Tensor]:
    """Every rank's ``x`` (the same shape everywhere), in sequence order."""
    parts = [torch.empty_like(x) for _ in layout.lengths]
    dist.all_gather(parts, x.contiguous(), group=group)
    return parts


def global_positions(mask: torch.Tensor | None, layout: ShardLayout, group,
                     batch: int, device) -> torch.Tensor:
    """(B, n) int64: this shard's token positions in the whole sequence, counted as
    :func:`weirdnet.ops.rotary.token_positions` counts them on one process (real tokens
    before, the earlier shards' included; one all_gather of (B,) counts with a mask)."""
    n = layout.length
    if mask is None:
        return torch.arange(layout.start, layout.start + n, device=device).expand(batch, n)
    counts = torch.stack(_gathered(mask.sum(1, dtype=torch.int64), layout, group))
    before = counts[:layout.index].sum(0)
    return (mask.long().cumsum(1) - 1 + before.unsqueeze(1)).clamp(min=0)


def _with_halo(x, layout: ShardLayout, before: int, after: int, group):
    """(cat([front halo, x, back halo], 1), the plan, the front halo's length)."""
    plan = layout.plan_window(before, after)
    halo = post_transfers((x,), layout, plan, group, "forward").wait()[0]
    front = layout.start - max(0, layout.start - before)
    return torch.cat([halo[:, :front], x, halo[:, front:]], 1), plan, front


class _WindowHalo(torch.autograd.Function):
    """cat([front halo, x, back halo], 1); backward returns each halo's gradient to the
    rank it came from."""

    @staticmethod
    def forward(ctx, x, layout, before, after, group):
        out, plan, front = _with_halo(x, layout, before, after, group)
        ctx.layout, ctx.plan, ctx.group, ctx.front = layout, plan, group, front
        return out

    @staticmethod
    def backward(ctx, grad):
        layout, n, front = ctx.layout, ctx.layout.length, ctx.front
        own = grad[:, front:front + n].clone()
        halo_grad = torch.cat([grad[:, :front], grad[:, front + n:]], 1)
        ops, received, at = [], [], 0
        me, off = layout.index, layout.start
        for src, dst, lo, hi in ctx.plan:  # the forward's transfers, reversed
            if dst == me:
                piece = halo_grad[:, at:at + hi - lo].contiguous()
                ops.append(dist.P2POp(dist.isend, piece, layout.ranks[src], ctx.group))
                at += hi - lo
            elif src == me:
                buf = grad.new_empty((grad.shape[0], hi - lo, *grad.shape[2:]))
                ops.append(dist.P2POp(dist.irecv, buf, layout.ranks[dst], ctx.group))
                received.append((lo - off, buf))
        for work in dist.batch_isend_irecv(ops) if ops else []:
            work.wait()
        for lo, buf in received:
            own[:, lo:lo + buf.shape[1]] += buf
        return own, None, None, None, None


def window_halo(x: torch.Tensor, layout: ShardLayout, before: int, after: int,
                group) -> tuple[torch.Tensor, int]:
    """(x_ext, front): x (B, n, ...) with the ``before`` positions in front of this shard
    and the ``after`` behind it (clipped at the sequence's ends; they may span several
    ranks), x_ext (B, front + n + back, ...); ``front`` is where x starts in it.
    Differentiable in a floating x (an integer or bool x travels as int64, without
    gradient)."""
    if not x.is_floating_point():
        dtype = x.dtype
        out, _, front = _with_halo(x.to(torch.int64), layout, before, after, group)
        return out.to(dtype), front
    out = _WindowHalo.apply(x, layout, before, after, group)
    return out, layout.start - max(0, layout.start - before)


class _GatherSequence(torch.autograd.Function):
    """The first ``upto`` positions of the whole sequence; backward: all_reduce of the
    gradient, this rank's slice."""

    @staticmethod
    def forward(ctx, x, layout, upto, group):
        longest = max(layout.lengths)
        pad = x.new_zeros((x.shape[0], longest - x.shape[1], *x.shape[2:]))
        parts = _gathered(torch.cat([x, pad], 1), layout, group)
        whole = torch.cat([p[:, :m] for p, m in zip(parts, layout.lengths)], 1)
        ctx.layout, ctx.group = layout, group
        return whole[:, :upto]

    @staticmethod
    def backward(ctx, grad):
        layout = ctx.layout
        full = grad.new_zeros((grad.shape[0], layout.total, *grad.shape[2:]))
        full[:, :grad.shape[1]] = grad
        dist.all_reduce(full, group=ctx.group)
        return full[:, layout.start:layout.start + layout.length], None, None, None


def gather_sequence(x: torch.Tensor, layout: ShardLayout, group,
                    upto: int | None = None) -> torch.Tensor:
    """(B, upto, ...): positions [0, upto) (default: all L) of the sequence whose shard on
    this rank is x (B, n, ...).  Differentiable in a floating x; a bool x travels as
    uint8 (gloo has no bool) and comes back bool."""
    upto = layout.total if upto is None else upto
    if x.dtype == torch.bool:
        return _GatherSequence.apply(x.to(torch.uint8), layout, upto, group).bool()
    return _GatherSequence.apply(x, layout, upto, group)


class _ExclusivePrefix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s, layout, group):
        ctx.layout, ctx.group = layout, group
        parts = _gathered(s, layout, group)[:layout.index]
        return torch.stack(parts).sum(0) if parts else torch.zeros_like(s)

    @staticmethod
    def backward(ctx, grad):
        later = _gathered(grad, ctx.layout, ctx.group)[ctx.layout.index + 1:]
        return (torch.stack(later).sum(0) if later else torch.zeros_like(grad)), None, None


def exclusive_prefix(s: torch.Tensor, layout: ShardLayout, group) -> torch.Tensor:
    """The sum of ``s`` (any shape, alike on every rank) over the earlier shards (zeros on
    the first); backward: the sum of the later shards' gradients."""
    return _ExclusivePrefix.apply(s, layout, group)


class _GroupSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s, group):
        ctx.group = group
        out = s.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        out = grad.contiguous().clone()
        dist.all_reduce(out, group=ctx.group)
        return out, None


def group_sum(s: torch.Tensor, group) -> torch.Tensor:
    """The sum of ``s`` over the group (every rank gets it); backward the same."""
    return _GroupSum.apply(s, group)
