"""Build and call the fused C block step of ``csrc/block_step.c`` (through ctypes).

The library is the scan's C source compiled together with the block step (one unity
build, see :mod:`weirdnet.ops.cbuild`), so the step's scan is the scan's own code.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .. import cbuild
from ..cpool import address
from ..weird_scan.cpu import CSRC as SCAN_CSRC
from .reference import levels_of_ring
from .weights import ACTIVATIONS, BlockWeights

SOURCE = Path(__file__).with_name("csrc") / "block_step.c"
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


_i64, _ptr, _f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
_POINTERS = ("norm_mix_weight", "norm_mix_bias", "a_weight", "a_bias", "v_weight", "v_bias",
             "o_weight", "o_bias", "log_w", "norm_ffn_weight", "norm_ffn_bias",
             "inner_weight", "inner_bias", "outer_weight", "outer_bias")


class _CWeights(ctypes.Structure):
    """``block_weights`` of block_step_impl.h, field for field."""

    _fields_ = [("dim", _i64), ("d_ff", _i64), ("act", _i64), ("eps_mix", _f64),
                ("eps_ffn", _f64)] + [(name, _ptr) for name in _POINTERS]


_KERNEL = cbuild.Kernel("block_step", lambda: _declare(cbuild.build(SOURCE, (SCAN_CSRC,))),
                        "decoding uses the slower PyTorch step")


def load() -> ctypes.CDLL | None:
    """The compiled library (built on first use), or None when it cannot be built
    (reported once, see :func:`weirdnet.ops.cbuild.unavailable`: an error under
    ``WEIRDNET_REQUIRE_CPU_KERNEL=1``)."""
    return _KERNEL.load()


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    for sfx in _SUFFIX.values():
        fn = getattr(lib, f"block_step_{sfx}")
        fn.argtypes = [_ptr, _ptr, _i64, _ptr, _ptr, _ptr, _i64, _i64]
        fn.restype = ctypes.c_int
    return lib


def unavailable_reason() -> str | None:
    """None when the fused step can run here, else why not."""
    load()
    return None if _KERNEL.failure is None else str(_KERNEL.failure)


class BlockStep:
    """The fused decoding step of one block, its weights packed once.

    Call it as ``step(x, ring_m, ring_h, ring_u, t0)``: x (B, D) contiguous, the residual
    stream at position ``t0``, is updated in place to the block's output; the rings are
    the scan's decoding state (``WeirdScanCache``), updated in place.  No autograd.
    """

    def __init__(self, weights: BlockWeights):
        weights.check()
        if weights.a_weight.device.type != "cpu" or weights.dtype not in _SUFFIX:
            raise ValueError("the fused block step takes float32 or float64 CPU weights, got "
                             f"{weights.dtype} on {weights.a_weight.device}")
        lib = load()
        if lib is None:
            raise RuntimeError(f"the fused block step is unavailable: {_KERNEL.failure}")
        self.dim, self.dtype = weights.dim, weights.dtype
        # Contiguous, detached references: they keep the memory the C struct points to.
        self._tensors = {name: None if t is None else t.detach().contiguous()
                         for name, t in weights.tensors().items()}
        self._c = _CWeights(weights.dim, weights.d_ff, ACTIVATIONS.index(weights.activation),
                            weights.eps_mix, weights.eps_ffn,
                            *(address(self._tensors[name]) for name in _POINTERS))
        self._fn = getattr(lib, f"block_step_{_SUFFIX[weights.dtype]}")
        self._levels = weights.log_w.shape[0]

    def __call__(self, x: torch.Tensor, ring_m: torch.Tensor, ring_h: torch.Tensor,
                 ring_u: torch.Tensor, t0: int) -> None:
        B = x.shape[0]
        expected = ((1 << self._levels) - 1, B, self.dim)
        if x.shape != (B, self.dim) or x.dtype != self.dtype or not x.is_contiguous():
            raise ValueError(f"x must be a contiguous {self.dtype} tensor (B, {self.dim}), "
                             f"got {x.dtype} {tuple(x.shape)}")
        if levels_of_ring(ring_m) > self._levels or ring_m.shape[1:] != expected[1:]:
            raise ValueError(f"ring buffers of shape {tuple(ring_m.shape)} do not fit "
                             f"{self._levels} levels and x {tuple(x.shape)}")
        status = self._fn(ctypes.byref(self._c), x.data_ptr(), B, ring_m.data_ptr(),
                          ring_h.data_ptr(), ring_u.data_ptr(), levels_of_ring(ring_m), t0)
        if status != 0:
            raise MemoryError("fused block step: out of memory for its workspace")
