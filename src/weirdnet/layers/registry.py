"""Mixers by name: ``build("weird", dim, causal=True, ...)`` and ``available()``.

Every registered mixer is an ``nn.Module`` with ``forward(x, mask=None) -> y`` on (B, L, dim)
inputs; causal ones also decode token by token through ``init_cache`` / ``step``.
"""

from __future__ import annotations

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


def build(name: str, dim: int, *, causal: bool = True, **options) -> nn.Module:
    """Instantiate mixer ``name`` of width ``dim``; options go to its constructor."""
    return factory(name)(dim, causal=causal, **options)
