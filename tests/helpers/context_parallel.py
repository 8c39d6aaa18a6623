"""Run context-parallel scan cases on P gloo processes (torch.multiprocessing spawn).

Every process builds the same full inputs from each case's seed, runs
``weird_scan_context_parallel`` on its shard (forward and backward, counting the bytes it
sends) and saves its shard of O, dA, dV, its d log_w share and the counts; the test
process puts the shards together and compares.  One spawn runs all the cases of a group
size, so the processes start (and import torch) once.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


@dataclass(frozen=True)
class Case:
    """One sharded scan: shard lengths in group rank order and what the inputs hold.

    members: the global ranks of a subgroup that runs the case (None: the whole world).
    bidirectional: run the encoder form (split D // 2) instead of ``reverse``.
    """

    name: str
    lengths: tuple[int, ...]
    reverse: bool = False
    masked: bool = False
    docs: str | None = None  # None, "random" or a comma list of ids
    bidirectional: bool = False
    members: tuple[int, ...] | None = None
    B: int = 2
    D: int = 3
    seed: int = 0
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def total(self) -> int:
        return sum(self.lengths)


def inputs(case: Case):
    """Full float64 (a, v, log_w, mask, doc_ids, grad) of a case."""
    from weirdnet.ops import levels_needed

    g = torch.Generator().manual_seed(case.seed)
    B, L, D = case.B, case.total, case.D
    a = torch.randn(B, L, D, dtype=torch.float64, generator=g) * 2
    v = torch.randn(B, L, D, dtype=torch.float64, generator=g)
    log_w = torch.randn(max(1, levels_needed(L)), D, dtype=torch.float64, generator=g) - 0.5
    mask = torch.rand(B, L, generator=g) > 0.25 if case.masked else None
    doc = None
    if case.docs == "random":
        doc = (torch.rand(B, L, generator=g) > 0.97).long().cumsum(1) % 2
    elif case.docs:
        doc = torch.tensor([int(x) for x in case.docs.split(",")]).expand(B, L).clone()
    grad = torch.randn(B, L, D, dtype=torch.float64, generator=g)
    if case.extra.get("steep"):  # issue 72's wide spreads: logits 1e3 N(0, 1), steep decay
        a, log_w = a * 500, -100 * log_w.abs()
    return a, v, log_w, mask, doc, grad


def shard(x, case: Case, index: int):
    """Group rank ``index``'s shard of a (B, L, ...) tensor (or None)."""
    if x is None:
        return None
    off = sum(case.lengths[:index])
    return x[:, off:off + case.lengths[index]]


@contextlib.contextmanager
def channel_budget(case: Case):
    """The sharded scan's channel-block budget (values, ``_BLOCK_BUDGET``) set to
    ``case.extra['budget']`` inside the block, where the case names one."""
    from weirdnet.ops.weird_scan import context_parallel

    saved = context_parallel._BLOCK_BUDGET
    context_parallel._BLOCK_BUDGET = case.extra.get("budget", saved)
    try:
        yield
    finally:
        context_parallel._BLOCK_BUDGET = saved


def _run_case(case: Case, group, index: int) -> dict:
    with channel_budget(case):
        return _run_scan(case, group, index)


def _run_scan(case: Case, group, index: int) -> dict:
    from weirdnet.ops import weird_scan_context_parallel
    from weirdnet.ops.shard_transfers import count_sent_bytes
    from weirdnet.ops.weird_scan.context_parallel import (
        weird_scan_bidirectional_context_parallel,
    )

    a, v, log_w, mask, doc, grad = inputs(case)
    leaves = [shard(a, case, index).clone().requires_grad_(),
              shard(v, case, index).clone().requires_grad_(), log_w.clone().requires_grad_()]
    kwargs = dict(group=group, mask=shard(mask, case, index), doc_ids=shard(doc, case, index),
                  halos=case.extra.get("halos", "keep"))
    with count_sent_bytes() as sent:
        if case.bidirectional:
            out = weird_scan_bidirectional_context_parallel(*leaves, **kwargs)
        else:
            out = weird_scan_context_parallel(*leaves, reverse=case.reverse, **kwargs)
        out.backward(shard(grad, case, index))
    return dict(o=out.detach(), da=leaves[0].grad, dv=leaves[1].grad, dlogw=leaves[2].grad,
                forward=sent.forward, backward=sent.backward, recompute=sent.recompute)


def _run_error(case: Case, index: int) -> str:
    """A bad call (``case.extra['bad']`` names it); returns this rank's error message."""
    from weirdnet.ops import weird_scan_context_parallel

    a, v, log_w, mask, _, _ = inputs(case)
    a, v = shard(a, case, index), shard(v, case, index)
    bad = case.extra["bad"]
    if bad == "channels" and index == 0:
        a, v, log_w = a[..., :-1], v[..., :-1], log_w[:, :-1]
    if bad == "dtype" and index == 0:
        a, v, log_w = a.float(), v.float(), log_w.float()
    if bad == "levels":
        log_w = log_w[:1]
    bad_mask = torch.ones(a.shape[0], a.shape[1] + 1, dtype=torch.bool)
    try:
        weird_scan_context_parallel(a, v, log_w,
                                    mask=bad_mask if bad == "mask" and index == 1 else None)
    except ValueError as err:
        return str(err)
    return "no error"


def _scan_cases(cases: list[Case], rank: int, world: int) -> dict:
    """This rank's results of the scan cases it takes part in."""
    groups = {c.members: dist.new_group(list(c.members)) for c in cases if c.members}
    results = {}
    for case in cases:
        members = case.members or tuple(range(world))
        if rank not in members:
            continue
        index = sorted(members).index(rank)
        if "bad" in case.extra:
            results[case.name] = _run_error(case, index)
        else:
            results[case.name] = _run_case(case, groups.get(case.members), index)
    return results


def _memory_case(case: Case, group, index: int) -> dict:
    """One float32 sharded step's memory on this rank: ``saved``, the bytes the op keeps
    for its backward (the distinct storages that saved-tensor hooks see), and ``extra``,
    its peak RSS over the RSS with the inputs allocated (freed blocks >= 64 KiB go back
    to the system: see helpers/mixers.py), under ``case.extra['budget']``."""
    from weirdnet.ops import weird_scan_context_parallel
    from weirdnet_lab.harness.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss

    a, v, log_w, _, _, grad = (None if x is None else x.float() for x in inputs(case))
    a, v, grad = (shard(x, case, index).clone() for x in (a, v, grad))
    a.requires_grad_(), v.requires_grad_(), log_w.requires_grad_()
    saved = {}

    def pack(t):  # distinct storages: a view of log_w saved twice counts once
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    dist.barrier(group)
    reset_peak_rss()
    base = current_rss_bytes()
    halos = case.extra.get("halos", "keep")
    with channel_budget(case), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        weird_scan_context_parallel(a, v, log_w, group=group, halos=halos).backward(grad)
    return dict(saved=sum(saved.values()), extra=peak_rss_bytes() - base)


def memory_cases(cases: list[Case], rank: int, world: int) -> dict:
    """This rank's :func:`_memory_case` of every case (the whole world runs each)."""
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    assert mallopt(-3, 1 << 16) == 1  # M_MMAP_THRESHOLD = 64 KiB: peak RSS = live peak
    return {case.name: _memory_case(case, None, rank) for case in cases}


def _worker(rank: int, world: int, port: int, run, cases: list, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = run(cases, rank, world)
    dist.barrier()
    dist.destroy_process_group()
    with open(Path(out) / f"{rank}.pkl", "wb") as f:
        pickle.dump(results, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(world: int, run, cases: list, tmp: Path) -> list[dict]:
    """Spawn ``world`` gloo processes; each calls ``run(cases, rank, world)`` (a
    module-level function) and returns a picklable dict; returns them in rank order.
    The children run one thread each (``OMP_NUM_THREADS=1`` in their environment only:
    this process's is put back, so running one test file alone sees what the suite does)."""
    with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "1"}):
        mp.spawn(_worker, args=(world, _free_port(), run, cases, str(tmp)), nprocs=world)
    return [pickle.loads((tmp / f"{r}.pkl").read_bytes()) for r in range(world)]


def ranks_of(case, results: list[dict]) -> list:
    """The results of ``case`` (a ``members`` field: None for the whole world) on the
    ranks that ran it, in group rank order."""
    return [results[r][case.name] for r in sorted(case.members or range(len(results)))]


def run_cases(world: int, cases: list[Case], tmp: Path) -> list[dict]:
    """Spawn ``world`` gloo processes that run the scan ``cases``; each rank's results."""
    return spawn(world, _scan_cases, cases, tmp)
