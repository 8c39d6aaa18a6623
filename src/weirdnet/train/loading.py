"""Batches for training and evaluation, in an order that a resumed run can reproduce.

Training: :class:`ResumableSampler` is ``torch.utils.data.DistributedSampler`` (same
shuffle from ``seed + epoch``, rank ``r`` of ``N`` takes every N-th index from ``r``)
that can start part-way into an epoch.  With ``G`` items per optimizer step, step ``s`` of
an epoch uses the indices at positions ``[s·G, (s+1)·G)`` of the epoch's permutation,
whatever the number of processes, so one process and N processes see the same global
batches.

Evaluation: the first ``limit`` items of the split (all of them when 0), in order; rank
``r`` takes items ``r, r+N, ...``; every rank runs the same number of batches (FSDP needs
that), a rank with fewer items repeats its first batch and drops its statistics.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from weirdnet.data.collate import pad_collate
from weirdnet.run.processes import Processes

__all__ = ["EvalBatches", "ResumableSampler", "micro_batches", "train_loader"]


class ResumableSampler(DistributedSampler):
    """DistributedSampler (shuffled, last incomplete part dropped) whose iteration starts
    at this rank's index ``start`` of the current epoch."""

    def __init__(self, dataset: Dataset, processes: Processes, seed: int, items_per_step: int):
        super().__init__(dataset, num_replicas=processes.world_size, rank=processes.rank,
                         shuffle=True, seed=seed, drop_last=True)
        self.items_per_rank_step = items_per_step // processes.world_size
        self.steps_per_epoch = self.num_samples // self.items_per_rank_step
        self.start = 0

    def set_position(self, epoch: int, step_in_epoch: int) -> None:
        """Start the next iteration at step ``step_in_epoch`` of ``epoch``."""
        self.set_epoch(epoch)
        self.start = step_in_epoch * self.items_per_rank_step

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        stop = self.steps_per_epoch * self.items_per_rank_step
        return iter(indices[self.start:stop])

    def __len__(self) -> int:
        return max(self.steps_per_epoch * self.items_per_rank_step - self.start, 0)


def _collate(pad_id: int, pad_multiple: int = 1, max_len: int | None = None):
    return partial(pad_collate, pad_id=pad_id, multiple=pad_multiple, max_len=max_len)


def train_loader(dataset: Dataset, sampler: ResumableSampler, micro_batch: int, pad_id: int,
                 num_workers: int, pin_memory: bool, pad_multiple: int = 1,
                 max_len: int | None = None) -> DataLoader:
    """The DataLoader of one epoch from the sampler's current position.

    It gets its own generator (seeded from the epoch) for its workers' base seed: by
    default each new DataLoader iterator draws from the global torch RNG, which would
    shift the dropout masks of a resumed run (it starts its iterator at another step).
    Batches are padded as :func:`~weirdnet.data.collate.pad_collate` with ``pad_multiple``
    and the dataset's ``max_len``."""
    generator = torch.Generator().manual_seed(sampler.seed + sampler.epoch)
    return DataLoader(dataset, batch_size=micro_batch, sampler=sampler,
                      collate_fn=_collate(pad_id, pad_multiple, max_len),
                      num_workers=num_workers, drop_last=True, pin_memory=pin_memory,
                      generator=generator)


def micro_batches(dataset: Dataset, sampler: ResumableSampler, position, micro_batch: int,
                  pad_id: int, num_workers: int, pin_memory: bool, pad_multiple: int = 1,
                  max_len: int | None = None) -> Iterator:
    """Endless micro-batches from a run's data ``position`` (its ``epoch`` and
    ``step_in_epoch``: the run's :class:`~weirdnet.run.checkpointer.Progress`, whose
    epoch this advances), one :func:`train_loader` per epoch."""
    while True:
        sampler.set_position(position.epoch, position.step_in_epoch)
        if hasattr(dataset, "set_epoch"):
            dataset.set_epoch(position.epoch)
        yield from train_loader(dataset, sampler, micro_batch, pad_id, num_workers,
                                pin_memory, pad_multiple, max_len)
        position.epoch += 1
        position.step_in_epoch = 0


class EvalBatches:
    """This rank's evaluation batches: ``(batch, keep)`` pairs, ``keep`` False for the
    filler batches that only keep the ranks in step (see the module doc)."""

    def __init__(self, dataset: Dataset, processes: Processes, batch_size: int, limit: int,
                 pad_id: int, pad_multiple: int = 1, max_len: int | None = None):
        total = len(dataset) if limit <= 0 else min(len(dataset), limit)
        if total == 0:
            raise ValueError("the evaluation split is empty")
        mine = list(range(processes.rank, total, processes.world_size))
        per_rank = math.ceil(total / processes.world_size)
        self.num_batches = math.ceil(per_rank / batch_size)
        self.chunks = [mine[i * batch_size:(i + 1) * batch_size] for i in range(self.num_batches)]
        self.dataset = dataset
        self.collate = _collate(pad_id, pad_multiple, max_len)

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], bool]]:
        for chunk in self.chunks:
            keep = bool(chunk)
            indices = chunk if keep else [0]
            yield self.collate([self.dataset[i] for i in indices]), keep
