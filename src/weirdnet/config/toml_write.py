"""Write nested config tables (dicts of TOML values) as TOML text, which ``tomllib`` reads
back to the same dicts.  No heavy imports: ``weirdnet configs show`` prints with it.

Tables become ``[a.b]`` sections (after the table's own values); a table inside an array
is written inline.  TOML has no null: a key whose value is None is left out, so it reads
back as the field's default.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dumps(table: dict[str, Any], header: str = "") -> str:
    """``table`` as a TOML document; ``header`` (lines) opens it as ``#`` comments."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _table(table, (), lines)
    return "\n".join(lines).strip("\n") + "\n"


def _table(table: dict[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    """Append ``table``'s values under the header of ``path``, then its sub-tables."""
    values = {k: v for k, v in table.items() if v is not None and not _is_section(v)}
    sections = {k: v for k, v in table.items() if _is_section(v)}
    if path and (values or not sections):
        lines += ["", f"[{'.'.join(map(_key, path))}]"]
    lines += [f"{_key(key)} = {_value(value)}" for key, value in values.items()]
    for key, value in sections.items():
        _table(value, (*path, key), lines)


def _is_section(value: Any) -> bool:
    """A non-empty table is a section of its own; an empty one is written ``{}``."""
    return isinstance(value, dict) and bool(value)


def _key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    """One TOML value (bool before int: a bool is an int in Python)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):  # JSON's escapes are TOML's, but for DEL
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + ", ".join(items) + " }" if value else "{}"
    raise TypeError(f"{type(value).__name__} {value!r} has no TOML form")
