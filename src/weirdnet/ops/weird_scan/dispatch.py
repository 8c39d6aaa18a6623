"""The backends of ``weird_scan``, written down once, and the rule that picks one.

Every backend implements the same three functions (the contract is
``weird_scan.pytorch``'s; docs/design.md §8 has the algorithm):

    fwd(a, v, log_w, mask, doc, n_causal, nlev) -> O                       (B, L, D)
    bwd(a, v, log_w, mask, doc, grad, n_causal, nlev) -> (dA, dV, dlog_w)  dlog_w (nlev, D) f64

``doc`` is None or the (B, L) int64 canonical document ids of a packed batch (contiguous
and C-ordered when given): a level combines two positions only when their ids agree.
    extend(a, v, log_w, valid, ring_m, ring_h, ring_u, nlev, t0) -> O   (B, T, D), decoding

``BACKENDS`` maps each name to a :class:`Backend`, which knows whether it can run on a
device, how its kernels read their inputs (dtype, mask layout) and whether its first use
on a device is checked against the PyTorch backend.  :func:`resolve` picks one:

1. an explicit ``backend=`` argument, else ``$WEIRDNET_SCAN_BACKEND``: that backend, or a
   ValueError saying why it cannot run on the tensors' device;
2. otherwise the first backend of the table, in order, that lists the device type among
   the ones it is chosen for automatically and is available there (the C kernel on CPU,
   Triton on CUDA, PyTorch anywhere).

Self-check.  A backend with ``selfcheck_on`` (Triton: ``("cuda",)``) is compared with the
PyTorch backend the first time it is resolved for a device of that type in a process
(:func:`selfcheck_error`: a small random input, forward and all gradients).  If they
disagree, or the kernel fails, one warning says what was found and the rest of the process
uses the PyTorch backend on that device.  ``WEIRDNET_SCAN_SELFCHECK=0`` turns the check off.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import torch

from ..checks import levels_needed
from . import cpu as cpu_kernels
from . import pytorch as torch_kernels

ENV_BACKEND = "WEIRDNET_SCAN_BACKEND"
ENV_SELFCHECK = "WEIRDNET_SCAN_SELFCHECK"
# Largest relative error (of O, dA, dV and d log_w) the self-check accepts in float32.
SELFCHECK_TOLERANCE = 1e-4


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype of the scan state: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def prepare_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype`` with a unit channel stride (the kernels' only layout need)."""
    x = x.to(dtype)
    return x if x.stride(-1) == 1 else x.contiguous()


