"""The child processes of ``weirdnet bench scan-cost`` (``weirdnet_lab.harness.child``):
``scan-cost`` under the interpreter, ``scan-ptx`` without it."""

from __future__ import annotations


def measure(spec: dict) -> dict:
    """Bytes at the spec's length, launches at every length, the specializations met."""
    import torch

    from .measure import bytes_at, launches_at
    from .ptx import specs

    torch.set_num_threads(1)
    counted = bytes_at(spec["backend"], spec["length"])
    launches = [x for phase in counted["launches"].values() for x in phase]
    return {**counted, "by_length": launches_at(spec["backend"]), "specs": specs(launches)}


def ptx(spec: dict) -> dict:
    """Each specialization compiled for sm_90 (TRITON_INTERPRET unset) and inspected."""
    import tempfile

    import triton

    from .ptx import compile_specs

    with tempfile.TemporaryDirectory(prefix="weirdnet-scan-ptx-") as cache:
        triton.knobs.cache.dir = cache  # an empty cache: every kernel compiles here
        rows = compile_specs(spec["specs"], spec.get("arch", 90))
    return {"arch": spec.get("arch", 90), "triton": triton.__version__, "kernels": rows}
