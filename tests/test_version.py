"""One version: the one pyproject.toml builds, ``weirdnet.__version__``, and an entry of
CHANGELOG.md for it; the lab (lab/pyproject.toml) has the same version and requires a
range of weirdnet that holds it."""

import re
import tomllib
from pathlib import Path

import weirdnet

ROOT = Path(__file__).resolve().parents[1]


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))["project"]


def test_pyproject_and_the_package_agree():
    assert _project(ROOT / "pyproject.toml")["version"] == weirdnet.__version__


def test_the_changelog_has_an_entry_for_the_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
                          re.M)
    assert headings and headings[0] == weirdnet.__version__, headings[:3]


def test_the_lab_requires_a_range_that_holds_this_weirdnet():
    lab = _project(ROOT / "lab" / "pyproject.toml")
    assert lab["version"] == weirdnet.__version__
    (pin,) = [d for d in lab["dependencies"] if re.match(r"weirdnet\b(?!-)", d)]
    low, high = re.fullmatch(r"weirdnet>=([\d.]+),<([\d.]+)", pin).groups()
    version = tuple(map(int, weirdnet.__version__.split(".")))
    assert tuple(map(int, low.split("."))) <= version < tuple(map(int, high.split(".")))


def test_both_packages_are_typed():
    assert (ROOT / "src" / "weirdnet" / "py.typed").is_file()
    assert (ROOT / "lab" / "src" / "weirdnet_lab" / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in package_data["package-data"]["weirdnet"]
