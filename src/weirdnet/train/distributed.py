"""The model as a ``torchrun`` job trains it: DistributedDataParallel or, for large
models, sharded with FSDP (``fully_shard`` on every block, then on the whole model).
Model and optimizer states are gathered to full, CPU-resident state dicts for checkpoints
(:mod:`weirdnet.run.checkpointer`), so a checkpoint loads into any world size.  The
processes themselves are :mod:`weirdnet.run.processes`.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch.nn as nn

from weirdnet.models.blocks import Block
from weirdnet.run.processes import Processes

__all__ = ["FSDP_MIN_PARAMETERS", "eval_module", "no_sync", "wrap"]

FSDP_MIN_PARAMETERS = 300_000_000
"""``train.distributed = "auto"`` shards models larger than this with FSDP."""


def wrap(model: nn.Module, processes: Processes, mode: str, parameters: int) -> nn.Module:
    """The model as this job trains it: itself, DDP or FSDP (``mode``: "auto", "ddp",
    "fsdp"; only used when there is more than one process)."""
    if not processes.distributed:
        processes.mode = "single"
        return model
    if mode == "auto":
        mode = "fsdp" if parameters > FSDP_MIN_PARAMETERS else "ddp"
    processes.mode = mode
    if mode == "ddp":
        ids = [processes.device.index] if processes.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)
    # deferred: FSDP's import is slow, and only runs above FSDP_MIN_PARAMETERS use it
    from torch.distributed.fsdp import fully_shard

    for module in model.modules():
        if isinstance(module, Block):
            fully_shard(module)
    fully_shard(model)
    return model


def no_sync(wrapped: nn.Module, skip: bool):
    """Context that skips DDP's gradient all-reduce for an accumulation micro-batch."""
    if skip and isinstance(wrapped, nn.parallel.DistributedDataParallel):
        return wrapped.no_sync()
    return nullcontext()


def eval_module(wrapped: nn.Module) -> nn.Module:
    """The module to evaluate with: DDP's inner module (no collectives per forward);
    an FSDP model must run as it is (every rank runs the same number of batches)."""
    if isinstance(wrapped, nn.parallel.DistributedDataParallel):
        return wrapped.module
    return wrapped
