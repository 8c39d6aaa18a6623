"""The package's root and its ground floor, read from the source (no imports run): the
root holds only ``__init__.py``, ``__main__.py``, ``py.typed``, the shipped configs and
packages (issue 75), and the two packages every other one may use, ``weirdnet.config``
and ``weirdnet.run``, import no package of weirdnet above them."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "weirdnet"
ROOT_FILES = {"__init__.py", "__main__.py", "py.typed"}
ROOT_DATA = {"configs"}  # the shipped configs (a link to the repository's configs/)
GROUND = {"config": set(), "run": {"config"}}
"""Each ground-floor package and the packages of weirdnet it may import besides itself."""


def test_the_root_holds_only_its_entry_points_and_packages():
    strays = sorted(entry.name for entry in PACKAGE.iterdir()
                    if entry.name not in ROOT_FILES | ROOT_DATA | {"__pycache__"}
                    and not (entry.is_dir() and (entry / "__init__.py").is_file()))
    assert not strays, f"src/weirdnet/ holds more than packages: {strays}"


def weirdnet_packages(path: Path) -> set[str]:
    """The packages of weirdnet (``weirdnet.X``: X) that ``path`` imports by absolute
    name, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] if "." in node.module else \
                [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name.split(".")[1] for name in names
                  if name.startswith("weirdnet.") and name.count(".") >= 1}
    return found


@pytest.mark.parametrize("package", sorted(GROUND))
def test_the_ground_floor_imports_nothing_above_it(package):
    allowed = {package} | GROUND[package]
    bad = {str(path.relative_to(PACKAGE)): sorted(weirdnet_packages(path) - allowed)
           for path in sorted((PACKAGE / package).rglob("*.py"))}
    assert not {name: found for name, found in bad.items() if found}, bad


def test_the_import_reader_sees_each_form(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("import weirdnet.models.lm\nfrom weirdnet.train import setup\n"
                      "from weirdnet import ops\nfrom . import files\n")
    assert weirdnet_packages(source) == {"models", "train", "ops"}
