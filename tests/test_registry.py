"""The registry mechanism (weirdnet.config.registry) and the models plugins add to it."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from weirdnet.config import plugins
from weirdnet.config.registry import Registry


def _module_that_registers(tmp_path, monkeypatch, table: Registry, name: str) -> str:
    """A new importable module whose import registers ``name`` in ``table``."""
    module = f"_registry_test_{name}"
    (tmp_path / f"{module}.py").write_text(
        f"from {__name__} import TABLES\n"
        f"TABLES[{table.kind!r}].register({name!r})(type({name!r}, (), {{}}))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return module


TABLES: dict[str, Registry] = {}


def test_more_modules_are_asked_for_once_on_the_first_lookup(tmp_path, monkeypatch):
    calls = []

    def more():
        calls.append(1)
        return (module,)

    table = TABLES["thing"] = Registry("thing", more_modules=more)
    module = _module_that_registers(tmp_path, monkeypatch, table, "plugged")
    assert calls == []  # nothing is imported before a lookup
    assert table.names() == ["plugged"] and "plugged" in table
    assert table.get("plugged").__name__ == "plugged"
    assert calls == [1]


def test_an_unknown_name_names_the_closest_one():
    table = Registry("gadget", error=KeyError)
    table.register("weird")(object)
    with pytest.raises(KeyError, match="did you mean 'weird'"):
        table.get("wierd")


def test_the_lab_adds_its_peer_model_through_the_plugin_group():
    """With the lab installed, ``MODELS`` holds its peer (the lab's MODEL_MODULES)."""
    names = {point.name for point in importlib.metadata.entry_points(
        group=plugins.PLUGIN_GROUP)}
    if "bench" not in names:
        pytest.skip("the lab (weirdnet-lab) is not installed: pip install -e ./lab")
    from weirdnet.cli import PLUGIN_GROUP
    from weirdnet.models.base import MODELS, plugin_model_modules

    assert PLUGIN_GROUP == plugins.PLUGIN_GROUP
    assert plugin_model_modules() and "PeerLM" in MODELS.names()
