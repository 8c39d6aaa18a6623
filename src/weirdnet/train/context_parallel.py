"""``train.context_parallel = P``: every sequence of a batch sharded over P processes.

Under ``torchrun`` with W processes, a 2-D :class:`~torch.distributed.device_mesh.DeviceMesh`
("dp", "cp") of shape (W / P, P) groups the processes: the P ranks of a "cp" row read the
same items (the sampler runs over the W / P data-parallel places) and each takes its
contiguous slice of every sequence: inputs, targets, mask and ``doc_ids``
(:func:`shard_batch`).  The model's backbone runs context-parallel over the row
(:meth:`weirdnet.models.backbone.Backbone.set_context_parallel`).  The loss is the sum of
the row's token losses over its global token count (one all_reduce of two numbers,
:func:`sharded_loss`); DDP / FSDP then average the gradients over all W ranks, and the
loss given to the backward is multiplied by P, so each parameter's gradient is the mean
over data parallel of the sum over context parallel: the single-process gradient of the
same global batch.  Evaluation runs on whole sequences (context parallelism off).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from weirdnet.models.lm import token_nll
from weirdnet.ops.context_parallel import ContextParallel
from weirdnet.typed_config import ConfigError

from .distributed import Processes


@dataclass
class SequenceShards:
    """This process's place on the (dp, cp) mesh: the "cp" group, its index in it, P,
    and the data-parallel view of the job (``data``: rank and world size over dp)."""

    size: int
    index: int
    group: Any
    data: Processes


def setup(P: int, processes: Processes, task: str, seq_len: int,
          model: torch.nn.Module) -> SequenceShards | None:
    """The mesh for ``train.context_parallel = P`` (None for P = 1), with the model's
    backbone switched to it.  ConfigError (one line) for another task than lm, P larger
    than the sequence, a mixer that cannot shard (naming it and why), or a world size P
    does not divide."""
    if P == 1:
        return None
    if task != "lm":
        raise ConfigError(f"train.context_parallel={P} is for the lm task; this dataset's "
                          f"task is {task!r}")
    if P > seq_len:
        raise ConfigError(f"train.context_parallel={P} is larger than the sequence length "
                          f"{seq_len}: every process needs at least one position")
    _switch(model, P, ContextParallel())  # refuses a mixer that cannot shard, at once
    if processes.world_size % P:
        raise ConfigError(f"train.context_parallel={P} does not divide the world size "
                          f"{processes.world_size} (run it under torchrun with a multiple of "
                          f"{P} processes)")
    from torch.distributed.device_mesh import init_device_mesh  # deferred: slow import

    mesh = init_device_mesh(processes.device.type, (processes.world_size // P, P),
                            mesh_dim_names=("dp", "cp"))
    data = dataclasses.replace(processes, rank=mesh.get_local_rank("dp"),
                               world_size=processes.world_size // P)
    shards = SequenceShards(P, mesh.get_local_rank("cp"), mesh.get_group("cp"), data)
    enable(model, shards)
    return shards


def enable(model: torch.nn.Module, shards: SequenceShards | None) -> None:
    """Switch the model's backbone to context parallelism over ``shards.group``, or off
    (None; a no-op for a model that never had it)."""
    if shards is None:
        if getattr(getattr(model, "backbone", None), "context_parallel", None) is not None:
            model.backbone.set_context_parallel(None)
        return
    _switch(model, shards.size, ContextParallel(shards.group))


def _switch(model: torch.nn.Module, P: int, cp: ContextParallel) -> None:
    try:
        model.backbone.set_context_parallel(cp)
    except ValueError as err:
        raise ConfigError(f"train.context_parallel={P}: {err}") from None


def _bounds(length: int, P: int, index: int) -> tuple[int, int]:
    """[start, end) of shard ``index`` of ``length`` positions in P near-equal parts."""
    base, extra = divmod(length, P)
    start = index * base + min(index, extra)
    return start, start + base + (index < extra)


def shard_batch(batch: dict[str, Any], shards: SequenceShards) -> dict[str, Any]:
    """This rank's slice of an lm batch: ``tokens`` (B, L + 1) hold L inputs and their
    targets; the shard's inputs [a, b) need tokens [a, b + 1) (its targets included), and
    ``tokens_mask`` and ``doc_ids`` (B, L + 1) are cut the same way."""
    length = batch["tokens"].shape[1] - 1
    if length < shards.size:
        raise ConfigError(f"train.context_parallel={shards.size} is larger than a batch's "
                          f"sequence length {length}")
    start, end = _bounds(length, shards.size, shards.index)
    return {key: value[:, start:end + 1]
            if key in ("tokens", "tokens_mask", "doc_ids") and value is not None else value
            for key, value in batch.items()}


def sharded_loss(task, module, batch: dict[str, Any], shards: SequenceShards
                 ) -> tuple[torch.Tensor, float, int]:
    """(the loss to back-propagate, the row's mean token loss, the row's counted targets)
    of this rank's shard of ``batch`` (see the module docstring)."""
    out, targets, mask = task.forward(module, shard_batch(batch, shards), with_loss=False)
    counted = targets != -100 if mask is None else mask & (targets != -100)
    local = (token_nll(out.logits, targets) * counted).sum()
    stats = torch.stack([local.detach().double(), counted.sum().double()])
    dist.all_reduce(stats, group=shards.group)
    total, count = stats.tolist()
    return local * shards.size / max(count, 1.0), total / max(count, 1.0), int(count)
