"""Description of the machine and software a benchmark ran on, for its report."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> str:
    """CPU model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def usable_cores() -> int:
    """CPU cores this process may run on (affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    """1, 5 and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _scan_backend(device: torch.device) -> str | None:
    """``weirdnet.ops.scan_backend_name(device)`` where it exists and works."""
    try:
        import weirdnet.ops as ops
    except Exception:  # noqa: BLE001 - reported as unknown
        return None
    name_of = getattr(ops, "scan_backend_name", None)
    try:
        return str(name_of(device)) if name_of else None
    except Exception:  # noqa: BLE001
        return None


RESULTS_FOLDER = "lab/results"
"""Where the lab writes its records and reports: a change there is output, not code."""


def git_commit(where: Path) -> dict[str, Any]:
    """The checkout's commit and whether its tracked files have uncommitted changes
    outside :data:`RESULTS_FOLDER` (None outside git): a sweep rewrites its tracked
    report as it goes, which does not change the code the next cell runs."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                                 timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                f":(top,exclude){RESULTS_FOLDER}")
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


def code_version(info: dict) -> dict[str, Any]:
    """The ``commit`` and ``dirty`` of a :func:`machine_info` record, for records that keep
    them at their top level (one ``git`` call serves both)."""
    return {"commit": info["commit"], "dirty": info["dirty"]}


def memory_gib() -> float | None:
    """The machine's physical memory in GiB (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def machine_info(device: torch.device, command: list[str], allocator: str) -> dict:
    """Machine, software and invocation facts, JSON-serialisable."""
    from weirdnet import __version__

    info = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": shlex.join(command),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "weirdnet": __version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "scan_backend": _scan_backend(device),
        "allocator": allocator,
        "memory_gib": memory_gib(),
        **git_commit(Path(__file__).resolve().parent),
    }
    if "transformers" in sys.modules:  # a peer model ran: its library's version
        info["transformers"] = getattr(sys.modules["transformers"], "__version__", None)
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info
