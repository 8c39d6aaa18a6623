"""The wheel a user installs: every C source of every op ships, and an installed wheel (a
fresh virtual environment, run outside the repository) passes .ci/wheel_smoke.py: both C
kernels build and are used, a config is found by name, the main job runs (issue 35, item
3: the wheel lacked ``ops/block_step/csrc`` and decoding fell back without a word)."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPS = ROOT / "src" / "weirdnet" / "ops"
# Build outputs and caches: never part of a source tree a wheel is built from.
_SKIP = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", "runs",
                               ".pytest_cache", ".ruff_cache", "*.so", ".lock")

# The venv and the smoke test .ci/run runs on its wheel too: one script, two callers.
CHECK = ROOT / ".ci" / "wheel_check.py"


def csrc_files() -> list[str]:
    """Every file of every ``csrc`` folder under src/weirdnet/ops, as wheel paths."""
    found = [p for p in OPS.glob("*/csrc/*") if p.is_file()]
    assert found, f"no csrc files under {OPS}"
    return sorted(p.relative_to(ROOT / "src").as_posix() for p in found)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a clean copy of the working tree (a stale ``build/`` folder could
    hold files the package data no longer ships)."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"
    shutil.copytree(ROOT, tree, symlinks=True, ignore=_SKIP)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", str(tree), "-w", str(root / "dist")],
                          capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = (root / "dist").glob("weirdnet-*.whl")
    return built


def test_wheel_ships_every_c_source(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = [name for name in csrc_files() if name not in names]
    assert not missing, f"{wheel.name} lacks {missing}"


@pytest.mark.slow
def test_installed_wheel_passes_the_smoke_test(wheel, tmp_path):
    """.ci/wheel_check.py, as .ci/run calls it: pip install the wheel into a fresh venv
    that sees this interpreter's own site-packages (torch from wherever it is installed:
    a venv, a conda environment or the system Python; issue 66) and, from outside the
    repository with an empty kernel cache, run .ci/wheel_smoke.py: the C kernels build
    and are used, a config is found by name, the main job runs 3 steps."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, str(CHECK), str(wheel), str(tmp_path)],
                          capture_output=True, text=True, timeout=1500, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "the main job trained 3 steps" in done.stdout
    for kernel in ("weird_scan", "block_step", "short_conv"):
        assert list((tmp_path / "cache" / "kernels").glob(f"{kernel}_*.so")), kernel
