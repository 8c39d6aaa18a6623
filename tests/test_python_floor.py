"""The Python floor: pyproject says >= 3.11 (train/config.py reads TOML with tomllib), and
ruff's target version is that floor, so newer syntax fails the lint.  This test keeps
the three in step and checks the running interpreter meets the floor."""

import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_floor_is_declared_once_and_met():
    project = tomllib.loads(PYPROJECT.read_text())
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["tool"]["ruff"]["target-version"] == "py311"
    assert sys.version_info >= (3, 11)
