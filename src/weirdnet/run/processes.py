"""A run's processes and devices: one process, or a ``torchrun`` job.

Under ``torchrun --nproc_per_node N`` (``WORLD_SIZE`` > 1 in the environment) the
process group is initialised from the environment torchrun sets (NCCL on CUDA, gloo on
CPU) and each process takes GPU ``LOCAL_RANK``; the collectives a run needs (sums,
gathered objects, a barrier) are no-ops in one process.  How the model is wrapped for
the job (DDP, FSDP) is :mod:`weirdnet.train.distributed`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["DeviceError", "Processes", "all_reduce_sums", "any_rank", "available_devices",
           "barrier", "gather_objects", "resolve_device", "setup", "teardown"]

@dataclass
class Processes:
    """This process's place in the job: rank, world size, its device and the wrapping."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    mode: str = "single"  # "single", "ddp" or "fsdp"

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1


DEVICE_NAMES = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
"""The device names ``run.device`` and ``--device`` may take (availability aside)."""


class DeviceError(ValueError):
    """A device name that is not a device, or a device this machine does not have."""


def available_devices() -> list[str]:
    """The device names that work on this machine, "auto" first."""
    names = ["auto", "cpu"]
    if torch.cuda.is_available():
        names += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        names.append("mps")
    return names


def resolve_device(name: str, local_rank: int = 0, what: str = "run.device") -> torch.device:
    """The device of ``run.device``/``--device`` (``what`` names it in errors): "auto" is
    CUDA (GPU ``local_rank``) if available, else the CPU.  A name that is not a device, or
    a device this machine does not have, raises :class:`DeviceError` naming the ones it
    has."""
    given = name
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    here = f"available here: {', '.join(available_devices())}"
    if not isinstance(name, str) or not DEVICE_NAMES.fullmatch(name):
        raise DeviceError(f"{what}={given!r} is not a device name; {here}")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"{what}={given!r} but CUDA is not available here; {here}")
        if device.index is None:
            device = torch.device("cuda", local_rank)
        if device.index >= torch.cuda.device_count():
            raise DeviceError(f"{what}={given!r}: there is no GPU {device.index} here; {here}")
        torch.cuda.set_device(device)
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(f"{what}={given!r} but MPS is not available here; {here}")
    return device


def setup(device: str = "auto") -> Processes:
    """Join the torchrun job if there is one; pick this process's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    target = resolve_device(device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if target.type == "cuda" else "gloo")
    return Processes(rank, world_size, local_rank, target)


def teardown(processes: Processes) -> None:
    """Leave the process group (if this job made one), after every rank got here: gloo
    aborts a process whose peer tears down its connections first."""
    if processes.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_sums(sums: dict[str, float], processes: Processes) -> dict[str, float]:
    """Sum a dict of numbers over all processes (float64; every rank gets the result)."""
    if not processes.distributed:
        return dict(sums)
    keys = sorted(sums)
    values = torch.tensor([float(sums[k]) for k in keys], dtype=torch.float64)
    if processes.device.type == "cuda":
        values = values.to(processes.device)
    dist.all_reduce(values)
    return dict(zip(keys, values.tolist(), strict=True))


def any_rank(flag: bool, processes: Processes) -> bool:
    """Whether ``flag`` is true in any process of the job (a stop signal that one rank
    got stops all of them at the same step)."""
    if not processes.distributed:
        return flag
    return all_reduce_sums({"flag": float(flag)}, processes)["flag"] > 0


def gather_objects(value: Any, processes: Processes) -> list[Any]:
    """Every rank's ``value``, in rank order (on every rank)."""
    if not processes.distributed:
        return [value]
    out: list[Any] = [None] * processes.world_size
    dist.all_gather_object(out, value)
    return out


def barrier(processes: Processes) -> None:
    """Wait until every process gets here (nothing to wait for in one process)."""
    if processes.distributed:
        dist.barrier()
