"""The C kernel's build cache, and the fallback when no compiler works."""

import os
import subprocess
import sys
import textwrap

from weirdnet.ops import scan_backend_name
from weirdnet.ops.weird_scan import cpu as _cpu_kernel


def test_backend_choice_on_cpu(monkeypatch):
    """Without an override, CPU tensors take the C kernel when it builds (CI requires it:
    WEIRDNET_REQUIRE_CPU_KERNEL=1), and the PyTorch backend only when it cannot."""
    monkeypatch.delenv("WEIRDNET_SCAN_BACKEND", raising=False)
    if os.environ.get("WEIRDNET_REQUIRE_CPU_KERNEL") == "1":
        assert scan_backend_name("cpu") == "cpu"
    else:
        assert scan_backend_name("cpu") in ("cpu", "torch")
        assert (scan_backend_name("cpu") == "cpu") == (_cpu_kernel.load() is not None)


def test_env_override_forces_torch(monkeypatch):
    monkeypatch.setenv("WEIRDNET_SCAN_BACKEND", "torch")
    assert scan_backend_name("cpu") == "torch"


def test_broken_compiler_falls_back_with_one_warning(tmp_path):
    script = textwrap.dedent("""
        import warnings, torch
        from weirdnet.ops import weird_scan, weird_scan_reference, scan_backend_name
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a, v = torch.randn(2, 9, 3), torch.randn(2, 9, 3)
            out = weird_scan(a, v, torch.zeros(4, 3))
            weird_scan(a, v, torch.zeros(4, 3))
        ref = weird_scan_reference(a, v, torch.zeros(4, 3))
        assert torch.allclose(out.double(), ref, atol=1e-6)
        assert scan_backend_name("cpu") == "torch"
        msgs = [str(w.message) for w in caught if "pure-PyTorch" in str(w.message)]
        assert len(msgs) == 1, msgs
        print("fallback ok")
    """)
    env = dict(os.environ, CC="false", PATH="/nonexistent", WEIRDNET_CACHE_DIR=str(tmp_path))
    env.pop("WEIRDNET_SCAN_BACKEND", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fallback ok" in done.stdout
    assert not list(tmp_path.rglob("*.so"))
