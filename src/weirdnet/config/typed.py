"""Typed configuration from plain data: dataclasses built from JSON/TOML dicts with their
keys and value types checked, and the one error every config problem raises.

Shared by the model configs (:mod:`weirdnet.models.config`), the training config
(:mod:`weirdnet.train.config`) and the dataset options (:mod:`weirdnet.data.registry`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A config with an unknown key, a value of the wrong type or an invalid value."""


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (nested configs become dicts)."""
    return dataclasses.asdict(config)


def from_dict(cls: type, data: dict[str, Any], where: str = "config") -> Any:
    """Build config dataclass ``cls`` from ``data``, checking keys and value types."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {where}.{key}{hint} "
                              f"(known: {', '.join(fields)})")
        values[key] = coerce(hints[key], value, f"{where}.{key}")
    try:
        return cls(**values)
    except ConfigError as error:  # the class's own checks, which know a key's name only
        raise ConfigError(_located(str(error), where, fields)) from None


def _located(message: str, where: str, fields) -> str:
    """A class's check message that starts with one of its keys (``norm_eps must be
    ...``), named by its full path (``model.backbone.norm_eps must be ...``)."""
    return f"{where}.{message}" if message.split(" ", 1)[0] in fields else message


def coerce(hint: Any, value: Any, where: str) -> Any:
    """Check ``value`` against type ``hint`` (nested dataclasses are built from dicts)."""
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return from_dict(hint, value, where)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(option, value, where)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        return origin(value)
    return _scalar(hint, value, where)


INT_RANGE = (-2**63, 2**63 - 1)
"""The ints a config value may hold (what torch and the C kernels take: 64 bits)."""


def _scalar(hint: Any, value: Any, where: str) -> Any:
    """``value`` checked against a scalar type: an int fits in 64 bits, a float is finite
    (a config that means "no limit" says so with a None default, never inf or NaN)."""
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        value = _float_of_int(value, where)
    if hint is int and isinstance(value, bool):
        raise ConfigError(f"{where} must be an int, got {value!r}")
    if isinstance(hint, type) and not isinstance(value, hint):
        raise ConfigError(f"{where} must be {hint.__name__}, got {value!r} "
                          f"({type(value).__name__})")
    if hint is int and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise ConfigError(f"{where} must be an int of at most 64 bits "
                          f"(-2^63 <= value < 2^63), got {value}")
    if hint is float and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value}")
    return value


def _float_of_int(value: int, where: str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{where} must be a finite number, got {value}") from None
