"""Build and call the fused C kernels of ``csrc/short_conv.c`` (through ctypes).

Work units (one batch row times 1,024 positions) run in parallel on
:mod:`weirdnet.ops.cpool`'s threads.  When the library cannot be built, :func:`load`
returns None (with one warning line) and the op uses PyTorch's ``conv1d`` instead.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .. import cbuild
from ..cpool import address, rows, run_units

SOURCE = Path(__file__).with_name("csrc") / "short_conv.c"
DTYPES = {torch.float32: "f32", torch.float64: "f64"}

_i64, _ptr = ctypes.c_int64, ctypes.c_void_p


def _make() -> ctypes.CDLL:
    lib = cbuild.build(SOURCE)
    for sfx in DTYPES.values():
        fwd_fn = getattr(lib, f"short_conv_fwd_{sfx}")
        fwd_fn.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _i64, _ptr, _ptr, _ptr, _ptr] \
            + [_i64] * 6
        bwd_fn = getattr(lib, f"short_conv_bwd_{sfx}")
        bwd_fn.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _i64, _ptr, _ptr, _ptr, _i64, _i64,
                           _ptr, _ptr] + [_i64] * 6
        fwd_fn.restype = bwd_fn.restype = ctypes.c_int
    lib.short_conv_units.argtypes = [_i64, _i64]
    lib.short_conv_units.restype = _i64
    lib.short_conv_reduce.argtypes = [_ptr, _i64, _i64, _ptr]
    lib.short_conv_reduce.restype = None
    return lib


_KERNEL = cbuild.Kernel("short_conv", _make,
                        "the short convolution uses PyTorch's conv1d on CPU")


def load() -> ctypes.CDLL | None:
    """The compiled library (built on first use), or None when it cannot be built
    (reported once; an error under ``WEIRDNET_REQUIRE_CPU_KERNEL=1``)."""
    return _KERNEL.load()


def takes(x: torch.Tensor) -> bool:
    """Whether the C kernel can run on ``x``: a float32/float64 CPU tensor, library built."""
    return x.device.type == "cpu" and x.dtype in DTYPES and load() is not None


def fwd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
        state: torch.Tensor | None, doc: torch.Tensor | None) -> torch.Tensor:
    """y (B, L, D); x and state with unit channel stride, weight (D, k), all one dtype;
    doc (B, L) contiguous int64 segment ids (packed documents) or None."""
    lib = load()
    B, L, D = x.shape
    k = weight.shape[1]
    taps = weight.t().contiguous()  # (k, D)
    bias = None if bias is None else bias.contiguous()
    y = torch.empty((B, L, D), dtype=x.dtype)
    fn = getattr(lib, f"short_conv_fwd_{DTYPES[x.dtype]}")
    args = (*rows(x), *rows(state), address(doc), taps.data_ptr(), address(bias),
            y.data_ptr(), B, L, D, k)
    run_units(fn, args, lib.short_conv_units(B, L), B * L * D, "short_conv")
    return y


def bwd(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None,
        doc: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx (B, L, D) in x's dtype, dweight (D, k) and dbias (D,) in float64)."""
    lib = load()
    B, L, D = x.shape
    k = weight.shape[1]
    taps = weight.t().contiguous()
    units = lib.short_conv_units(B, L)
    dx = torch.empty((B, L, D), dtype=x.dtype)
    partial = torch.empty((units, k + 1, D), dtype=torch.float64)
    fn = getattr(lib, f"short_conv_bwd_{DTYPES[x.dtype]}")
    args = (*rows(x), *rows(state), address(doc), taps.data_ptr(), *rows(grad),
            dx.data_ptr(), partial.data_ptr(), B, L, D, k)
    run_units(fn, args, units, B * L * D, "short_conv")
    sums = torch.empty((k + 1, D), dtype=torch.float64)
    lib.short_conv_reduce(partial.data_ptr(), units, (k + 1) * D, sums.data_ptr())
    return dx, sums[:k].t(), sums[k]
