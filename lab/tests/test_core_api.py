"""The lab is built on the library's public API only: every module of ``weirdnet`` it
imports is one of the public modules (the list in docs/api/index.md, the one place that
names them: :func:`public_modules`), and no name it imports or reads from one is private
(``_x``).  Read from the source, no imports run; lab/src, lab/benchmarks and lab/tests are
checked, except the kernel scripts of :data:`KERNEL_TOOLS` and the uses of
:data:`NOT_YET_PUBLIC`."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
API_PAGES = REPO / "docs" / "api"
KERNEL_TOOLS = {"scan_kernel_ab.py", "scan_kernel_variants.py", "scan_tile_paths.py",
                "scan_e2_backward_paths.py"}
"""Scripts that time one kernel's build or tuning knobs against another revision's, or
measure its tiles' or programs' paths: they load the kernel modules' internals (the C
build, the Triton constants, the tile specification, the backward's path plan) by
design."""
LAB_FILES = sorted(p for folder in ("src", "benchmarks", "tests")
                   for p in (REPO / "lab" / folder).rglob("*.py")
                   if not (folder == "benchmarks" and p.name in KERNEL_TOOLS))


NOT_YET_PUBLIC = {
    "weirdnet.data.lra.listops": "suite/shortcuts.py: ListOps' operators and vocabulary",
    "weirdnet.data.sources.packages": "a lab test: the corpora's source packages",
    "weirdnet.data.text.corpora": "a lab test: corpus_bytes",
    "weirdnet.data.text.lm": "a lab test: ByteLMDataset",
    "weirdnet.models.decoding.graph_decode": "bench decode: CUDA-graph decoding (its own package "
                                    "under issue 75 section 1)",
    "weirdnet.ops.weird_scan": "bench gpu: the scan's kernels by backend",
    "weirdnet.ops.short_conv": "lab/benchmarks/short_conv_ab.py: the fused C kernel",
}
"""Modules the lab still reaches beyond the public list, and where: the list may only
shrink (:func:`test_what_is_not_yet_public_is_still_used` fails on an entry no longer
used)."""


def public_modules() -> list[str]:
    """The public modules: the lines of the ``text`` block under "The public modules" in
    docs/api/index.md."""
    page = (API_PAGES / "index.md").read_text(encoding="utf-8")
    block = re.search(r"^## The public modules\n.*?^```text\n(.*?)^```", page, re.M | re.S)
    assert block, "docs/api/index.md lost its list of the public modules"
    return block.group(1).split()


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
    assert {"weirdnet", "weirdnet.run", "weirdnet.models", "weirdnet.train.trainer"} <= modules


@pytest.mark.parametrize("path", LAB_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_lab_uses_only_the_public_api(path):
    modules = set(public_modules()) | set(NOT_YET_PUBLIC)
    bad = [f"line {line}: {module}" + (f".{name}" if name else "")
           for line, module, name in core_uses(path)
           if module not in modules or (name is not None and _private(name))]
    assert not bad, (f"{path.relative_to(REPO)} uses what is not in the list of public "
                     f"modules (docs/api/index.md), or a private name: {bad}")


def test_the_public_modules_are_about_a_dozen_and_each_is_documented():
    public = public_modules()
    assert 8 <= len(public) <= 13 and len(set(public)) == len(public), public
    assert all(_is_module(name) for name in public), public
    assert set(public) <= documented_modules()


def test_what_is_not_yet_public_is_still_used():
    used = {module for path in LAB_FILES for _, module, _ in core_uses(path)}
    assert not set(NOT_YET_PUBLIC) - used, "remove these from NOT_YET_PUBLIC: " + \
        ", ".join(sorted(set(NOT_YET_PUBLIC) - used))
    assert not set(NOT_YET_PUBLIC) & set(public_modules())


def test_the_checker_catches_a_private_name_and_an_unlisted_module(tmp_path):
    """The rules above, on a file that breaks each."""
    bad = tmp_path / "bad.py"
    bad.write_text("from weirdnet.run import _secret\nimport weirdnet.config.typed\n"
                   "from weirdnet.models import backbone\nbackbone._extend\n")
    uses = core_uses(bad)
    modules = public_modules()
    assert (1, "weirdnet.run", "_secret") in uses and _private("_secret")
    assert (2, "weirdnet.config.typed", None) in uses
    assert "weirdnet.config.typed" not in modules
    assert (4, "weirdnet.models.backbone", "_extend") in uses
