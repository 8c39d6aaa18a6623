"""``weird_scan``: the Weird-attention weighted log-step scan, exact and stable.

    O_i = sum_{j <= i} a_{i-j} e^{A_j} V_j / sum_{j <= i} a_{i-j} e^{A_j},
    a_d = prod_{k in bits(d)} e^{log_w[k]}

computed by the running-max log-step scan of docs/design.md §8 in float32 (float64 for
float64 inputs), with a custom backward (the mirrored scan) that recomputes the forward
levels instead of storing them: between forward and backward only the inputs are kept.

Backends (one signature):
  * ``"cpu"``: fused C kernels (``csrc/weird_scan.c``), built on first use;
  * ``"torch"``: pure PyTorch, any device;
  * ``"triton"``: fused Triton kernels (``scan_triton``) for CUDA tensors; on CPU tensors
    only under the Triton interpreter (``TRITON_INTERPRET=1``, for tests).
``backend=None`` picks ``"cpu"`` for CPU tensors when the kernels can be built, else
``"torch"``, and ``"triton"`` for CUDA tensors when ``triton`` imports, else ``"torch"``.
``WEIRDNET_SCAN_BACKEND=torch`` forces the fallback everywhere (any name forces that one).
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

from . import _cpu_kernel, scan_torch
from .checks import check_scan_inputs, levels_needed

BACKENDS = ("cpu", "torch", "triton")
_TRITON_MODULE = __package__ + ".scan_triton"
_triton_import_error: str | None = None


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype of the scan state: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _triton_module():
    """``scan_triton``, imported on first use; None when ``triton`` does not import."""
    global _triton_import_error
    if _TRITON_MODULE in sys.modules:
        return sys.modules[_TRITON_MODULE]
    if _triton_import_error is not None:
        return None
    try:
        return importlib.import_module(_TRITON_MODULE)
    except Exception as err:  # not installed, or an installation that cannot load
        _triton_import_error = f"{type(err).__name__}: {err}"
        return None


def _check_triton(device: torch.device) -> None:
    """Raise a ValueError saying why backend 'triton' cannot run on ``device``."""
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"backend 'triton' takes CUDA tensors, got tensors on {device}")
    module = _triton_module()
    if module is None:
        raise ValueError("backend 'triton' was requested but triton does not import "
                         f"({_triton_import_error}); pip install 'weirdnet[triton]'")
    if device.type == "cpu" and not module.INTERPRETED:
        raise ValueError("backend 'triton' takes CUDA tensors; CPU tensors run only under "
                         "the Triton interpreter: set TRITON_INTERPRET=1 before "
                         "weirdnet.ops.scan_triton is first imported")


def resolve_backend(device: torch.device, backend: str | None = None) -> str:
    """The backend that runs on ``device``: an explicit choice, the env override, or auto."""
    choice = backend or os.environ.get("WEIRDNET_SCAN_BACKEND") or None
    if choice is not None and choice not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {choice!r}")
    if choice == "cpu" and device.type != "cpu":
        raise ValueError(f"backend 'cpu' takes CPU tensors, got tensors on {device}")
    if choice is None:
        if device.type == "cuda":
            return "triton" if _triton_module() is not None else "torch"
        use_c = device.type == "cpu" and _cpu_kernel.available()
        choice = "cpu" if use_c else "torch"
    if choice == "cpu" and not _cpu_kernel.available():
        raise ValueError("backend 'cpu' was requested but the C kernel could not be built")
    if choice == "triton":
        _check_triton(device)
    return choice


def scan_backend_name(device: torch.device | str = "cpu") -> str:
    """Name of the backend ``weird_scan`` uses for tensors on ``device``."""
    return resolve_backend(torch.device(device))


def implementation(backend: str):
    """Module with ``fwd``, ``bwd`` and ``extend`` for a resolved backend name."""
    if backend == "triton":
        return _triton_module()
    return _cpu_kernel if backend == "cpu" else scan_torch


def prepare_input(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype`` with a unit channel stride (the kernels' only layout need)."""
    x = x.to(dtype)
    return x if x.stride(-1) == 1 else x.contiguous()


def kernel_input(x: torch.Tensor, backend: str) -> torch.Tensor:
    """(B, L, D) ``x`` as the backend reads it: Triton loads any float dtype itself (and
    returns results in it), the others take the compute dtype."""
    return prepare_input(x, x.dtype if backend == "triton" else compute_dtype(x.dtype))


def kernel_mask(mask, backend: str):
    """The mask as the backend reads it: uint8 bytes for the C kernel, bool otherwise."""
    if mask is None:
        return None
    return mask.contiguous().view(torch.uint8) if backend == "cpu" else mask


