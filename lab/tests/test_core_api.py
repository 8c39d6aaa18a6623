"""The lab is built on the library's public API only: every module of ``weirdnet`` it
imports is one the API reference lists (a ``::: weirdnet...`` line of docs/api/*.md), and
no name it imports or reads from one is private (``_x``).  Read from the source, no
imports run; lab/src, lab/benchmarks and lab/tests are checked, except the kernel
scripts of :data:`KERNEL_TOOLS`."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
API_PAGES = REPO / "docs" / "api"
KERNEL_TOOLS = {"scan_kernel_ab.py", "scan_kernel_variants.py", "scan_tile_paths.py"}
"""Scripts that time one kernel's build or tuning knobs against another revision's, or
measure its tiles' paths: they load the kernel modules' internals (the C build, the
Triton constants, the tile specification) by design."""
LAB_FILES = sorted(p for folder in ("src", "benchmarks", "tests")
                   for p in (REPO / "lab" / folder).rglob("*.py")
                   if not (folder == "benchmarks" and p.name in KERNEL_TOOLS))


def documented_modules() -> set[str]:
    """The modules the API reference documents: each ``::: NAME`` that is a module (an
    object's line, such as ``::: weirdnet.ops.weird_scan.weird_scan``, lists its module)."""
    found = set()
    for page in API_PAGES.glob("*.md"):
        for name in re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M):
            while name and not _is_module(name):
                name = name.rpartition(".")[0]
            found.add(name)
    return found


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent that is not a package
        return False


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def core_uses(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) for every use of the core in ``path``: each imported module
    (name None) and each name imported from one or read from it as an attribute."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses, bound = [], {}  # bound: local name -> the core module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "weirdnet":
                    uses.append((node.lineno, alias.name, None))
                    bound[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] == "weirdnet":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if _is_module(sub):
                    uses.append((node.lineno, sub, None))
                    bound[alias.asname or alias.name] = sub
                else:
                    uses.append((node.lineno, node.module, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in bound:
            uses.append((node.lineno, bound[node.value.id], node.attr))
    return uses


def test_the_api_reference_lists_modules():
    modules = documented_modules()
    assert {"weirdnet", "weirdnet.utils", "weirdnet.models", "weirdnet.train.trainer"} <= modules


@pytest.mark.parametrize("path", LAB_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_lab_uses_only_the_public_api(path):
    modules = documented_modules()
    bad = [f"line {line}: {module}" + (f".{name}" if name else "")
           for line, module, name in core_uses(path)
           if module not in modules or (name is not None and _private(name))]
    assert not bad, (f"{path.relative_to(REPO)} uses what the API reference (docs/api) does "
                     f"not list, or a private name: {bad}")


def test_the_checker_catches_a_private_name_and_an_unlisted_module(tmp_path):
    """The rules above, on a file that breaks each."""
    bad = tmp_path / "bad.py"
    bad.write_text("from weirdnet.utils import _secret\nimport weirdnet.typed_config\n"
                   "from weirdnet.models import backbone\nbackbone._extend\n")
    uses = core_uses(bad)
    modules = documented_modules()
    assert (1, "weirdnet.utils", "_secret") in uses and _private("_secret")
    assert (2, "weirdnet.typed_config", None) in uses
    assert "weirdnet.typed_config" not in modules
    assert (4, "weirdnet.models.backbone", "_extend") in uses
