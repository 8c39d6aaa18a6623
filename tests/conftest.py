"""Shared fixtures: the scan backends under test, one thread.  Helper functions live in
the ``helpers`` package next to this file."""

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








@pytest.fixture(scope="module")
def one_thread():
    """For modules of small-tensor tests (``pytestmark = pytest.mark.usefixtures(
    "one_thread")``): with one thread, a machine busy with other work does not make every
    small op wait for a second OpenMP thread to be scheduled."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
