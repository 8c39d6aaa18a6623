"""``train.context_parallel = P``: every sequence of a batch sharded over P processes.

Under ``torchrun`` with W processes, a 2-D :class:`~torch.distributed.device_mesh.DeviceMesh`
("dp", "cp") of shape (W / P, P) groups the processes: the P ranks of a "cp" row read the
same items (the sampler runs over the W / P data-parallel places) and each takes its
contiguous slice of every sequence: inputs, targets, mask and ``doc_ids``
(:func:`shard_batch`).  The model runs context-parallel over the row inside
:func:`sharded` (a :class:`~weirdnet.ops.context_parallel.ContextParallel` entered
around the step's forward and backward: the ops that exchange data read it), after
:func:`check_shardable` refused, at setup, a model that cannot.  The loss is the sum of
the row's token losses over its global token count (one all_reduce of two numbers,
:func:`sharded_loss`); DDP / FSDP then average the gradients over all W ranks, and the
loss given to the backward is multiplied by P, so each parameter's gradient is the mean
over data parallel of the sum over context parallel: the single-process gradient of the
same global batch.  Evaluation runs on whole sequences (context parallelism off).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from weirdnet.config.typed import ConfigError
from weirdnet.layers.registry import factory, whole_sequence
from weirdnet.models.lm import token_nll
from weirdnet.ops.context_parallel import ContextParallel
from weirdnet.run.processes import Processes


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
    """The mesh for ``train.context_parallel = P`` (None for P = 1), the model checked
    to shard (:func:`check_shardable`).  ConfigError (one line) for another task than lm, P larger
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
    try:
        check_shardable(model)  # refuses a mixer that cannot shard, at once
    except ValueError as err:
        raise ConfigError(f"train.context_parallel={P}: {err}") from None
    if processes.world_size % P:
        raise ConfigError(f"train.context_parallel={P} does not divide the world size "
                          f"{processes.world_size} (run it under torchrun with a multiple of "
                          f"{P} processes)")
    from torch.distributed.device_mesh import init_device_mesh  # deferred: slow import

    mesh = init_device_mesh(processes.device.type, (processes.world_size // P, P),
                            mesh_dim_names=("dp", "cp"))
    data = dataclasses.replace(processes, rank=mesh.get_local_rank("dp"),
                               world_size=processes.world_size // P)
    return SequenceShards(P, mesh.get_local_rank("cp"), mesh.get_group("cp"), data)


def check_shardable(model: torch.nn.Module) -> None:
    """ValueError (one line, naming why) unless ``model`` (a backbone, or a model with a
    ``backbone``) can run on the shards of a sequence: no cross-attention block, no
    mixer that needs the whole sequence at once
    (:func:`weirdnet.layers.registry.whole_sequence`)."""
    backbone = getattr(model, "backbone", model)
    if any(block.cross is not None for block in backbone.blocks):
        raise ValueError("cross-attention blocks cannot run context-parallel: their "
                         "context belongs to one whole sequence")
    for name in dict.fromkeys(backbone.config.mixers):
        why = whole_sequence(name)
        if why:
            raise ValueError(f"{factory(name).__name__} cannot run context-parallel: {why}")


@contextlib.contextmanager
def sharded(model: torch.nn.Module, cp: ContextParallel) -> Iterator[ContextParallel]:
    """``model`` checked (:func:`check_shardable`), then ``cp`` entered: inside, every
    forward (and backward) of the model runs on this rank's shard of a sequence sharded
    over ``cp.group``, exactly as the single-process model on the whole sequence."""
    check_shardable(model)
    with cp:
        yield cp


def entered(shards: SequenceShards | None):
    """The context a training step runs in: ``ContextParallel(shards.group)`` entered
    (None: one process, nothing entered)."""
    return contextlib.nullcontext() if shards is None else ContextParallel(shards.group)


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
