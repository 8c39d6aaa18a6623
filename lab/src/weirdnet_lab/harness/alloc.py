"""glibc allocator settings for benchmarks.

By default glibc serves every large block (>= 128 KiB, adaptively more) with its own
``mmap`` and returns it with ``munmap`` on free.  A tensor-heavy loop then page-faults on
every fresh output tensor, and timings measure the kernel's page zeroing rather than the
op.  :func:`reuse_freed_memory` makes glibc keep freed memory in the heap instead, so a
warmed-up loop runs on already-mapped pages, and peak RSS is a true high-water mark.

The opposite, :func:`return_freed_memory`, is what a memory-bound run wants.  glibc's
threshold is adaptive: each freed ``mmap`` block raises it (up to 32 MiB), after which
blocks below it come from the heap, where freed memory fragments and stays resident.  A
long-context training step (L = 64K, Weird-Net A at D = 256) then peaked at 2.0 GiB of
RSS for 0.9 GiB that PyTorch's allocator held at once; with the threshold fixed at 1 MiB,
at 1.27 GiB (the process itself is about 0.35 GiB).  The environment variable
``MALLOC_MMAP_THRESHOLD_=1048576`` does the same for any run (``weirdnet train``).
"""

from __future__ import annotations

import ctypes

# Parameter numbers from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
RETURN_THRESHOLD_BYTES = 1 << 20
DEFAULT_MMAP_MAX = 65536  # glibc's own default
# mallopt takes a C int: the largest trim threshold it can express (2 GiB - 1).
TRIM_THRESHOLD_BYTES = 2**31 - 1

SETTING = f"glibc mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD={TRIM_THRESHOLD_BYTES})"


def _mallopt():
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the symbols already loaded: libc's on Linux
    except (OSError, AttributeError, TypeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def return_freed_memory() -> str:
    """Fix glibc's mmap threshold at 1 MiB (no adaptive rise): every block of 1 MiB or
    more is mapped on its own and unmapped when freed, so the peak RSS follows what is
    allocated.  Returns a description of what was applied, for the report."""
    mallopt = _mallopt()
    if mallopt is None:
        return "default allocator (glibc mallopt not available)"
    # undo reuse_freed_memory (the harness child applies it first): mmap allowed again
    # (glibc's default count), the heap's free top trimmed past 1 MiB
    settings = ((M_MMAP_MAX, DEFAULT_MMAP_MAX), (M_TRIM_THRESHOLD, RETURN_THRESHOLD_BYTES),
                (M_MMAP_THRESHOLD, RETURN_THRESHOLD_BYTES))
    if all(mallopt(key, value) == 1 for key, value in settings):
        return (f"glibc mallopt(M_MMAP_THRESHOLD={RETURN_THRESHOLD_BYTES}, M_TRIM_THRESHOLD="
                f"{RETURN_THRESHOLD_BYTES}, M_MMAP_MAX={DEFAULT_MMAP_MAX}): freed blocks of "
                "1 MiB or more go back to the system")
    return "default allocator (mallopt refused M_MMAP_THRESHOLD)"


def reuse_freed_memory() -> str:
    """Disable ``mmap`` for large blocks and heap trimming in this process.

    Returns a description of what was applied, for the report: :data:`SETTING` on
    success, otherwise a sentence saying why nothing was applied (no glibc, e.g. musl or
    macOS).  Safe to call more than once; affects only allocations made afterwards.
    """
    mallopt = _mallopt()
    if mallopt is None:
        return "default allocator (glibc mallopt not available)"
    ok_mmap = mallopt(M_MMAP_MAX, 0) == 1
    ok_trim = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if ok_mmap and ok_trim:
        return SETTING
    return f"default allocator (mallopt refused: mmap_max={ok_mmap}, trim={ok_trim})"
