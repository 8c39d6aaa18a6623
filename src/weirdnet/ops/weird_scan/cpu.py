"""Build, cache and call the fused C kernels of ``csrc/weird_scan.c``.

The C file is compiled once per machine by :mod:`weirdnet.ops.cbuild` and loaded with
:mod:`ctypes`.  Work units run in parallel on :mod:`weirdnet.ops.cpool`'s
threads.

If no compiler is found, the build fails or the C file is missing, :func:`load` returns
``None`` (with one warning line) and the pure-PyTorch implementation is used instead.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .. import cbuild
from ..cpool import address, rows, run_units

CSRC = Path(__file__).with_name("csrc")
SOURCE = CSRC / "weird_scan.c"
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


def _declare(lib: ctypes.CDLL) -> None:
    for sfx in ("f32", "f64"):
        getattr(lib, f"scan_fwd_{sfx}").argtypes = [_ptr, _i64, _i64, _ptr, _i64, _i64, _ptr,
                                                    _ptr, _ptr, _ptr] + [_i64] * 7
        getattr(lib, f"scan_bwd_{sfx}").argtypes = [_ptr, _i64, _i64, _ptr, _i64, _i64, _ptr,
                                                    _ptr, _ptr, _ptr, _i64, _i64, _ptr, _ptr,
                                                    _ptr] + [_i64] * 7
        getattr(lib, f"scan_extend_{sfx}").argtypes = [_ptr, _i64, _i64, _ptr, _i64, _i64,
                                                       _ptr, _ptr, _ptr, _ptr, _ptr,
                                                       _ptr] + [_i64] * 5
        for kind in ("fwd", "bwd", "extend"):
            getattr(lib, f"scan_{kind}_{sfx}").restype = ctypes.c_int
    lib.scan_units.argtypes = [_i64, _i64, _i64]
    lib.scan_units.restype = _i64


def _make() -> ctypes.CDLL:
    lib = cbuild.build(SOURCE)
    _declare(lib)
    return lib


_KERNEL = cbuild.Kernel("weird_scan", _make,
                        "the scan uses the slower pure-PyTorch backend on CPU")


def load() -> ctypes.CDLL | None:
    """The compiled kernel library, building it on first use; ``None`` if unavailable
    (reported once, see :func:`weirdnet.ops.cbuild.unavailable`: an error under
    ``WEIRDNET_REQUIRE_CPU_KERNEL=1``)."""
    return _KERNEL.load()


def available() -> bool:
    """Whether the compiled CPU kernels can be used on this machine."""
    return load() is not None


def _suffix(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return "f32"
    if dtype == torch.float64:
        return "f64"
    raise TypeError(f"the C scan kernel takes float32 or float64, got {dtype}")


def fwd(a, v, log_w, mask, doc, n_causal: int, nlev: int) -> torch.Tensor:
    """Forward scan; see ``weird_scan.pytorch.fwd`` for the contract.  Returns O (B, L, D)."""
    lib = load()
    B, L, D = a.shape
    out = torch.empty((B, L, D), dtype=a.dtype)
    fn = getattr(lib, f"scan_fwd_{_suffix(a.dtype)}")
    n_units = lib.scan_units(B, D, n_causal)
    args = (*rows(a), *rows(v), log_w.data_ptr(), address(mask), address(doc), out.data_ptr(),
            B, L, D, n_causal, nlev)
    run_units(fn, args, n_units, B * L * D, "weird_scan")
    return out


def bwd(a, v, log_w, mask, doc, grad, n_causal: int, nlev: int):
    """Backward scan; returns (da, dv, dlog_w) with dlog_w (nlev, D) in float64."""
    lib = load()
    B, L, D = a.shape
    da = torch.empty((B, L, D), dtype=a.dtype)
    dv = torch.empty((B, L, D), dtype=a.dtype)
    dlogw = torch.zeros((B, nlev, D), dtype=torch.float64)
    fn = getattr(lib, f"scan_bwd_{_suffix(a.dtype)}")
    n_units = lib.scan_units(B, D, n_causal)
    args = (*rows(a), *rows(v), log_w.data_ptr(), address(mask), address(doc), *rows(grad),
            da.data_ptr(), dv.data_ptr(), dlogw.data_ptr(), B, L, D, n_causal, nlev)
    run_units(fn, args, n_units, B * L * D, "weird_scan")
    return da, dv, dlogw.sum(0)


def extend(a, v, log_w, valid, ring_m, ring_h, ring_u, nlev: int, t0: int) -> torch.Tensor:
    """Decode T tokens at positions t0.. through the ring buffers; returns O (B, T, D)."""
    lib = load()
    B, T, D = a.shape
    out = torch.empty((B, T, D), dtype=a.dtype)
    fn = getattr(lib, f"scan_extend_{_suffix(a.dtype)}")
    status = fn(*rows(a), *rows(v), log_w.data_ptr(), address(valid), ring_m.data_ptr(),
                ring_h.data_ptr(), ring_u.data_ptr(), out.data_ptr(), B, T, D, nlev, t0)
    if status != 0:
        raise MemoryError("weird_scan C kernel: out of memory")
    return out
