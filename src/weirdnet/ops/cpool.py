"""Calling the C kernels of ``ops``: the pointers they take (:func:`address`,
:func:`rows`) and the thread pool that runs their work units in parallel
(:func:`run_units`).

ctypes releases the GIL during a call, so Python threads, each calling a kernel on its
own disjoint range of work units, run it on several cores.  A unit's result never
depends on which thread computes it, so outputs do not depend on the thread count.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

PARALLEL_MIN_ELEMENTS = 1 << 16
"""Work below this many elements runs on the calling thread (pool overhead dominates)."""

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def address(t: torch.Tensor | None) -> int | None:
    """The data pointer of ``t``, or None (a null pointer) for None."""
    return None if t is None else t.data_ptr()


def rows(t: torch.Tensor | None) -> tuple[int | None, int, int]:
    """Pointer and (batch, position) strides of a (B, L, D) tensor whose channel stride
    is 1; (None, 0, 0) for None."""
    return (None, 0, 0) if t is None else (t.data_ptr(), t.stride(0), t.stride(1))


def run_units(fn: Callable[..., int], args_before_range: tuple, n_units: int,
              n_elements: int, kernel: str) -> None:
    """Call ``fn(*args_before_range, u0, u1)`` over the units [0, n_units), split into
    contiguous ranges across torch's thread count.  ``fn`` returns 0, or non-zero when
    it ran out of memory for its workspace (a MemoryError naming ``kernel``)."""
    threads = max(1, min(torch.get_num_threads(), n_units))
    if threads == 1 or n_elements < PARALLEL_MIN_ELEMENTS:
        results = [fn(*args_before_range, 0, n_units)]
    else:
        bounds = [n_units * i // threads for i in range(threads + 1)]
        results = list(_get_pool(threads).map(
            lambda i: fn(*args_before_range, bounds[i], bounds[i + 1]), range(threads)))
    if any(r != 0 for r in results):
        raise MemoryError(f"{kernel} C kernel: out of memory for its workspace")


def _forget_pool_in_child() -> None:
    """A forked child (e.g. a DataLoader worker) has no pool threads: start afresh."""
    global _pool, _pool_size
    _pool, _pool_size = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _get_pool(threads: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < threads:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="weirdnet_c")
            _pool_size = threads
    return _pool
