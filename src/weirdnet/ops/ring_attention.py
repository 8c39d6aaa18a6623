"""Ring attention: exact softmax attention over a sequence sharded over a process group.

Group rank r holds the r-th contiguous shard of the sequence (any lengths >= 1,
:class:`~weirdnet.ops.shard_transfers.ShardLayout`): queries ``q``, keys ``k`` and
values ``v`` (B, H, n_r, d) of its n_r positions, and their key-padding ``mask`` (B, n_r)
bool (True = real key).  Each rank gets its rows of the single-process
:func:`~weirdnet.ops.softmax_attention.softmax_attention` of the whole sequence,
(B, H, n_r, d), holding at most two other shards' blocks at a time (the one it computes
on and the one arriving).

**Forward.**  The (K, V, mask) blocks travel around the ring r -> r + 1 (mod P) in
P - 1 hops (``batch_isend_irecv``); the next hop is posted before the current block is
computed on.  At hop t rank r holds shard s = r - t's block and computes that block's
output and log-sum-exp (:func:`_attend`), merged into a running (out, lse) exactly (the
online softmax).  Causal: an earlier shard's block is fully visible, the own block is
causal on the diagonal (queries and keys of the same positions), a later shard's block is
skipped (and still passed on).  A masked key contributes nothing; a query that sees no
real key gets 0, as on one process.

**Backward** (:func:`_ring_backward`, ring flash-attention's): it keeps only this
rank's q, k, v, out, lse (and mask).  The (K, V, mask) blocks travel again; dQ is summed
here, and each block's (dK, dV) travels on a buffer that starts on the next rank, collects
every rank's part and arrives home after P - 1 hops.

**Per block** (:func:`_attend`, :func:`_attend_backward`): on a CPU, PyTorch's fused
flash kernel ``aten._scaled_dot_product_flash_attention_for_cpu`` (it returns the block's
log-sum-exp) and its ``_backward`` (which takes the merged out and lse, so the block's
gradients are exact); the padding mask is an additive (B, 1, 1, n_s) bias of 0 / -inf.
Elsewhere (or with ``_BLOCK_KERNEL = "matmul"``) plain matmuls in query chunks of at most
:data:`SCORES_BUDGET` score elements.  Memory is O(n_r) per rank either way.  The running
(out, lse), dQ and the travelling (dK, dV) are kept in float32 for float16 / bfloat16.

**Bytes** each rank sends (:func:`ring_sent_bytes`; counted by
:func:`weirdnet.ops.shard_transfers.count_sent_bytes`): forward, the blocks of every
shard but the next rank's, 2·H·d values per position for (K, V) plus 1 for the mask;
backward, those again plus (dK, dV), 2·H·d per position, of every shard but its own.  For
P equal shards of n: 2(P - 1)·n·H·d (+ (P - 1)·n) and 4(P - 1)·n·H·d (+ (P - 1)·n) per
batch row, in the inputs' dtype ((dK, dV) in float32 for float16 / bfloat16).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .shard_transfers import ShardLayout, op_group, op_group_name, record_sent
from .softmax_attention import check_qkv

SCORES_BUDGET = 1 << 22
"""Most score elements (all batch rows and heads) that one query chunk of the matmul
block kernel holds (16 MiB of float32)."""

_BLOCK_KERNEL = "auto"
"""``"auto"``: the fused CPU flash kernel on a CPU, matmuls elsewhere; ``"matmul"``:
matmuls everywhere (the tests run both)."""

_TAG_KV, _TAG_DKV = 0, 1  # the two streams of the backward, kept apart on gloo


def ring_sent_bytes(lengths, index: int, width: int, batch: int, dtype,
                    masked: bool) -> tuple[int, int]:
    """(forward, backward) bytes that shard ``index`` sends, for shards of ``lengths``,
    ``batch`` rows, K and V of ``width`` = H·d each in ``dtype``; ``masked``: the mask
    travels too (one value per position).  What ``count_sent_bytes`` counts."""
    P, L = len(lengths), sum(lengths)
    if P == 1:
        return 0, 0
    item = torch.empty(0, dtype=dtype).element_size()
    grad_item = torch.empty(0, dtype=torch.promote_types(dtype, torch.float32)).element_size()
    kv = (L - lengths[(index + 1) % P]) * (2 * width + int(masked)) * batch * item
    return kv, kv + (L - lengths[index]) * 2 * width * batch * grad_item


def _uses_cpu_kernel(q: torch.Tensor) -> bool:
    return _BLOCK_KERNEL == "auto" and q.device.type == "cpu"


def _bias(mask: torch.Tensor | None, dtype) -> torch.Tensor | None:
    """(B, 1, 1, n) additive bias: 0 for a real key, -inf for a masked one."""
    if mask is None:
        return None
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, -math.inf)[:, None, None, :]


def _sees_a_key(mask: torch.Tensor | None, rows: int, diagonal: bool):
    """(B, 1, rows) bool: the query rows that see at least one real key of the block
    (``mask`` (B, n_s) its keys' mask; ``diagonal``: row i sees keys <= i); None: all."""
    if mask is None:
        return None
    seen = mask.cumsum(1) > 0 if diagonal else mask.any(1, keepdim=True).expand(-1, rows)
    return seen[:, None, :]


def _scores(q, k, bias, diagonal: bool, scale: float, start: int) -> torch.Tensor:
    """(B, H, c, n_s) scores of the query rows [start, start + c) of q against k."""
    s = (q @ k.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias
    if diagonal:
        rows = torch.arange(start, start + q.shape[2], device=q.device)[:, None]
        s = s.masked_fill(torch.arange(k.shape[2], device=q.device) > rows, -math.inf)
    return s


def _chunks(q, k):
    """Query row ranges of the matmul kernel, each within :data:`SCORES_BUDGET`."""
    B, H, n, _ = q.shape
    rows = max(1, SCORES_BUDGET // (B * H * k.shape[2]))
    return [(a, min(n, a + rows)) for a in range(0, n, rows)]


def _attend(q, k, v, mask, diagonal: bool, scale: float):
    """One block: (out (B, H, n, d), lse (B, H, n)) of q against the block's k, v (B, H,
    n_s, d) under its key ``mask`` (B, n_s) (``diagonal``: n_s == n, row i sees keys <=
    i).  A row that sees no real key has out 0 and lse -inf."""
    bias = _bias(mask, q.dtype)
    if _uses_cpu_kernel(q):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, diagonal, attn_mask=bias, scale=scale)
    else:  # in float32 at least, like the kernel's lse
        q, k, v = (x.to(torch.promote_types(x.dtype, torch.float32)) for x in (q, k, v))
        bias = None if bias is None else bias.to(q.dtype)
        outs, lses = [], []
        for a, b in _chunks(q, k):
            s = _scores(q[:, :, a:b], k, bias, diagonal, scale, a)
            lse = s.logsumexp(-1)
            p = torch.exp(s - lse.masked_fill(lse == -math.inf, 0.0)[..., None])
            outs.append(p @ v)
            lses.append(lse)
        out, lse = torch.cat(outs, 2), torch.cat(lses, 2)
    seen = _sees_a_key(mask, q.shape[2], diagonal)
    if seen is None:
        return out, lse
    # the CPU kernel gives such rows lse 0: set -inf, so the merge gives them no weight
    return out.masked_fill(~seen[..., None], 0.0), lse.masked_fill(~seen, -math.inf)


def _attend_backward(dout, q, k, v, out, lse, mask, diagonal: bool, scale: float):
    """(dq, dk, dv) of one block, given the whole attention's ``out`` and ``lse`` (lse
    +inf on the rows that see no key, so they contribute nothing).  The matmul kernel
    computes and returns them in lse's dtype (float32 for float16 / bfloat16)."""
    bias = _bias(mask, q.dtype)
    if _uses_cpu_kernel(q):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, diagonal, attn_mask=bias, scale=scale)
    q, k, v, out, dout = (x.to(lse.dtype) for x in (q, k, v, out, dout))
    bias = None if bias is None else bias.to(q.dtype)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for a, b in _chunks(q, k):
        p = torch.exp(_scores(q[:, :, a:b], k, bias, diagonal, scale, a)
                      - lse[:, :, a:b, None])
        do = dout[:, :, a:b]
        dv += p.transpose(-1, -2) @ do
        ds = p * (do @ v.transpose(-1, -2) - (do * out[:, :, a:b]).sum(-1, keepdim=True))
        dq[:, :, a:b] = (ds @ k) * scale
        dk += (ds.transpose(-1, -2) @ q[:, :, a:b]) * scale
    return dq, dk, dv


def _merge(out, lse, out_b, lse_b):
    """The running (out, lse) with one more block's, exactly (rows at -inf stay 0);
    ``out`` is updated in place."""
    new = torch.logaddexp(lse, lse_b)
    safe = new.masked_fill(new == -math.inf, 0.0)
    out.mul_(torch.exp(lse - safe)[..., None])
    out.addcmul_(out_b, torch.exp(lse_b.to(new.dtype) - safe)[..., None])
    return out, new


class _Ring:
    """The ring's point-to-point hops: this rank sends to the next, receives from the
    previous (global ranks of ``layout.ranks``); sends are counted by phase."""

    def __init__(self, layout: ShardLayout, group):
        P, me = len(layout.lengths), layout.index
        self.next, self.prev = layout.ranks[(me + 1) % P], layout.ranks[(me - 1) % P]
        self.group = group

    def post(self, send: torch.Tensor, numel: int, tag: int, phase: str):
        """Post one hop: ``send`` (flat) out, ``numel`` values in; returns a callable
        that waits and returns the received tensor."""
        recv = send.new_empty(numel)
        works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, send, self.next, self.group, tag),
            dist.P2POp(dist.irecv, recv, self.prev, self.group, tag)])
        record_sent(phase, send)

        def wait():
            for work in works:
                work.wait()
            return recv
        return wait


