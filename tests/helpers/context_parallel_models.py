"""Whole backbones on a sequence sharded over P gloo processes (one spawn per group size,
helpers/context_parallel.py): each rank builds the same model from the case's seed, runs
its shard forward and a backward of ``sum(out * grad)`` over its shard (so the group's
losses add up to the single-process loss), and returns its output shard and its
parameter gradients; refusal cases return the ValueError's message.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ModelCase:
    """A backbone (``config``: BackboneConfig keywords) on shards of these lengths."""

    name: str
    lengths: tuple[int, ...]
    config: dict = field(default_factory=dict, hash=False, compare=False)
    masked: bool = False
    docs: bool = False
    members: tuple[int, ...] | None = None
    B: int = 2
    seed: int = 0
    halos: str = "resend"  # ContextParallel.halos
    checkpoint: bool = False  # training mode, activation checkpointing per block
    recompute_exchanges: bool = False  # ContextParallel.recompute_exchanges

    @property
    def total(self) -> int:
        return sum(self.lengths)


def _mode(model, case: ModelCase):
    """Training with block checkpointing (FFN chunks of 64) for ``case.checkpoint``."""
    if case.checkpoint:
        model.train()
        model.set_activation_checkpointing("blocks", 2, 64)
    return model


BASE = dict(dim=16, depth=2, heads=2, d_ff=32, max_len=1024, vocab_size=64, causal=True)


def build(case: ModelCase):
    from weirdnet.models.backbone import Backbone
    from weirdnet.models.config import BackboneConfig

    torch.manual_seed(case.seed)
    return Backbone(BackboneConfig(**{**BASE, **case.config})).eval()


def inputs(case: ModelCase):
    """(tokens (B, L), mask or None, doc_ids or None, grad (B, L, dim)) of a case."""
    g = torch.Generator().manual_seed(case.seed + 1)
    B, L = case.B, case.total
    tokens = torch.randint(0, BASE["vocab_size"], (B, L), generator=g)
    mask = torch.rand(B, L, generator=g) > 0.3 if case.masked else None
    docs = (torch.rand(B, L, generator=g) > 0.9).long().cumsum(1) if case.docs else None
    dim = case.config.get("dim", BASE["dim"])
    return tokens, mask, docs, torch.randn(B, L, dim, generator=g)


def shard(x, case: ModelCase, index: int):
    if x is None:
        return None
    off = sum(case.lengths[:index])
    return x[:, off:off + case.lengths[index]]


def single(case: ModelCase):
    """(output, {name: grad}) of the model on one process, the whole sequence, its scans
    on the PyTorch backend: the arithmetic every shard's scan runs (the C kernel's
    natural-log rescales differ from its powers of two in the last bits, which a deep
    float32 model's gradients carry to about 1e-5)."""
    model = _mode(build(case), case)
    tokens, mask, docs, grad = inputs(case)
    with _scan_backend("torch"):
        out = model(tokens, mask, doc_ids=docs)
        (out * grad).sum().backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@contextlib.contextmanager
def _scan_backend(name: str):
    """WEIRDNET_SCAN_BACKEND=name inside the block, as it was after."""
    old = os.environ.get("WEIRDNET_SCAN_BACKEND")
    os.environ["WEIRDNET_SCAN_BACKEND"] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ["WEIRDNET_SCAN_BACKEND"]
        else:
            os.environ["WEIRDNET_SCAN_BACKEND"] = old


def _run(case: ModelCase, group, index: int):
    from weirdnet.ops.context_parallel import ContextParallel
    from weirdnet.ops.shard_transfers import count_sent_bytes
    from weirdnet.train.context_parallel import check_shardable

    model = _mode(build(case), case)
    try:
        check_shardable(model)
    except ValueError as err:
        return str(err)
    cp = ContextParallel(group, halos=case.halos,
                         recompute_exchanges=case.recompute_exchanges)
    tokens, mask, docs, grad = (shard(x, case, index) for x in inputs(case))
    with count_sent_bytes() as sent, cp:
        out = model(tokens, mask, doc_ids=docs)
        (out * grad).sum().backward()
    return dict(o=out.detach(), grads={n: p.grad for n, p in model.named_parameters()
                                       if p.grad is not None},
                sent=(sent.forward, sent.recompute, sent.backward),
                ring=(sent.ring_forward, sent.ring_backward))


def run_model_cases(cases: list[ModelCase], rank: int, world: int) -> dict:
    """This rank's results of the cases it takes part in (helpers.context_parallel.spawn)."""
    groups = {c.members: dist.new_group(list(c.members)) for c in cases if c.members}
    results = {}
    for case in cases:
        members = case.members or tuple(range(world))
        if rank in members:
            results[case.name] = _run(case, groups.get(case.members),
                                      sorted(members).index(rank))
    return results
