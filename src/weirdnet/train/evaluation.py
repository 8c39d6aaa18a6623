"""A model's metrics on a dataset split, summed over every rank of a run
(:func:`evaluate`, :func:`evaluation_sums`)."""

from __future__ import annotations

import math
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from weirdnet.run import processes as dist_util
from weirdnet.run.faults import fault_point
from weirdnet.run.signals import STOP
from weirdnet.train import tasks
from weirdnet.train.loading import EvalBatches
from weirdnet.train.setup import RunError


def non_finite(metrics: dict[str, float]) -> tuple[str, float] | None:
    """The first metric of an evaluation that is NaN or infinite, as (name, value); None
    when all are finite.  Such an evaluation is never a success nor a best model."""
    return next(((name, value) for name, value in metrics.items()
                 if not math.isfinite(value)), None)


def check_finite(metrics: dict[str, float], split: str, where: str, hint: str) -> None:
    """RunError naming the first non-finite metric of an evaluation of ``split``: a model
    whose evaluation is NaN or infinite is never the best model nor a result."""
    found = non_finite(metrics)
    if found is not None:
        raise RunError(f"the {split} {found[0]} is {found[1]} {where}; {hint}")


def non_finite_hint(model: nn.Module) -> str:
    """What to do about a non-finite evaluation: the weights diverged, or (finite
    weights) some items give non-finite outputs."""
    # this process's part of each parameter (a DTensor's local shard under FSDP)
    local = (getattr(p, "_local_tensor", p) for p in model.parameters())
    if all(bool(torch.isfinite(t).all()) for t in local):
        return ("the weights are finite, so some of the split's items give non-finite "
                "outputs: check the data")
    return ("the weights are no longer finite: lower optim.lr, raise "
            "schedule.warmup_steps or set train.clip")


def metrics_text(metrics: dict[str, float]) -> str:
    """``loss 1.2345, bpc 1.7810``: an evaluation's metrics, for a terminal line."""
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


def scope(size: int, max_batches: int, batch_size: int) -> dict[str, int]:
    """What an evaluation of a split of ``size`` items with ``max_batches`` batches of
    ``batch_size`` (0 = all) reads: ``items`` (the first ones: the trials behind a test
    accuracy's binomial interval), ``batches``, ``split_items`` (all)."""
    limit = max_batches * batch_size
    items = size if limit <= 0 else min(size, limit)
    return {"items": items, "batches": -(-items // batch_size), "split_items": size}


def evaluate(model: nn.Module, dataset, info, batch_size: int,
             processes: dist_util.Processes, limit: int = 0, autocast=nullcontext,
             progress: str | None = None, pad_multiple: int = 1) -> dict[str, float]:
    """Metrics of ``model`` on the first ``limit`` items of ``dataset`` (0 = all), this
    rank's share of them summed over all ranks (see
    :class:`~weirdnet.train.loading.EvalBatches`); ``autocast()`` wraps each forward.
    ``progress``: the label of a progress bar on stderr (main process; None = no bar).
    A single process stops between batches when a stop signal has arrived
    (:data:`weirdnet.run.signals.STOP`).  The model is in eval mode meanwhile; its mode is
    restored afterwards.  ``pad_multiple``: batches are padded to a multiple of it
    (``data.pad_multiple``)."""
    sums = evaluation_sums(model, dataset, info, batch_size, processes, limit, autocast,
                           progress, pad_multiple=pad_multiple)
    return tasks.get(info.task).metrics(sums, info)


def evaluation_sums(model: nn.Module, dataset, info, batch_size: int,
                    processes: dist_util.Processes, limit: int = 0, autocast=nullcontext,
                    progress: str | None = None, batch_sums=None,
                    pad_multiple: int = 1) -> tasks.Sums:
    """The summed statistics behind :func:`evaluate` (same arguments), reduced over all
    ranks; ``batch_sums(model, batch)`` replaces the task's own per-batch statistics
    (e.g. :func:`weirdnet.train.positions.position_sums`)."""
    batches = EvalBatches(dataset, processes, batch_size, limit, info.pad_id, pad_multiple,
                          info.max_len)
    was_training = model.training
    model.eval()
    task, sums = tasks.get(info.task), {}
    batch_sums = batch_sums or task.batch_sums
    bar = _eval_bar(progress, len(batches), processes)
    try:
        for batch, keep in batches:
            fault_point("eval-batch")
            if not processes.distributed:
                STOP.check()
            with autocast():
                stats = batch_sums(model, tasks.to_device(batch, processes.device))
            if keep:
                tasks.add_sums(sums, stats)
            if bar is not None:
                bar.update(1)
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()
    return dist_util.all_reduce_sums(sums, processes)


def _eval_bar(label: str | None, total: int, processes: dist_util.Processes):
    """A transient tqdm bar over evaluation batches, or None."""
    if label is None or not processes.is_main:
        return None
    return tqdm(total=total, desc=label, unit="batch", leave=False, dynamic_ncols=True,
                mininterval=0.5, file=sys.stderr)
