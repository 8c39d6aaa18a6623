"""Which kernel ``scaled_dot_product_attention`` runs, and a GPU run that takes only the
fast ones: what makes a model-level GPU comparison with a Transformer fair.

On CUDA, ``bench speed`` (and the ``bench gpu`` model step) train every model in bfloat16
autocast (:func:`gpu_precision`) with SDPA limited to :data:`FAST` (FlashAttention or
cuDNN): a shape that neither takes fails the row instead of quietly running the
memory-efficient or the math kernel.  :class:`SDPARecorder` records, per SDPA call, the
backend PyTorch's chooser picks for it under the flags in force (the call's own tensors,
cast to the autocast dtype when autocast is on)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

FAST = ("FLASH_ATTENTION", "CUDNN_ATTENTION")
"""The SDPA backends a fair GPU comparison accepts for the Transformer (names of
``torch.nn.attention.SDPBackend``)."""

PRECISION = {"cuda": "bf16 autocast", "cpu": "fp32"}
"""What each device type's model-level rows compute in."""

NO_FAST_KERNEL = ("SDPA has neither a FlashAttention nor a cuDNN kernel for this model's "
                  "attention (it would run the memory-efficient or math kernel): refused")


def chosen_backend(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                   is_causal: bool = False, scale=None, enable_gqa: bool = False) -> str:
    """The ``SDPBackend`` name PyTorch's chooser picks for this call (query (B, H, Lq, E),
    key and value (B, H, Lk, E|Ev)); "unknown: ..." where the private chooser fails."""
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    q, k, v = (t if dtype is None or not t.is_floating_point() else t.to(dtype)
               for t in (query, key, value))
    try:
        index = torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal,
                                        scale=scale, enable_gqa=enable_gqa)
        return SDPBackend(index).name
    except Exception as error:  # noqa: BLE001 - a record, not a check: said, not raised
        return f"unknown: {type(error).__name__}: {error}"[:200]


class SDPARecorder(TorchFunctionMode):
    """Inside ``with SDPARecorder() as r:``, ``r.backends`` lists the backend of each
    ``scaled_dot_product_attention`` call (:func:`chosen_backend`)."""

    def __init__(self):
        super().__init__()
        self.backends: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.backends.append(chosen_backend(*args, **kwargs))
        return func(*args, **kwargs)


def backends_text(backends: list[str]) -> str | None:
    """The distinct backends of a recording, joined by "+" (None: no SDPA call)."""
    return "+".join(sorted(set(backends))) or None


def unfair(backend: str | None) -> bool:
    """A recorded backend that a fair GPU comparison refuses (None: no SDPA call: fine)."""
    return backend is not None and any(b not in FAST for b in backend.split("+"))


@contextlib.contextmanager
def gpu_precision(device) -> Iterator[None]:
    """On CUDA: bfloat16 autocast, SDPA limited to :data:`FAST` (a call neither takes
    raises RuntimeError :data:`NO_FAST_KERNEL`).  Elsewhere: nothing (float32)."""
    if device.type != "cuda":
        yield
        return
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16), \
                sdpa_kernel([getattr(SDPBackend, name) for name in FAST]):
            yield
    except RuntimeError as error:
        if "No available kernel" in str(error):
            raise RuntimeError(NO_FAST_KERNEL) from error
        raise