class _WeirdScanFunction(torch.autograd.Function):
    """Autograd wrapper: saves only (a, v, log_w, mask); backward recomputes the levels."""

    @staticmethod
    def forward(ctx, a, v, log_w, mask, split, backend):
        dtype = compute_dtype(a.dtype)
        nlev = levels_needed(a.shape[1])
        impl = implementation(backend)
        out = impl.fwd(kernel_input(a, backend), kernel_input(v, backend),
                       log_w.to(dtype).contiguous(), kernel_mask(mask, backend), split, nlev)
        ctx.save_for_backward(a, v, log_w, mask)
        ctx.split, ctx.backend, ctx.nlev = split, backend, nlev
        return out.to(a.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        a, v, log_w, mask = ctx.saved_tensors
        dtype = compute_dtype(a.dtype)
        impl = implementation(ctx.backend)
        da, dv, dlogw = impl.bwd(
            kernel_input(a, ctx.backend), kernel_input(v, ctx.backend),
            log_w.to(dtype).contiguous(), kernel_mask(mask, ctx.backend),
            kernel_input(grad, ctx.backend), ctx.split, ctx.nlev,
        )
        grad_log_w = torch.zeros_like(log_w)
        grad_log_w[: ctx.nlev] = dlogw.to(log_w.dtype)
        return da.to(a.dtype), dv.to(v.dtype), grad_log_w, None, None, None


def _scan(a, v, log_w, mask, split: int, backend: str | None):
    check_scan_inputs(a, v, log_w, mask)
    name = resolve_backend(a.device, backend)
    return _WeirdScanFunction.apply(a, v, log_w, mask, split, name)


def weird_scan(a, v, log_w, *, reverse=False, mask=None, backend=None):
    """Weird-attention scan O = H / U of ``E = exp(a)``-weighted values ``v``.

    Args:
        a: (B, L, D) attention logits A, any floating dtype.
        v: (B, L, D) values V, same dtype as ``a``.
        log_w: (K, D) log of the per-level distance weights, K >= ceil(log2 L).
            Mode "cumexp" passes ``cumsum(w, 0)``, "exp" passes ``w``, PS-attention zeros.
        reverse: False for the causal prefix scan (decoder), True for the anti-causal
            suffix scan.
        mask: optional (B, L) bool, True for real tokens; padded tokens contribute nothing.
            Outputs at padded positions are finite (0 where no real token is in reach).
        backend: None (auto), "cpu" (fused C kernel), "torch" or "triton" (fused Triton
            kernels; CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``).

    Returns:
        O: (B, L, D) in ``a``'s dtype, computed with float32 state (float64 for float64).

    Non-finite values are never hidden; every backend, the decoding cache and
    :func:`weirdnet.ops.weird_scan_reference` (the specification) agree, per channel:
      * NaN or +inf in A, or NaN or +-inf in V, at a real position j: every output with j
        in its window (causal i >= j, reverse i <= j) is NaN, as ``torch.softmax`` is NaN
        for +inf.
      * -inf in A is a zero weight: an output with a finite-A real token in its window is
        exactly the output with j padded; one whose real tokens are all -inf is NaN (0/0).
      * Padded positions are left out whatever they hold; a window of padding only gives
        0, as before.
      * Gradients: every real input in the window of a NaN output gets NaN dA and dV
        (padding gets 0), and d log_w of a channel with a NaN output is NaN; elsewhere they
        are finite and exact.  ``log_w`` must be finite (the layers make it so); finite
        logits are assumed above -1e29 (-1e299 in float64), the padding level.
    """
    D = a.shape[-1] if isinstance(a, torch.Tensor) and a.dim() == 3 else 0
    return _scan(a, v, log_w, mask, 0 if reverse else D, backend)


def weird_scan_bidirectional(a, v, log_w, *, mask=None, split=None, backend=None):
    """Encoder form: channels [0, split) causal, [split, D) anti-causal, in one call.

    Same arguments as :func:`weird_scan`; ``split`` defaults to D // 2, and row k of
    ``log_w`` holds the forward half's weights in [0, split) and the backward half's in
    [split, D).  Returns O (B, L, D).
    """
    D = a.shape[-1] if isinstance(a, torch.Tensor) and a.dim() == 3 else 0
    split = D // 2 if split is None else int(split)
    if not 0 <= split <= D:
        raise ValueError(f"split must be in [0, D={D}], got {split}")
    return _scan(a, v, log_w, mask, split, backend)
