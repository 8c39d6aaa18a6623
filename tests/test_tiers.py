"""The two test tiers (conftest.py at the root, issue 74), on a small project of their
own: the default run leaves the slow tests out and says how many; ``--slow`` runs both
tiers; ``-m slow`` the slow tier alone; a slow test named by its id runs; under
``--dist loadgroup`` the tests of a module fixture share a worker.  And .ci/tiers.py's
guard against the record when the slow tier runs without coverage."""

from __future__ import annotations

import importlib.util
import json
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


_GROUPED = '''
import pytest


@pytest.fixture(scope="module")
def built():
    return 1


def test_uses_the_module_fixture(built):
    pass


def test_on_its_own():
    pass
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiers")
    (folder / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: the slow tier\n")
    (folder / "test_tiers_demo.py").write_text(_TESTS)
    (folder / "test_tiers_grouped.py").write_text(_GROUPED)
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
    passed, out = _passed(project, "test_tiers_demo.py")
    assert passed == ["test_fast", "test_sizes[1]"]
    assert "fast tier: 2 slow tests not run" in out and "2 deselected" in out


def test_slow_runs_both_tiers(project):
    assert _passed(project, "--slow", "test_tiers_demo.py")[0] == [
        "test_fast", "test_sizes[1]", "test_sizes[2]", "test_slow"]


def test_a_marker_expression_selects_as_written(project):
    assert _passed(project, "-m", "slow", "test_tiers_demo.py")[0] == ["test_sizes[2]",
                                                                     "test_slow"]


def test_a_slow_test_named_by_its_id_runs(project):
    assert _passed(project, "test_tiers_demo.py::test_slow")[0] == ["test_slow"]
    assert _passed(project, "test_tiers_demo.py::test_sizes")[0] == ["test_sizes[1]",
                                                                     "test_sizes[2]"]


def test_a_module_fixtures_tests_share_one_xdist_worker(project):
    """conftest.py marks the tests that use a module-scoped fixture of their own module
    with one xdist group (their node ids end in @module); the others go alone."""
    pytest.importorskip("xdist")
    passed, _ = _passed(project, "-n", "2", "--dist", "loadgroup", "test_tiers_grouped.py")
    assert passed == ["test_on_its_own",
                      "test_uses_the_module_fixture@test_tiers_grouped.py"]


def _tiers_script():
    spec = importlib.util.spec_from_file_location("ci_tiers", ROOT / ".ci" / "tiers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guard_against_the_record_reads_its_both_tier_lines(tmp_path, monkeypatch):
    tiers = _tiers_script()
    record = tmp_path / "test_tiers.json"
    monkeypatch.setattr(tiers, "RECORD", record)
    monkeypatch.setattr(tiers, "ROOT", tmp_path)
    record.write_text(json.dumps({"coverage": {"fast_lines": 9}, "machine": {"commit": "c"}}))
    assert tiers.recorded_both_lines() is None  # the slow tier then runs covered
    record.write_text(json.dumps({"coverage": {"both_lines": 1000},
                                  "machine": {"commit": "abc"}}))
    figures = {"statements": 2000, "fast_lines": 905, "fast_percent": 45.2}
    guarded = tiers.against_record(figures, tiers.recorded_both_lines())
    assert guarded["both_lines"] == 1000 and guarded["fast_share_of_both"] == 0.905
    # more lines now than both tiers covered then: the share is capped at 1, not above
    assert tiers.against_record({**figures, "fast_lines": 1200},
                                (1000, "abc"))["fast_share_of_both"] == 1.0
