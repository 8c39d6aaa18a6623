"""Nested config tables (TOML-like dicts), with no heavy imports: the command line's
parser reads them before torch is loaded."""

from __future__ import annotations

import copy
from typing import Any


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``update`` merged in (tables merge, values replace)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
