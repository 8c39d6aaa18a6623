"""The two test tiers (conftest.py at the root, issue 74), on a small project of their
own: the default run leaves the slow tests out and says how many; ``--slow`` runs both
tiers; ``-m slow`` the slow tier alone; a slow test named by its id runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_TESTS = '''
import pytest


def test_fast():
    pass


@pytest.mark.slow
def test_slow():
    pass


@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_sizes(n):
    pass
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiers")
    (folder / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: the slow tier\n")
    (folder / "test_tiers_demo.py").write_text(_TESTS)
    return folder


def _passed(project: Path, *args: str) -> tuple[list[str], str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p",
                           "no:cacheprovider", *args], cwd=project, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    passed = sorted(line.split("::", 1)[1] for line in done.stdout.splitlines()
                    if line.startswith("PASSED "))
    return passed, done.stdout


def test_the_default_run_is_the_fast_tier_and_says_what_it_left(project):
    passed, out = _passed(project)
    assert passed == ["test_fast", "test_sizes[1]"]
    assert "fast tier: 2 slow tests not run" in out and "2 deselected" in out


def test_slow_runs_both_tiers(project):
    assert _passed(project, "--slow")[0] == ["test_fast", "test_sizes[1]", "test_sizes[2]",
                                             "test_slow"]


def test_a_marker_expression_selects_as_written(project):
    assert _passed(project, "-m", "slow")[0] == ["test_sizes[2]", "test_slow"]


def test_a_slow_test_named_by_its_id_runs(project):
    assert _passed(project, "test_tiers_demo.py::test_slow")[0] == ["test_slow"]
    assert _passed(project, "test_tiers_demo.py::test_sizes")[0] == ["test_sizes[1]",
                                                                     "test_sizes[2]"]
