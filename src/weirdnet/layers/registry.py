"""Mixers by name: ``build("weird", dim, causal=True, ...)`` and ``available()``.

Every registered mixer is an ``nn.Module`` with ``forward(x, mask=None) -> y`` on (B, L, dim)
inputs; causal ones also decode token by token through ``init_cache`` / ``step``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch.nn as nn

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}


def register(name: str):
    """Class decorator: make a mixer buildable as ``build(name, dim, ...)``."""

    def wrap(factory):
        if name in _REGISTRY:
            raise ValueError(f"mixer name {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return wrap


def available() -> list[str]:
    """Names of all registered mixers, sorted."""
    return sorted(_REGISTRY)


def factory(name: str) -> Callable[..., nn.Module]:
    """The class (or function) registered as ``name``, e.g. to inspect its options."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown mixer {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


def accepted_options(name: str) -> list[str] | None:
    """The keyword options mixer ``name``'s constructor takes besides ``dim``, in its
    order (``causal`` included); None when it takes any (``**kwargs``)."""
    params = inspect.signature(factory(name)).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "dim" and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def check_options(name: str, options) -> None:
    """ValueError (one line) naming the options mixer ``name`` does not take, and those
    it does."""
    accepted = accepted_options(name)
    unknown = [key for key in options if accepted is not None and key not in accepted]
    if unknown:
        s = "s" if len(unknown) > 1 else ""
        raise ValueError(f"unknown option{s} {', '.join(map(repr, unknown))} for mixer "
                         f"{name!r}; accepted options: {', '.join(accepted)}")


def build(name: str, dim: int, *, causal: bool = True, **options) -> nn.Module:
    """Instantiate mixer ``name`` of width ``dim``; options go to its constructor.

    An option the constructor does not take is a ValueError naming the accepted ones."""
    check_options(name, options)
    return factory(name)(dim, causal=causal, **options)
