"""``weird_scan``: the Weird-attention weighted log-step scan, exact and stable.

    O_i = sum_{j <= i} a_{i-j} e^{A_j} V_j / sum_{j <= i} a_{i-j} e^{A_j},
    a_d = prod_{k in bits(d)} e^{log_w[k]}

computed by the running-max log-step scan of docs/design.md §8 in float32 (float64 for
float64 inputs), with a custom backward (the mirrored scan) that recomputes the forward
levels instead of storing them: between forward and backward only the inputs are kept.

These functions check their arguments (a ValueError naming the argument, before any kernel
runs, in eager mode and under ``torch.compile`` alike) and call the custom op
``torch.ops.weirdnet.weird_scan`` (``library.py``), which runs one of the backends of
``dispatch.BACKENDS``:
  * ``"cpu"``: fused C kernels (``csrc/weird_scan.c``), built on first use;
  * ``"torch"``: pure PyTorch, any device;
  * ``"triton"``: fused Triton kernels (``triton.py``) for CUDA tensors, checked against
    the PyTorch backend on first use; on CPU tensors only under the Triton interpreter
    (``TRITON_INTERPRET=1``, for tests).
``backend=None`` picks ``"cpu"`` for CPU tensors when the kernels can be built, else
``"torch"``, and ``"triton"`` for CUDA tensors when ``triton`` imports, else ``"torch"``.
``WEIRDNET_SCAN_BACKEND=torch`` forces the fallback everywhere (any name forces that one).
"""

from __future__ import annotations

import torch

from ..checks import check_scan_inputs
from . import dispatch
from .library import scan_op


def scan_backend_name(device: torch.device | str = "cpu") -> str:
    """Name of the backend ``weird_scan`` uses for tensors on ``device``."""
    return dispatch.resolve(torch.device(device)).name


def _scan(a, v, log_w, mask, split: int, backend: str | None):
    check_scan_inputs(a, v, log_w, mask)
    dispatch.check_name(backend)
    return scan_op(a, v, log_w, mask, split, backend or "")


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
