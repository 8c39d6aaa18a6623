"""Weird-attention's weighted log-step scan: one package, the reference beside the kernels.

    reference.py  the direct O(L^2) formula in float64: the specification
    torch.py      the log-step scan in plain PyTorch (any device)
    cpu.py        the fused C kernels of csrc/ (built on first use, called through ctypes)
    triton.py     the fused Triton kernels (CUDA)
    dispatch.py   the backend table and the rule that picks a backend; the Triton self-check
    library.py    the torch.library custom ops (forward, backward, decode step)
    scan.py       the public functions: argument checks, then the custom op
    cache.py      token-by-token decoding through per-level ring buffers

Only public names are imported here (this module must not bind the name ``torch``:
the submodule ``torch.py`` is an attribute of this package).
"""

from .cache import WeirdScanCache
from .dispatch import BACKENDS
from .reference import weird_scan_reference
from .scan import scan_backend_name, weird_scan, weird_scan_bidirectional

__all__ = [
    "BACKENDS",
    "WeirdScanCache",
    "scan_backend_name",
    "weird_scan",
    "weird_scan_bidirectional",
    "weird_scan_reference",
]
