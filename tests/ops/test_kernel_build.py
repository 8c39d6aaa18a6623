"""The C kernel's build cache, and the fallback when no compiler works."""

import os
import subprocess
import sys
import textwrap

import pytest

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
    env.pop("WEIRDNET_REQUIRE_CPU_KERNEL", None)  # here the fallback is the point
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fallback ok" in done.stdout
    assert not list(tmp_path.rglob("*.so"))


# ---- a kernel that should exist but cannot be built: one line per kernel, never silent --

_DECODE = textwrap.dedent("""
    import torch
    from weirdnet.models import WeirdNetLM
    torch.manual_seed(0)
    lm = WeirdNetLM({"backbone": {"dim": 16, "depth": 2, "heads": 2, "max_len": 32,
                                  "pattern": "weird", "causal": True}}).eval()
    with torch.no_grad():
        for _ in range(2):
            lm.generate(torch.randint(0, 256, (1, 5)), max_new_tokens=4)
    print("decoded")
""")


def _run(script: str, tmp_path, **env_overrides) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter with an empty kernel cache and warnings shown as
    a user sees them (no -W options, no REQUIRE unless given)."""
    env = dict(os.environ, WEIRDNET_CACHE_DIR=str(tmp_path / "cache"), **env_overrides)
    for name in ("WEIRDNET_SCAN_BACKEND", "PYTHONWARNINGS"):
        env.pop(name, None)
    if "WEIRDNET_REQUIRE_CPU_KERNEL" not in env_overrides:
        env.pop("WEIRDNET_REQUIRE_CPU_KERNEL", None)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)


def _kernel_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.slow  # a fresh process builds the scan kernel into an empty cache
def test_missing_block_step_sources_warn_once_in_one_line(tmp_path):
    """The wheel of issue 35 lacked ops/block_step/csrc: decoding fell back silently."""
    script = ("from pathlib import Path\nfrom weirdnet.ops.block_step import cpu\n"
              f"cpu.SOURCE = Path({str(tmp_path / 'gone' / 'block_step.c')!r})\n" + _DECODE)
    done = _run(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "decoded" in done.stdout
    lines = _kernel_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("weirdnet: the C kernel block_step is unavailable"), lines[0]
    assert "missing" in lines[0] and "reinstall" in lines[0], lines[0]
    assert "warnings.warn" not in done.stderr and "UserWarning" not in done.stderr


def test_no_compiler_warns_once_per_kernel(tmp_path):
    """Decoding needs the scan kernel first (the fused step runs on the C scan's cache);
    asking for the block step as well gives its own line, once."""
    script = _DECODE + "from weirdnet.ops import block_step\n" + \
        "assert block_step.unavailable_reason() and block_step.unavailable_reason()\n"
    done = _run(script, tmp_path, CC="false", PATH="/nonexistent")
    assert done.returncode == 0, done.stderr
    lines = _kernel_lines(done.stderr)
    assert len(lines) == 2, done.stderr
    for kernel, line in zip(("weird_scan", "block_step"), lines):
        assert line.startswith(f"weirdnet: the C kernel {kernel} is unavailable"), line
        assert "no C compiler" in line and "$CC" in line, line
        assert "WEIRDNET_REQUIRE_CPU_KERNEL=1" in line, line


@pytest.mark.slow  # a fresh process builds the scan kernel into an empty cache
def test_require_cpu_kernel_turns_the_fallback_into_an_error(tmp_path):
    script = ("from pathlib import Path\nfrom weirdnet.ops.block_step import cpu\n"
              f"cpu.SOURCE = Path({str(tmp_path / 'gone' / 'block_step.c')!r})\n" + _DECODE)
    done = _run(script, tmp_path, WEIRDNET_REQUIRE_CPU_KERNEL="1")
    assert done.returncode != 0
    assert "decoded" not in done.stdout
    assert "block_step" in done.stderr and "WEIRDNET_REQUIRE_CPU_KERNEL" in done.stderr
