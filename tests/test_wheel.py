"""The wheel a user installs: every C source of every op ships, and an installed wheel (a
fresh virtual environment, run outside the repository) passes .ci/wheel_smoke.py: both C
kernels build and are used, a config is found by name, the main job runs (issue 35, item
3: the wheel lacked ``ops/block_step/csrc`` and decoding fell back without a word).  The
weirdnet wheel holds no lab code and no results (issue 63): the lab is its own wheel
(lab/), installed on top in the same check, where it gives ``weirdnet bench``."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # pip builds two wheels from a copy of the tree

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
def tree(tmp_path_factory) -> Path:
    """A clean copy of the working tree (a stale ``build/`` folder could hold files the
    package data no longer ships)."""
    tree = tmp_path_factory.mktemp("wheel") / "tree"
    shutil.copytree(ROOT, tree, symlinks=True, ignore=_SKIP)
    return tree


def build_wheel(source: Path, name: str) -> Path:
    """The wheel of the project at ``source`` (its file name starts with ``name-``)."""
    dist = source.parent / f"dist-{name}"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", str(source), "-w", str(dist)],
                          capture_output=True, text=True, timeout=600, cwd=source.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = dist.glob(f"{name}-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(tree) -> Path:
    return build_wheel(tree, "weirdnet")


@pytest.fixture(scope="module")
def lab_wheel(tree) -> Path:
    return build_wheel(tree / "lab", "weirdnet_lab")


def test_wheel_ships_every_c_source(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = [name for name in csrc_files() if name not in names]
    assert not missing, f"{wheel.name} lacks {missing}"


def test_the_wheel_holds_no_lab_and_no_results(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    lab = [n for n in names if n.split("/")[0] == "weirdnet_lab" or "/lab/" in n
           or "results/" in n or n.endswith((".json", ".png")) and "configs/" not in n]
    assert not lab, lab[:10]
    assert "weirdnet/py.typed" in names


def test_the_lab_wheel_holds_the_lab_its_entry_point_and_pin(lab_wheel):
    with zipfile.ZipFile(lab_wheel) as archive:
        names = archive.namelist()
        (points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        entry_points = archive.read(points).decode()
        requires = archive.read(metadata).decode()
    assert {n.split("/")[0] for n in names} == {"weirdnet_lab",
                                                lab_wheel.name.split("-py3")[0] + ".dist-info"}
    assert "weirdnet_lab/py.typed" in names and "weirdnet_lab/commands.py" in names
    assert "[weirdnet.commands]" in entry_points and "bench = weirdnet_lab.commands" in \
        entry_points
    assert "Requires-Dist: weirdnet<0.3,>=0.2.0" in requires


@pytest.mark.slow
def test_installed_wheel_passes_the_smoke_test(wheel, lab_wheel, tmp_path):
    """.ci/wheel_check.py, as .ci/run calls it: pip install the wheel into a fresh venv
    that sees this interpreter's own site-packages (torch from wherever it is installed:
    a venv, a conda environment or the system Python; issue 66) and, from outside the
    repository with an empty kernel cache, run .ci/wheel_smoke.py: the C kernels build
    and are used, a config is found by name, the main job runs 3 steps, the run is
    evaluated, generates and is exported, and no lab module is imported; then the lab's
    wheel is installed on top and ``weirdnet bench --help`` works."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, str(CHECK), str(wheel), str(tmp_path),
                           str(lab_wheel)],
                          capture_output=True, text=True, timeout=1500, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "the main job trained 3 steps" in done.stdout
    assert "no lab module imported" in done.stdout
    assert "`weirdnet bench --help` lists the benchmarks" in done.stdout
    for kernel in ("weird_scan", "block_step", "short_conv"):
        assert list((tmp_path / "cache" / "kernels").glob(f"{kernel}_*.so")), kernel
