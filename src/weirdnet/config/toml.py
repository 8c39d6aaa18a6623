"""Config files in TOML: ``extends``, named overlays, and ``--set`` assignments.

A file may start from another (``extends = "base.toml"``, a path relative to it) and end
with named overlays: ``[overlay.cpu]`` (and its sub-tables) holds what the config
``<file>-cpu`` changes (:data:`OVERLAYS`).  ``--set section.key=value`` (dotted, any
depth) sets a key; the value is read as a TOML value and a bare word is a string
(:func:`parse_value`).  The tables are merged as :func:`weirdnet.config.tables.merge`
does; what the keys mean is the config's own (:mod:`weirdnet.train.config`).
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from weirdnet.config.tables import merge
from weirdnet.config.typed import ConfigError

__all__ = ["MAX_EXTENDS_DEPTH", "OVERLAYS", "apply_assignments", "overlay_names",
           "overlay_source", "parse_value", "read_toml"]

OVERLAYS = "overlay"
"""The table of a config file's named overlays.  ``[overlay.cpu]`` in ``lra/listops.toml``
holds what the config ``lra/listops-cpu`` changes (a CPU-sized run of the same experiment):
the path ``lra/listops-cpu.toml``, where no such file exists, is ``lra/listops.toml`` with
that table merged over it.  An overlay is not inherited through ``extends``."""
OVERLAY_NAME = re.compile(r"[a-z0-9]+")
MAX_EXTENDS_DEPTH = 32
"""The longest chain of ``extends`` a config may have (the shipped configs use at most 3);
a longer one is a :class:`ConfigError`, as is a chain that loops."""


def read_toml(path: str | os.PathLike, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The dict of config file ``path``, merged over the file its ``extends`` key names;
    ``X-NAME.toml`` that is not a file is ``X.toml`` with its ``[overlay.NAME]`` table
    merged over it (see :data:`OVERLAYS`)."""
    path = Path(path)
    if not path.is_file() and (found := overlay_source(path)) is not None:
        base, name = found
        data, overlays = _read_file(base, _seen)
        return merge(data, overlays[name])
    return _read_file(path, _seen)[0]


def overlay_source(path: str | os.PathLike) -> tuple[Path, str] | None:
    """``(X.toml, NAME)`` when ``path`` is ``X-NAME.toml`` and ``X.toml`` is a file with an
    ``[overlay.NAME]`` table (else None): the file and overlay that config ``path`` names.
    A file ``X.toml`` that is not valid TOML is a :class:`ConfigError`."""
    path = Path(path)
    stem, dash, name = path.stem.rpartition("-")
    if path.suffix != ".toml" or not dash or not OVERLAY_NAME.fullmatch(name):
        return None
    base = path.with_name(f"{stem}.toml")
    if not base.is_file() or name not in overlay_names(base):
        return None
    return base, name


def overlay_names(path: str | os.PathLike) -> list[str]:
    """The overlays of config file ``path`` (the NAMEs of its ``[overlay.NAME]`` tables)."""
    return list(_overlays(_parse(Path(path).resolve()), Path(path)))


def _read_file(path: Path, seen: tuple[Path, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the config of file ``path`` over its ``extends``, the file's own overlays)."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'extends' loops back to itself")
    if len(seen) > MAX_EXTENDS_DEPTH:
        raise ConfigError(f"{seen[0]}: 'extends' is more than {MAX_EXTENDS_DEPTH} files deep "
                          f"(reached {path}); merge some of the chain into one file")
    data = _parse(path)
    overlays = _overlays(data, path)
    data.pop(OVERLAYS, None)
    parent = data.pop("extends", None)
    if parent is None:
        return data, overlays
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: extends must be a file name, got {parent!r}")
    return merge(read_toml(path.parent / parent, (*seen, path)), data), overlays


def _parse(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from error


def _overlays(data: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The ``[overlay.NAME]`` tables of a parsed file, checked: each a table of config
    tables, named by a lowercase word (it ends the config's name after a ``-``)."""
    overlays = data.get(OVERLAYS, {})
    if not isinstance(overlays, dict):
        raise ConfigError(f"{path}: {OVERLAYS} must be tables [{OVERLAYS}.NAME], "
                          f"got {overlays!r}")
    for name, table in overlays.items():
        where = f"{path}: [{OVERLAYS}.{name}]"
        if not OVERLAY_NAME.fullmatch(name):
            raise ConfigError(f"{where}: an overlay's name is lowercase letters and digits")
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise ConfigError(f"{where} must hold config tables ([{OVERLAYS}.{name}.train] "
                              "etc.)")
    return overlays


def parse_value(text: str) -> Any:
    """A ``--set`` value: TOML syntax (numbers, booleans, arrays, quoted strings, inline
    tables); anything else is taken as a bare string."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def apply_assignments(data: dict[str, Any], assignments: list[str],
                      check_path: Callable[[list[str]], None] | None = None) -> dict[str, Any]:
    """``data`` with every ``key.path=value`` of ``assignments`` set (a deep copy);
    ``check_path(parts)`` raises a :class:`ConfigError` for a key the config does not
    know, before its value is read."""
    out = copy.deepcopy(data)
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {assignment!r}: expected section.key=value, e.g. "
                              "train.steps=100")
        if check_path is not None:
            check_path(parts)
        node = out
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {assignment!r}: {part!r} is a value, not a table")
            node = child
        node[parts[-1]] = parse_value(text.strip())
    return out
