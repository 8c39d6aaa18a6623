"""The one registry mechanism of weirdnet: mixers, models and datasets register the same way.

An entry is registered by a decorator beside its definition, in its own module::

    @MIXERS.register("weird")
    class WeirdAttention(Mixer): ...

and the registry lists the modules that hold its built-in entries (``modules``), so the
registration is explicit: adding a built-in entry is its own file plus one line in that
list.  The listed modules are imported on the first lookup, not when the registry is
imported (``import weirdnet.data`` stays cheap).  User code registers its own entries
with the same decorator, before it looks them up.

Lookups of an unknown name raise the registry's ``error`` type (ValueError or KeyError,
as each public API has always raised), naming the closest name and the known ones.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one ``kind`` ("mixer", "dataset", "model class") by name.

    ``modules``: the modules whose decorators register the built-in entries, imported
    on the first lookup.  ``more_modules``: called on the first lookup, after those
    are imported, for further modules to import (the models that installed plugins
    add, :mod:`weirdnet.config.plugins`).  ``error``: the exception type of an unknown
    name.
    ``wrap(name, obj, **info)``: what is stored for a decorated object (default: the
    object itself); the decorator still returns the object.
    """

    def __init__(self, kind: str, modules: tuple[str, ...] = (), *,
                 more_modules: Callable[[], tuple[str, ...]] | None = None,
                 error: type[Exception] = ValueError,
                 wrap: Callable[..., T] | None = None):
        self.kind, self.modules, self.error = kind, tuple(modules), error
        self._more_modules = more_modules
        self._wrap = wrap
        self._entries: dict[str, T] = {}
        self._objects: dict[str, object] = {}  # the decorated object of each entry
        self._loaded = False

    def register(self, name: str, **info) -> Callable:
        """Decorator: register the decorated object under ``name`` (``info``: what the
        registry's ``wrap`` stores beside it).  Registering another object under a name
        that is taken is a ValueError; the same object again is allowed (a module
        imported twice, e.g. under ``python -m``)."""

        def decorate(obj):
            if self._objects.get(name, obj) is not obj:
                raise ValueError(f"{self.kind} name {name!r} is already registered")
            entry = obj if self._wrap is None else self._wrap(name, obj, **info)
            self._entries[name], self._objects[name] = entry, obj
            return obj

        return decorate

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self.modules:
                importlib.import_module(module)
            for module in self._more_modules() if self._more_modules else ():
                importlib.import_module(module)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """The entry called ``name``; ``error`` naming the closest and the known names."""
        self._load()
        if name not in self._entries:
            close = difflib.get_close_matches(str(name), list(self._entries), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.error(f"unknown {self.kind} {name!r}{hint} (available: "
                             f"{', '.join(sorted(self._entries))})")
        return self._entries[name]

