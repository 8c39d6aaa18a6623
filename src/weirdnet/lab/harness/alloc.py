"""glibc allocator settings for benchmarks.

By default glibc serves every large block (>= 128 KiB, adaptively more) with its own
``mmap`` and returns it with ``munmap`` on free.  A tensor-heavy loop then page-faults on
every fresh output tensor, and timings measure the kernel's page zeroing rather than the
op.  :func:`reuse_freed_memory` makes glibc keep freed memory in the heap instead, so a
warmed-up loop runs on already-mapped pages, and peak RSS is a true high-water mark.
"""

from __future__ import annotations

import ctypes

# Parameter numbers from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
# mallopt takes a C int: the largest trim threshold it can express (2 GiB - 1).
TRIM_THRESHOLD_BYTES = 2**31 - 1

SETTING = f"glibc mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD={TRIM_THRESHOLD_BYTES})"


def reuse_freed_memory() -> str:
    """Disable ``mmap`` for large blocks and heap trimming in this process.

    Returns a description of what was applied, for the report: :data:`SETTING` on
    success, otherwise a sentence saying why nothing was applied (no glibc, e.g. musl or
    macOS).  Safe to call more than once; affects only allocations made afterwards.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the symbols already loaded: libc's on Linux
    except (OSError, AttributeError, TypeError):
        return "default allocator (glibc mallopt not available)"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok_mmap = mallopt(M_MMAP_MAX, 0) == 1
    ok_trim = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if ok_mmap and ok_trim:
        return SETTING
    return f"default allocator (mallopt refused: mmap_max={ok_mmap}, trim={ok_trim})"
