"""Shared fixtures: the scan backends under test, one thread.  Helper functions live in
the ``helpers`` package next to this file."""

import os

import pytest
import torch

from weirdnet.ops.weird_scan import cpu as _cpu_kernel
from weirdnet.run.files import current_umask

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


# ---------------------------------------------------------------------------------------
# Test isolation: a test that changes process-wide state and does not put it back makes
# later tests fail or pass by order (7 compile tests once failed only after another file
# had patched torch's compile config).  Every test's setting of these is compared after
# it ends; a change is put back and reported as that test's error.
# ---------------------------------------------------------------------------------------

_ENV_PREFIXES = ("WEIRDNET_", "OMP_", "MKL_", "TORCH", "PYTORCH_", "CUDA_", "CUBLAS_",
                 "TRITON_INTERPRET")
_ENV_SET_BY_TORCH = {"TORCHINDUCTOR_CACHE_DIR"}  # inductor's first compile sets it
_CONFIG_MODULES = ("torch._dynamo.config", "torch._inductor.config", "torch.compiler.config",
                   "torch._functorch.config")


def _config_values() -> dict[str, dict]:
    """The values of torch's compile configs that are imported (name -> copy)."""
    import sys

    return {name: sys.modules[name].get_config_copy() for name in _CONFIG_MODULES
            if name in sys.modules}


def global_state() -> dict[str, object]:
    """The process-wide settings a test must leave as it found them."""
    import signal

    return {
        "torch threads": torch.get_num_threads(),
        "default dtype": torch.get_default_dtype(),
        "grad mode": torch.is_grad_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "anomaly detection": torch.is_anomaly_enabled(),
        "SIGINT handler": signal.getsignal(signal.SIGINT),
        "SIGTERM handler": signal.getsignal(signal.SIGTERM),
        "working directory": os.getcwd(),
        "umask": current_umask(),
        "environment": {k: v for k, v in os.environ.items()
                        if k.startswith(_ENV_PREFIXES) and k not in _ENV_SET_BY_TORCH},
    }


def state_changes(before: dict, after: dict, configs_before: dict, configs_after: dict
                  ) -> list[str]:
    """What differs, one phrase each (config keys by name)."""
    changed = [f"{key}: {before[key]!r} -> {after[key]!r}" for key in before
               if before[key] != after[key]]
    for name, values in configs_before.items():
        now = configs_after.get(name, values)
        changed += [f"{name}.{key}: {values[key]!r} -> {now.get(key)!r}" for key in values
                    if values[key] != now.get(key)]
    return changed


def restore_state(before: dict, configs_before: dict) -> None:
    """Put back what :func:`state_changes` found changed (so one leak fails one test)."""
    import signal
    import sys

    torch.set_num_threads(before["torch threads"])
    torch.set_default_dtype(before["default dtype"])
    torch.set_grad_enabled(before["grad mode"])
    torch.use_deterministic_algorithms(before["deterministic algorithms"])
    torch.autograd.set_detect_anomaly(before["anomaly detection"])
    signal.signal(signal.SIGINT, before["SIGINT handler"])
    signal.signal(signal.SIGTERM, before["SIGTERM handler"])
    os.chdir(before["working directory"])
    os.umask(before["umask"])
    for key in [k for k in os.environ
                if k.startswith(_ENV_PREFIXES) and k not in _ENV_SET_BY_TORCH]:
        del os.environ[key]
    os.environ.update(before["environment"])
    for name, values in configs_before.items():
        module = sys.modules[name]
        for key, value in values.items():
            if module.get_config_copy().get(key) != value:
                setattr(module, key, value)


@pytest.fixture(autouse=True)
def isolated():
    """Fail a test that leaves torch settings, compile configs, signal handlers, the
    working directory, the umask or the environment changed (see :func:`global_state`)."""
    before, configs_before = global_state(), _config_values()
    yield
    changed = state_changes(before, global_state(), configs_before, _config_values())
    if changed:
        restore_state(before, configs_before)
        pytest.fail("the test changed process-wide state and left it changed (use "
                    "monkeypatch or a context manager): " + "; ".join(changed[:5]),
                    pytrace=False)


@pytest.fixture(scope="module")
def one_thread():
    """For modules of small-tensor tests (``pytestmark = pytest.mark.usefixtures(
    "one_thread")``): with one thread, a machine busy with other work does not make every
    small op wait for a second OpenMP thread to be scheduled."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