def _pack(k, v, mask) -> torch.Tensor:
    """K, V (and the mask as 0 / 1 values) of one block, flat, to travel as one message."""
    parts = [k.reshape(-1), v.reshape(-1)]
    if mask is not None:
        parts.append(mask.reshape(-1).to(k.dtype))
    return torch.cat(parts)


def _unpack(flat, B, H, n, d, masked: bool):
    """(k, v, mask) of a block of n positions from :func:`_pack`'s message."""
    size = B * H * n * d
    k, v = flat[:size].view(B, H, n, d), flat[size:2 * size].view(B, H, n, d)
    return k, v, (flat[2 * size:].view(B, n) != 0) if masked else None


def _block_numel(B, H, n, d, masked: bool) -> int:
    return 2 * B * H * n * d + (B * n if masked else 0)


@torch.library.custom_op("weirdnet::ring_attention", mutates_args=())
def _ring_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
             lengths: list[int], index: int, ranks: list[int], members: list[int],
             group_name: str, causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The ring's forward: (out (B, H, n, d) in q's dtype, lse (B, H, n) in float32 or
    wider), a custom op so that selective checkpointing can keep both."""
    layout = ShardLayout.from_op_args(lengths, index, ranks, members)
    P, me = len(layout.lengths), layout.index
    B, H, _, d = q.shape
    masked = mask is not None
    acc = torch.promote_types(q.dtype, torch.float32)
    ring = _Ring(layout, op_group(group_name))
    out = q.new_zeros(q.shape, dtype=acc)
    lse = q.new_full(q.shape[:3], -math.inf, dtype=acc)
    block, kb, vb, mb = None, k, v, mask
    for t in range(P):
        s = (me - t) % P
        if t < P - 1:
            block = _pack(kb, vb, mb) if t == 0 else block
            nxt = ring.post(block, _block_numel(B, H, layout.lengths[s - 1], d, masked),
                            _TAG_KV, "ring_forward")
        if not causal or s <= me:
            out_b, lse_b = _attend(q, kb, vb, mb, causal and s == me, scale)
            out, lse = _merge(out, lse, out_b, lse_b)
        if t < P - 1:
            block = nxt()
            kb, vb, mb = _unpack(block, B, H, layout.lengths[s - 1], d, masked)
    return out.to(q.dtype), lse


@_ring_op.register_fake
def _(q, k, v, mask, lengths, index, ranks, members, group_name, causal, scale):
    acc = torch.promote_types(q.dtype, torch.float32)
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=acc)


def _ring_setup(ctx, inputs, output):
    q, k, v, mask, lengths, index, ranks, members, name, causal, scale = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], mask)
    ctx.layout = ShardLayout.from_op_args(lengths, index, ranks, members)
    ctx.group, ctx.causal, ctx.scale = op_group(name), causal, scale


def _ring_backward(ctx, dout, _dlse):
    """Ring flash-attention's backward (module docstring): dQ here, each block's
    (dK, dV) travelling home."""
    q, k, v, out, lse, mask = ctx.saved_tensors
    layout, causal, scale = ctx.layout, ctx.causal, ctx.scale
    P, me, lengths = len(layout.lengths), layout.index, layout.lengths
    B, H, _, d = q.shape
    masked = mask is not None
    acc = lse.dtype
    ring = _Ring(layout, ctx.group)
    dout = dout.contiguous()
    lse = lse.masked_fill(lse == -math.inf, math.inf)  # rows that see no key: p = 0
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    own = travelling = None
    block, kb, vb, mb = None, k, v, mask
    for t in range(P):
        s = (me - t) % P
        if t < P - 1:
            block = _pack(kb, vb, mb) if t == 0 else block
            nxt = ring.post(block, _block_numel(B, H, lengths[s - 1], d, masked),
                            _TAG_KV, "ring_backward")
        dkv_b = None
        if not causal or s <= me:
            dq_b, *dkv_b = _attend_backward(dout, q, kb, vb, out, lse, mb,
                                            causal and s == me, scale)
            dq += dq_b
        # block s's (dK, dV) so far: from the previous rank (none yet at t <= 1)
        grads = travelling() if t >= 2 else q.new_zeros(2 * B * H * lengths[s] * d,
                                                        dtype=acc)
        if dkv_b is not None:
            for total, part in zip(grads.view(2, *kb.shape), dkv_b, strict=True):
                total += part
        if t == 0:
            own = grads
        else:
            travelling = ring.post(grads, 2 * B * H * lengths[s - 1] * d, _TAG_DKV,
                                   "ring_backward")
        if t < P - 1:
            block = nxt()
            kb, vb, mb = _unpack(block, B, H, lengths[s - 1], d, masked)
    if P > 1:  # this rank's block, home with every other rank's part
        own += travelling()
    dk, dv = own.view(2, *k.shape).to(k.dtype)
    return (dq.to(q.dtype), dk, dv) + (None,) * 8


_ring_op.register_autograd(_ring_backward, setup_context=_ring_setup)


def ring_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           layout: ShardLayout, group, *, causal: bool,
                           mask: torch.Tensor | None = None,
                           scale: float | None = None) -> torch.Tensor:
    """This rank's rows of softmax attention over a sequence sharded over ``group``.

    q, k, v: (B, H, n, d) of this rank's shard (``layout``, e.g. from
    :func:`weirdnet.ops.sequence_shards.shard_layout`); ``mask`` (B, n) bool, True = real
    key, or None; ``causal``: query i sees keys j <= i (global positions); ``scale``: the
    score scale, default 1 / sqrt(d).  Returns (B, H, n, d), the rows of
    :func:`~weirdnet.ops.softmax_attention.softmax_attention` on the whole sequence (0
    for a query that sees no real key).  Differentiable in q, k, v.  Every rank of the
    group must call it with the same B, H, d, dtype, ``causal`` and whether a mask is
    given.  No dropout: see ``weirdnet.ops.sequence_softmax_attention``.
    """
    check_qkv(q, k, v, mask, same_length=True)
    if v.shape != k.shape:
        raise ValueError(f"ring attention needs v of k's shape {tuple(k.shape)}, "
                         f"got {tuple(v.shape)}")
    if q.shape[2] != layout.length:
        raise ValueError(f"q has {q.shape[2]} positions, the layout gives this rank "
                         f"{layout.length}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out, _ = torch.ops.weirdnet.ring_attention(
        q, k, v, mask, *layout.op_args(), op_group_name(group), bool(causal), scale)
    return out
