"""Ring attention cases on P gloo processes (one spawn per group size,
helpers/context_parallel.py): every process builds the same full inputs from each case's
seed, runs ``ring_softmax_attention`` on its shard (forward, and a backward of
``sum(out * grad)`` over its shard), and returns its shards of O, dQ, dK, dV, the bytes
it sent and what the op saved for its backward.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class RingCase:
    """One sharded attention: shard lengths in group rank order and what the inputs hold.

    spread: the standard deviation of q and k's entries (scores ~ spread**2).
    kernel: the block kernel (``ring_attention._BLOCK_KERNEL``); budget: the matmul
    kernel's score budget (``SCORES_BUDGET``), None for the default.
    layer: None (the op), or ``"dropout"``: a SoftmaxAttention layer with dropout, run in
    training mode (the all-gather fallback) and in eval mode (the ring).
    """

    name: str
    lengths: tuple[int, ...]
    causal: bool = True
    masked: bool = False
    dtype: str = "float64"
    spread: float = 1.0
    kernel: str = "auto"
    budget: int | None = None
    scale: float | None = None
    members: tuple[int, ...] | None = None
    layer: str | None = None
    B: int = 3
    H: int = 2
    d: int = 8
    seed: int = 0

    @property
    def total(self) -> int:
        return sum(self.lengths)


def inputs(case: RingCase):
    """Full (q, k, v, mask, grad) in the case's dtype; the mask, when there is one, has
    ~30% padding, the second shard wholly padded, row 0's first 3 keys padded (its first
    queries see no real key when causal) and the last row wholly padded."""
    g = torch.Generator().manual_seed(case.seed)
    B, H, L, d = case.B, case.H, case.total, case.d
    dtype = getattr(torch, case.dtype)
    q, k = (torch.randn(B, H, L, d, dtype=torch.float64, generator=g) * case.spread
            for _ in range(2))
    v, grad = (torch.randn(B, H, L, d, dtype=torch.float64, generator=g) for _ in range(2))
    mask = None
    if case.masked:
        mask = torch.rand(B, L, generator=g) > 0.3
        if len(case.lengths) > 1:
            mask[:, case.lengths[0]:case.lengths[0] + case.lengths[1]] = False
        mask[0, :3] = False
        mask[-1] = False
    return q.to(dtype), k.to(dtype), v.to(dtype), mask, grad.to(dtype)


def shard(x, case: RingCase, index: int, dim: int = 2):
    """Group rank ``index``'s shard of x along ``dim`` (or None)."""
    if x is None:
        return None
    off = sum(case.lengths[:index])
    return x.narrow(dim, off, case.lengths[index])


@contextlib.contextmanager
def kernel(case: RingCase):
    """The case's block kernel and score budget, inside the block."""
    from weirdnet.ops import ring_attention

    saved = ring_attention._BLOCK_KERNEL, ring_attention.SCORES_BUDGET
    ring_attention._BLOCK_KERNEL = case.kernel
    ring_attention.SCORES_BUDGET = case.budget or saved[1]
    try:
        yield
    finally:
        ring_attention._BLOCK_KERNEL, ring_attention.SCORES_BUDGET = saved


def _run_op(case: RingCase, group, index: int) -> dict:
    from weirdnet.ops.ring_attention import ring_softmax_attention
    from weirdnet.ops.sequence_shards import shard_layout
    from weirdnet.ops.shard_transfers import count_sent_bytes

    group = dist.group.WORLD if group is None else group
    q, k, v, mask, grad = inputs(case)
    leaves = [shard(x, case, index).clone().requires_grad_() for x in (q, k, v)]
    mask = shard(mask, case, index, 1)
    layout = shard_layout(case.lengths[index], group, q.device)
    saved = {}

    def pack(t):  # distinct storages, and the most positions any saved tensor has
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = (storage.nbytes(), t.shape[2] if t.dim() > 2 else 0)
        return t

    with (kernel(case), count_sent_bytes() as sent,
          torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)):
        out = ring_softmax_attention(*leaves, layout, group, causal=case.causal, mask=mask,
                                     scale=case.scale)
        out.backward(shard(grad, case, index))
    return dict(o=out.detach(), dq=leaves[0].grad, dk=leaves[1].grad, dv=leaves[2].grad,
                forward=sent.ring_forward, backward=sent.ring_backward,
                saved=sum(b for b, _ in saved.values()),
                saved_positions=max((p for _, p in saved.values()), default=0))


def _run_dropout_layer(case: RingCase, group, index: int) -> dict:
    """Bytes sent point to point by a SoftmaxAttention with dropout, training and eval."""
    from weirdnet.layers.softmax import SoftmaxAttention
    from weirdnet.ops.context_parallel import ContextParallel
    from weirdnet.ops.shard_transfers import count_sent_bytes

    torch.manual_seed(case.seed)
    layer = SoftmaxAttention(case.H * case.d, heads=case.H, causal=case.causal, dropout=0.5)
    x = torch.randn(case.B, case.lengths[index], case.H * case.d)
    sent = {}
    for mode in ("train", "eval"):
        getattr(layer, mode)()
        with count_sent_bytes() as counter, ContextParallel(group):
            out = layer(x)
            out.sum().backward()
        sent[mode] = (counter.ring_forward, counter.ring_backward, bool(torch.isfinite(out).all()))
    return sent


def run_ring_cases(cases: list[RingCase], rank: int, world: int) -> dict:
    """This rank's results of the cases it takes part in (helpers.context_parallel.spawn)."""
    torch.set_num_threads(1)
    groups = {c.members: dist.new_group(list(c.members)) for c in cases if c.members}
    results = {}
    for case in cases:
        members = case.members or tuple(range(world))
        if rank in members:
            run = _run_dropout_layer if case.layer == "dropout" else _run_op
            results[case.name] = run(case, groups.get(case.members),
                                     sorted(members).index(rank))
    return results
