"""Peak extra memory of one forward+backward.

CPU: measured in a fresh child process per (suite, method, shape)
(:mod:`weirdnet_lab.opbench.memchild`), which applies the allocator setting of
:mod:`.alloc` before importing torch, allocates the inputs and ``grad_out``, records its
resident set size (RSS, ``/proc/self/statm``) as the baseline, runs forward+backward once
and reads its peak RSS.  Extra = peak - baseline.  A fresh process makes the number
independent of what ran before; with freed memory kept in the heap, peak RSS is the true
high-water mark.

Peak RSS is ``VmHWM`` of ``/proc/self/status`` (the high-water mark of this process's own
address space), reset to the current RSS right after the baseline is taken (writing ``5``
to ``/proc/self/clear_refs``).  ``getrusage``'s ``ru_maxrss`` is only the fallback where
those files do not exist: Linux folds the parent's peak RSS into it across ``exec``, so a
child started from a large benchmark process reports the parent's peak.

CUDA: measured in process with the caching allocator's counters:
extra = ``max_memory_allocated`` - ``memory_allocated`` before the step.

CPU allocator peak (:func:`allocator_peak_bytes`): the same quantity as CUDA's, from a
per-allocation trace.  Peak RSS also counts what the heap cannot give back for reuse
(fragmentation) and memory that C code allocates itself; the trace counts exactly the
tensors, autograd buffers and op temporaries that PyTorch's CPU allocator hands out.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

MIB = 1024.0 * 1024.0


def current_rss_bytes() -> int:
    """Resident set size of this process now, from ``/proc/self/statm``."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """Peak resident set size of this address space: ``VmHWM``, else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def reset_peak_rss() -> bool:
    """Reset the peak RSS (``VmHWM``) to the current RSS; False where Linux cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


CHILD_TIMEOUT_S = 3600.0
"""Time limit of one memory child."""


def child_env() -> dict[str, str]:
    """Environment for the child: this very ``weirdnet`` first on ``PYTHONPATH``."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def child_command(
    method: str, batch: int, length: int, dim: int, head_dim: int, dtype: str,
    threads: int, seed: int, suite: str = "scan",
) -> list[str]:
    """Command line of the memory child for one (method of operator benchmark ``suite``,
    shape): the ``memory`` job of :mod:`.child`."""
    from weirdnet_lab.harness.children import job_command

    return job_command("memory", {"suite": suite, "method": method, "batch": batch,
                                  "length": length, "dim": dim, "head_dim": head_dim,
                                  "dtype": dtype, "threads": threads, "seed": seed})


def measure_cpu_in_child(command: list[str], timeout_s: float = CHILD_TIMEOUT_S) -> dict:
    """Run the memory child ``command``; its JSON result, or ``{"error": ...}``.  The
    child is stopped with this process (:mod:`.children`)."""
    from weirdnet_lab.harness import children

    try:
        result = children.run(command, timeout_s=timeout_s, env=child_env())
    except children.ChildTimeout as timeout:
        result = timeout
    return child_result(result)


def child_result(result) -> dict:
    """The memory child's JSON result, or ``{"error": ...}`` (:func:`.children.job_result`)."""
    from weirdnet_lab.harness.children import job_result

    return job_result(result, "memory child")


def allocator_peak_bytes(work) -> int:
    """Run ``work()`` and return the peak of the bytes held through PyTorch's CPU allocator
    above what it held at the start: every allocation and free is recorded
    (``torch.profiler`` with ``profile_memory``) and the running sum's maximum taken.

    Not counted: memory C code allocates itself, e.g. the C scan kernels' per-thread
    workspace of (3·16 + 3·(K + 2)) rows of L floats (about 6 MiB per thread at L = 16K)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    held = peak = 0
    for event in events:
        held += event.nbytes()
        peak = max(peak, held)
    return peak


class PeakMemory:
    """Peak memory of a stretch of work above the moment :meth:`start` is called.

    CPU: peak RSS (``VmHWM``, reset at :meth:`start`) minus the RSS then; CUDA:
    ``max_memory_allocated`` minus ``memory_allocated`` then.  ``since`` names what was
    already allocated at the start, for the description :meth:`peak_mib` returns.
    """

    def __init__(self, device, since: str = "the start") -> None:
        self.device, self.since = device, since

    def start(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            self.base = current_rss_bytes()
            self.resettable = reset_peak_rss()

    def peak_mib(self) -> tuple[float, str]:
        """(peak MiB above the start, how it was measured)."""
        if self.device.type == "cuda":
            import torch

            peak = torch.cuda.max_memory_allocated(self.device)
            return (peak - self.base) / MIB, f"CUDA max_memory_allocated above {self.since}"
        how = f"peak RSS above {self.since}" if self.resettable else \
            "process peak RSS (could not reset VmHWM)"
        return max(peak_rss_bytes() - self.base, 0) / MIB, how


def measure_cuda(step, device) -> dict:
    """Peak extra CUDA memory of one call of ``step`` (inputs already allocated)."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    baseline = torch.cuda.memory_allocated(device)
    step()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    return {"baseline_bytes": baseline, "peak_bytes": peak, "extra_bytes": peak - baseline,
            "extra_mib": (peak - baseline) / MIB, "how": "torch.cuda.max_memory_allocated"}
