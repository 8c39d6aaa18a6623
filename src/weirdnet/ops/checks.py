"""Argument checks shared by every op, its reference, its decoder and the layers.

Every problem raises a ``ValueError`` that names the argument, what was expected and
what was given.
"""

from __future__ import annotations

import torch

from .packing import check_doc_ids

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def levels_needed(length: int) -> int:
    """Number of scan levels for a sequence of ``length``: ceil(log2(length)), 0 for L <= 1."""
    return max(0, int(length) - 1).bit_length()


def max_len_for_levels(levels: int) -> int:
    """Longest sequence ``levels`` scan levels cover: 2**levels."""
    return 1 << levels


def on_host(x: torch.Tensor) -> bool:
    """Whether a branch on ``x``'s values is free: a CPU tensor in eager mode.  On a GPU
    it would wait for the device (a host sync), and under ``torch.compile`` it would break
    the graph, so data-dependent fast paths and value checks run only here."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def check_float_tensor(x, name: str, rank: int) -> None:
    """``x`` must be a floating tensor of the given rank."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), "
            f"got dtype {x.dtype}"
        )
    if x.dim() != rank:
        raise ValueError(f"{name} must have {rank} dimensions, got shape {tuple(x.shape)}")


def check_mask(mask, batch: int, length: int, name: str = "mask", device=None) -> None:
    """``mask`` must be None or a bool tensor of shape (batch, length) (on ``device``,
    when given)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool tensor (True = real token), got {got}")
    if tuple(mask.shape) != (batch, length):
        raise ValueError(
            f"{name} must have shape (batch, length) = {(batch, length)}, "
            f"got {tuple(mask.shape)}"
        )
    if device is not None and mask.device != torch.device(device):
        raise ValueError(f"{name} must be on {device}, got {mask.device}")


def check_rows(rows, batch: int, device=None, name: str = "rows") -> None:
    """``rows`` must be a (batch,) bool tensor (True: the rows an operation applies to)."""
    if not isinstance(rows, torch.Tensor) or rows.dtype != torch.bool \
            or tuple(rows.shape) != (batch,):
        got = (f"{rows.dtype} tensor of shape {tuple(rows.shape)}"
               if isinstance(rows, torch.Tensor) else type(rows).__name__)
        raise ValueError(f"{name} must be a bool tensor of shape ({batch},), got {got}")
    if device is not None and rows.device != torch.device(device):
        raise ValueError(f"{name} must be on {device}, got {rows.device}")


def check_same_layout(x, y, xname: str, yname: str) -> None:
    """``y`` must have the shape and dtype of ``x`` (both already checked floating)."""
    if y.shape != x.shape:
        raise ValueError(
            f"{yname} must have the shape of {xname} {tuple(x.shape)}, got {tuple(y.shape)}"
        )
    if y.dtype != x.dtype:
        raise ValueError(
            f"{xname} and {yname} must have the same dtype, got {x.dtype} and {y.dtype}"
        )


def check_finite_log_w(log_w: torch.Tensor, levels: int, name: str = "log_w") -> None:
    """The ``levels`` rows of ``log_w`` (K, D) that a scan of that many levels uses must be
    finite: +-inf or NaN there is refused, not propagated.  This reads the values, so call
    it only where that is free (a CPU tensor, see :func:`on_host`; inside a custom op's
    CPU implementation it is free under ``torch.compile`` too)."""
    used = log_w[:levels]
    bad = ~torch.isfinite(used)
    if bool(bad.any()):
        k, d = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name} must be finite, got {used[k, d].item()} at level {k}, "
                         f"channel {d} (of {int(bad.sum())} non-finite entries)")


def check_scan_inputs(a, v, log_w, mask=None, doc_ids=None) -> tuple[int, int, int]:
    """Validate ``weird_scan`` arguments; returns (B, L, D)."""
    check_float_tensor(a, "a", 3)
    check_float_tensor(v, "v", 3)
    check_float_tensor(log_w, "log_w", 2)
    check_same_layout(a, v, "a", "v")
    if v.device != a.device or log_w.device != a.device:
        raise ValueError(
            f"a, v and log_w must be on one device, got {a.device}, {v.device}, {log_w.device}"
        )
    B, L, D = a.shape
    if log_w.shape[1] != D:
        raise ValueError(
            f"log_w must have shape (levels, D={D}), got {tuple(log_w.shape)}"
        )
    need = levels_needed(L)
    if log_w.shape[0] < need:
        raise ValueError(
            f"sequence length {L} exceeds the {max_len_for_levels(log_w.shape[0])} positions "
            f"that log_w's {log_w.shape[0]} levels cover; it needs {need} levels "
            f"(a layer built with max_len >= {L})"
        )
    check_mask(mask, B, L, device=a.device)
    check_doc_ids(doc_ids, B, L, a.device)
    return B, L, D
