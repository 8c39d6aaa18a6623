"""A record's ``dirty`` flag names changes to the code, not the lab's own outputs."""

import shutil
import subprocess

import pytest

from weirdnet_lab.harness.machine import RESULTS_FOLDER, git_commit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(where, *args):
    subprocess.run(["git", *args], cwd=where, check=True, capture_output=True)


def test_dirty_counts_code_changes_but_not_the_results_folder(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / RESULTS_FOLDER).mkdir(parents=True)
    (tmp_path / "src" / "code.py").write_text("x = 1\n")
    (tmp_path / RESULTS_FOLDER / "report.md").write_text("# report\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = git_commit(tmp_path / "src")  # from a subfolder too
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (tmp_path / RESULTS_FOLDER / "report.md").write_text("# rebuilt\n")
    (tmp_path / RESULTS_FOLDER / "new.json").write_text("{}\n")
    assert git_commit(tmp_path)["dirty"] is False
    (tmp_path / "src" / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path / "src")["dirty"] is True


def test_outside_git_it_says_none(tmp_path):
    assert git_commit(tmp_path) == {"commit": None, "dirty": None}
