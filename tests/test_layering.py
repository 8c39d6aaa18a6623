"""The package's layering, read from the source (no imports run): the core (ops, layers,
models, data, train, hf) never imports the lab (weirdnet_lab), and the model layer
reaches a mixer only through the mixer contract, never by naming one."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "weirdnet"
CORE = ("config", "run", "ops", "layers", "models", "data", "train", "hf", "cli")
LAB = "weirdnet_lab"  # lab/src/weirdnet_lab: the weirdnet-lab distribution


def module_name(path: Path) -> str:
    """weirdnet.a.b for src/weirdnet/a/b.py (and weirdnet.a for a/__init__.py)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (function-local imports included),
    with relative imports resolved to absolute names."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                stem = f"{base}.{node.module}" if node.module else base
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    return found


def core_files() -> list[Path]:
    """Every file of the weirdnet package (the lab is not in it)."""
    return sorted(PACKAGE.rglob("*.py"))


def test_the_core_exists_as_listed():
    assert all((PACKAGE / name / "__init__.py").is_file() for name in CORE)
    assert not (PACKAGE / "lab").exists(), "the lab is its own distribution (lab/)"
    assert len(core_files()) > 50


@pytest.mark.parametrize("path", core_files(), ids=lambda p: module_name(p))
def test_the_core_never_imports_the_lab(path):
    bad = sorted(m for m in imported_modules(path) if m.split(".")[0] == LAB)
    assert not bad, f"{module_name(path)} imports the lab: {bad}"


def test_relative_imports_resolve_as_python_does():
    """The resolver above, on this package's own shapes."""
    blocks = PACKAGE / "models" / "blocks.py"
    assert "weirdnet.layers.registry" in imported_modules(blocks)
    init = PACKAGE / "ops" / "weird_scan" / "__init__.py"
    assert "weirdnet.ops.weird_scan.op" in imported_modules(init)
    cache = PACKAGE / "ops" / "weird_scan" / "cache.py"
    assert "weirdnet.ops.checks" in imported_modules(cache)


CONTRACT = ("registry", "base", "ownership")
"""The modules of ``weirdnet.layers`` the model layer may import: the registry (mixers and
cross mixers by name), the mixer contract and the caches' ownership."""


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").rglob("*.py")),
                         ids=lambda p: module_name(p))
def test_models_reach_mixers_only_through_the_contract(path):
    """Every file of ``models/`` builds its mixers and cross mixers by name from the
    registry and asks a mixer for a capability (``Mixer.scan_step``), never naming a
    mixer module or class."""
    mixers = {m for m in imported_modules(path) if m.startswith("weirdnet.layers")
              and (m == "weirdnet.layers" or m.split(".")[2] not in CONTRACT)}
    assert not mixers, f"{module_name(path)} names a mixer: {sorted(mixers)}"