@dataclass(frozen=True)
class Backend:
    """One implementation of the scan.

    name: the name users pass as ``backend=``.
    load: returns the module with ``fwd``, ``bwd`` and ``extend`` (imported or built on
        first use), or raises ImportError / RuntimeError saying why it cannot.
    unavailable: ``unavailable(device)`` is None when the backend runs on ``device``,
        else the reason it does not (a sentence for the user).
    auto_on: device types for which the automatic choice considers it ("*": any).
    native_dtypes: its kernels read float16/bfloat16 inputs themselves (and write their
        outputs in the input dtype); otherwise inputs are cast to the compute dtype.
    byte_mask: its kernels read the mask as uint8 bytes rather than bool.
    selfcheck_on: device types where its first use is compared with the PyTorch backend.
    pow2_states: its decoding rings hold path-A states (``H = 2^m h``, m an integer, as
        the PyTorch backend's); otherwise natural-log ones (``H = e^m h``), so that a
        cache stepped by ``pytorch.extend_at`` (CUDA graphs) keeps the format it was
        filled in.
    torch_steps: ``pytorch.extend_at`` continues its rings bit for bit, so a cache of it
        can be stepped by tensor positions (``WeirdScanCache.follow``, CUDA graphs).
    """

    name: str
    load: Callable[[], ModuleType]
    unavailable: Callable[[torch.device], str | None]
    auto_on: tuple[str, ...]
    native_dtypes: bool = False
    byte_mask: bool = False
    selfcheck_on: tuple[str, ...] = field(default=())
    pow2_states: bool = False
    torch_steps: bool = True

    def available(self, device: torch.device | str) -> bool:
        """Whether this backend can run on tensors on ``device``."""
        return self.unavailable(torch.device(device)) is None

    def _read(self, x: torch.Tensor) -> torch.Tensor:
        return prepare_input(x, x.dtype if self.native_dtypes else compute_dtype(x.dtype))

    def _mask(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        if mask is None or not self.byte_mask:
            return mask
        return mask.contiguous().view(torch.uint8)

    def fwd(self, a, v, log_w, mask, doc, n_causal: int, nlev: int) -> torch.Tensor:
        """O (B, L, D) in the kernel's output dtype (see ``native_dtypes``)."""
        weights = log_w.to(compute_dtype(a.dtype)).contiguous()
        return self.load().fwd(self._read(a), self._read(v), weights, self._mask(mask),
                               _doc(doc), n_causal, nlev)

    def bwd(self, a, v, log_w, mask, doc, grad, n_causal: int, nlev: int):
        """(dA, dV, dlog_w): dA, dV (B, L, D); dlog_w (nlev, D) float64."""
        weights = log_w.to(compute_dtype(a.dtype)).contiguous()
        return self.load().bwd(self._read(a), self._read(v), weights, self._mask(mask),
                               _doc(doc), self._read(grad), n_causal, nlev)

    def extend(self, a, v, log_w, valid, ring_m, ring_h, ring_u, nlev: int, t0: int):
        """Decode T tokens; ``a``, ``v``, ``log_w`` and the rings in the compute dtype."""
        return self.load().extend(a, v, log_w, self._mask(valid), ring_m, ring_h, ring_u,
                                  nlev, t0)


def _doc(doc: torch.Tensor | None) -> torch.Tensor | None:
    """Canonical document ids as every kernel reads them: int64, C-contiguous."""
    return None if doc is None else doc.to(torch.int64).contiguous()


# --- the backends --------------------------------------------------------------


def _load_torch() -> ModuleType:
    return torch_kernels


def _torch_unavailable(device: torch.device) -> str | None:
    return None


def _load_cpu() -> ModuleType:
    if cpu_kernels.load() is None:
        raise RuntimeError("the C kernel could not be built")
    return cpu_kernels


def _cpu_unavailable(device: torch.device) -> str | None:
    if device.type != "cpu":
        return f"backend 'cpu' takes CPU tensors, got tensors on {device}"
    if cpu_kernels.load() is None:
        return "backend 'cpu' was requested but the C kernel could not be built"
    return None


_TRITON_MODULE = __package__ + ".triton"
_TRITON_E2_MODULE = __package__ + ".triton_e2"
_import_errors: dict[str, str] = {}  # why a Triton module did not import, once


def _import_triton_module(name: str) -> ModuleType:
    """Module ``name``, imported on first use; ImportError when triton does not load."""
    if name in sys.modules:
        return sys.modules[name]
    if name in _import_errors:
        raise ImportError(_import_errors[name])
    try:
        return importlib.import_module(name)
    except Exception as err:  # not installed, or an installation that cannot load
        _import_errors[name] = f"{type(err).__name__}: {err}"
        raise ImportError(_import_errors[name]) from err


def _load_triton() -> ModuleType:
    """``weird_scan.triton``, imported on first use; ImportError when triton does not load."""
    return _import_triton_module(_TRITON_MODULE)


def _triton_reason(name: str, load: Callable[[], ModuleType], module_name: str,
                   device: torch.device) -> str | None:
    """Why Triton backend ``name`` cannot run on ``device``, or None."""
    if device.type not in ("cuda", "cpu"):
        return f"backend '{name}' takes CUDA tensors, got tensors on {device}"
    try:
        module = load()
    except ImportError as err:
        return (f"backend '{name}' was requested but triton does not import ({err}); "
                "pip install 'weirdnet[triton]'")
    if device.type == "cpu" and not module.INTERPRETED:
        return (f"backend '{name}' takes CUDA tensors; CPU tensors run only under the Triton "
                f"interpreter: set TRITON_INTERPRET=1 before {module_name} is first "
                "imported")
    return None


def _load_triton_e2() -> ModuleType:
    """``weird_scan.triton_e2`` (issue 73's two-pass kernels), imported on first use."""
    return _import_triton_module(_TRITON_E2_MODULE)


def _triton_e2_unavailable(device: torch.device) -> str | None:
    return _triton_reason("triton-e2", _load_triton_e2, _TRITON_E2_MODULE, device)


def _triton_unavailable(device: torch.device) -> str | None:
    return _triton_reason("triton", _load_triton, _TRITON_MODULE, device)


BACKENDS: dict[str, Backend] = {
    "cpu": Backend("cpu", _load_cpu, _cpu_unavailable, auto_on=("cpu",), byte_mask=True),
    "triton": Backend("triton", _load_triton, _triton_unavailable, auto_on=("cuda",),
                      native_dtypes=True, selfcheck_on=("cuda",)),
    "torch": Backend("torch", _load_torch, _torch_unavailable, auto_on=("*",),
                     pow2_states=True),
    # opt-in (issue 73): the CUDA default only once a GPU record shows it faster than
    # "triton" at every length.  Its rings hold path-A states changed in form at its own
    # form points, so the PyTorch ring step (CUDA graphs) cannot continue them bitwise.
    "triton-e2": Backend("triton-e2", _load_triton_e2, _triton_e2_unavailable, auto_on=(),
                         native_dtypes=True, selfcheck_on=("cuda",), pow2_states=True,
                         torch_steps=False),
}
FALLBACK = "torch"


def _auto_on(backend: Backend, device: torch.device) -> bool:
    return device.type in backend.auto_on or "*" in backend.auto_on


def check_name(backend: str | None) -> None:
    """ValueError unless ``backend`` is None or a name of :data:`BACKENDS`."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {tuple(BACKENDS)} or None, got {backend!r}")


def resolve(device: torch.device, backend: str | None = None) -> Backend:
    """The backend that runs on ``device``: explicit, ``$WEIRDNET_SCAN_BACKEND``, or auto."""
    choice = backend or os.environ.get(ENV_BACKEND) or None
    check_name(choice)
    if choice is not None:
        chosen = BACKENDS[choice]
        reason = chosen.unavailable(device)
        if reason is not None:
            raise ValueError(reason)
    else:
        fits = (b for b in BACKENDS.values()
                if _auto_on(b, device) and b.unavailable(device) is None)
        chosen = next(fits, BACKENDS[FALLBACK])
    return _checked(chosen, device)


# --- self-check -------------------------------------------------------------------------

_verdicts: dict[tuple[str, str], Backend] = {}
_verdict_lock = threading.Lock()


def selfcheck_enabled() -> bool:
    """False when ``$WEIRDNET_SCAN_SELFCHECK`` is 0/false/off/no."""
    return os.environ.get(ENV_SELFCHECK, "1").strip().lower() not in ("0", "false", "off", "no")


def _checked(backend: Backend, device: torch.device) -> Backend:
    """``backend``, or the fallback if its self-check on ``device`` failed (warned once)."""
    if device.type not in backend.selfcheck_on or not selfcheck_enabled():
        return backend
    key = (backend.name, str(device))
    verdict = _verdicts.get(key)
    if verdict is None:
        with _verdict_lock:
            verdict = _verdicts.get(key)
            if verdict is None:
                verdict = _verdicts[key] = _run_selfcheck(backend, device)
    return verdict


def _run_selfcheck(backend: Backend, device: torch.device) -> Backend:
    error = selfcheck_error(backend, device)
    if error is None:
        return backend
    warnings.warn(
        f"weirdnet: the '{backend.name}' scan backend failed its self-check on {device} "
        f"against the PyTorch backend ({error}); this process uses backend "
        f"'{FALLBACK}' on {device} instead. Please report this with your GPU, driver and "
        f"triton versions. {ENV_SELFCHECK}=0 skips the check.",
        RuntimeWarning, stacklevel=4)
    return BACKENDS[FALLBACK]


def selfcheck_inputs(device: torch.device):
    """(a, v, log_w, mask, doc, grad, n_causal) of the self-check: B=2, L=300 (two passes of
    the Triton kernels), D=6 with 3 causal and 3 anti-causal channels, one padded row tail,
    and three packed documents in the first row."""
    gen = torch.Generator().manual_seed(20261124)
    B, L, D = 2, 300, 6
    a, v, grad = (torch.randn(B, L, D, generator=gen) * 2 for _ in range(3))
    log_w = -(torch.rand(levels_needed(L), D, generator=gen) * 0.5).cumsum(0)
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, L - 41:] = False
    doc = torch.zeros(B, L, dtype=torch.int64)
    doc[0, 70:] = 1
    doc[0, 201:] = 2
    return (*(t.to(device) for t in (a, v, log_w, mask, doc, grad)), D // 2)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-300))


def selfcheck_error(backend: Backend, device: torch.device) -> str | None:
    """None when ``backend`` agrees with the PyTorch backend on :func:`selfcheck_inputs`
    (forward and the three gradients, relative error <= ``SELFCHECK_TOLERANCE``), else a
    description of what differed or of the exception the kernel raised."""
    reference = BACKENDS[FALLBACK]
    try:
        a, v, log_w, mask, doc, grad, n_causal = selfcheck_inputs(device)
        nlev = log_w.shape[0]
        got = (backend.fwd(a, v, log_w, mask, doc, n_causal, nlev),
               *backend.bwd(a, v, log_w, mask, doc, grad, n_causal, nlev))
    except Exception as err:  # a kernel that does not compile or launch on this device
        return f"it raised {type(err).__name__}: {err}"
    want = (reference.fwd(a, v, log_w, mask, doc, n_causal, nlev),
            *reference.bwd(a, v, log_w, mask, doc, grad, n_causal, nlev))
    errors = {name: _rel_err(x, y) for name, x, y in zip(("O", "dA", "dV", "dlog_w"), got, want)}
    bad = {k: e for k, e in errors.items() if not e <= SELFCHECK_TOLERANCE}  # NaN is bad
    if not bad:
        return None
    found = ", ".join(f"{k} relative error {e:.2e}" for k, e in bad.items())
    return f"{found} (tolerance {SELFCHECK_TOLERANCE:g})"
