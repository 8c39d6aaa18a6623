"""The measurements of ``weirdnet bench scan-cost``, as functions the tests call too.

:func:`bytes_at` — bytes per element and launches of forward and forward + backward at
the issue's shape, derived from an interpreter run at one channel block;
:func:`launches_at` — launches and syncs at the issue's shape for each length (host code
on meta tensors, nothing executed);
:func:`ptx_specs` — the specializations to compile (:mod:`.ptx`).
Each needs the backend's kernels built for the interpreter (TRITON_INTERPRET=1 before
their first import).
"""

from __future__ import annotations

from .budgets import LAUNCH_LENGTHS, SHAPE, SMALL
from .count import count, summarize
from .derive import derive


def _both(fwd: dict, bwd: dict) -> dict:
    """Forward + backward: a training step runs the forward once, then the backward."""
    return {"launches": fwd["launches"] + bwd["launches"],
            "triton_launches": fwd["triton_launches"] + bwd["triton_launches"],
            "bytes_per_elem": fwd["bytes_per_elem"] + bwd["bytes_per_elem"],
            "kernel_bytes_per_elem": fwd["kernel_bytes_per_elem"]
            + bwd["kernel_bytes_per_elem"],
            "syncs": fwd["syncs"] + bwd["syncs"]}


def bytes_at(backend: str, length: int, shape: dict = SHAPE, small: dict = SMALL) -> dict:
    """{"forward", "backward", "fwdbwd"} summaries at (shape, length), the small run's
    own summaries, and every launch (derived) as dicts."""
    measured = count(backend, small["batch"], length, small["dim"])
    host = count(backend, shape["batch"], length, shape["dim"], execute=False)
    elements = shape["batch"] * length * shape["dim"]
    small_elements = small["batch"] * length * small["dim"]
    out = {"length": length, "shape": shape, "small": small, "derived": {}, "measured": {},
           "launches": {}}
    for phase in ("forward", "backward"):
        full = derive(measured[phase], host[phase])
        out["derived"][phase] = summarize(full, elements)
        out["measured"][phase] = summarize(measured[phase], small_elements)
        out["launches"][phase] = [x.as_dict() for x in full.launches]
    for key in ("derived", "measured"):
        out[key]["fwdbwd"] = _both(out[key]["forward"], out[key]["backward"])
    return out


def launches_at(backend: str, lengths=LAUNCH_LENGTHS, shape: dict = SHAPE) -> list[dict]:
    """Per length: forward and backward launches (Triton, host ops) and syncs."""
    rows = []
    for length in lengths:
        phases = count(backend, shape["batch"], length, shape["dim"], execute=False)
        row = {"L": length}
        for name, phase in phases.items():
            s = summarize(phase, shape["batch"] * length * shape["dim"])
            row[name] = {k: s[k] for k in ("launches", "triton_launches", "host_ops",
                                           "syncs", "host_op_names")}
        rows.append(row)
    return rows
