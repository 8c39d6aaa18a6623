"""Weird-attention's weighted log-step scan: one package, the reference beside the kernels.

    reference.py  the direct O(L^2) formula in float64: the specification
    pytorch.py    the log-step scan in plain PyTorch (any device): backend "torch"
    cpu.py        the fused C kernels of csrc/ (built on first use, called through ctypes)
    triton.py     the fused Triton kernels (CUDA)
    dispatch.py   the backend table and the rule that picks a backend; the Triton self-check
    op.py         the public op: argument checks, then its torch.library custom ops
                  (forward, backward, decode step), which run a backend
    cache.py      token-by-token decoding through per-level ring buffers
"""

from .cache import WeirdScanCache
from .dispatch import BACKENDS
from .op import scan_backend_name, weird_scan, weird_scan_bidirectional
from .reference import weird_scan_reference

__all__ = [
    "BACKENDS",
    "WeirdScanCache",
    "scan_backend_name",
    "weird_scan",
    "weird_scan_bidirectional",
    "weird_scan_reference",
]
