"""Shared fixtures: the scan backends under test and small helpers."""

import os

import pytest
import torch

from weirdnet.ops.weird_scan import cpu as _cpu_kernel

# CI sets WEIRDNET_REQUIRE_CPU_KERNEL=1 so a kernel that fails to build is a failure,
# not a skip; elsewhere a machine without a C compiler skips the "cpu" backend.
REQUIRE_KERNEL = os.environ.get("WEIRDNET_REQUIRE_CPU_KERNEL") == "1"


def backend_params():
    return [
        pytest.param("cpu", id="cpu-kernel"),
        pytest.param("torch", id="torch"),
    ]


@pytest.fixture(params=backend_params())
def backend(request):
    if request.param == "cpu" and not _cpu_kernel.available():
        if REQUIRE_KERNEL:
            pytest.fail("the C scan kernel could not be built")
        pytest.skip("no C compiler: the fused CPU kernel is unavailable")
    return request.param


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere gives inf (never passes)."""
    out, ref = out.double(), ref.double()
    if torch.isnan(out).any() or torch.isnan(ref).any():
        return float("inf")
    denom = ref.norm().item()
    diff = (out - ref).norm().item()
    return diff if denom == 0 else diff / denom


def random_log_w(levels: int, dim: int, mode: str = "cumexp", dtype=torch.float64,
                 generator=None) -> torch.Tensor:
    """log W as each weight mode passes it: cumsum(w), w, or zeros; w ~ N(0, 1)."""
    w = torch.randn(levels, dim, dtype=dtype, generator=generator)
    if mode == "cumexp":
        return w.cumsum(0)
    if mode == "exp":
        return w
    return torch.zeros_like(w)


@pytest.fixture(scope="module")
def one_thread():
    """For modules of small-tensor tests (``pytestmark = pytest.mark.usefixtures(
    "one_thread")``): with one thread, a machine busy with other work does not make every
    small op wait for a second OpenMP thread to be scheduled."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def random_padding_mask(B: int, L: int, g: torch.Generator) -> torch.Tensor:
    """(B, L) bool, ~25% padding at random; row 0 fully real, the last row fully padded
    (B >= 3)."""
    mask = torch.rand(B, L, generator=g) > 0.25
    mask[0] = True
    mask[-1] = False
    return mask
