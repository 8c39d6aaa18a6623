"""Mixers by name: ``build("weird", dim, causal=True, ...)`` and ``available()``.

Every registered mixer is an ``nn.Module`` with ``forward(x, mask=None) -> y`` on (B, L, dim)
inputs; causal ones also decode token by token through ``init_cache`` / ``step``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
import torch.nn as nn

from weirdnet.config.registry import Registry

MIXERS: Registry[Callable[..., nn.Module]] = Registry("mixer", (
    "weirdnet.layers.weird",       # weird, ps
    "weirdnet.layers.softmax",     # softmax (and the cross-attention, not registered)
    "weirdnet.layers.linear",      # linear
    "weirdnet.layers.local",       # local
    "weirdnet.layers.linformer",   # linformer
    "weirdnet.layers.relation",    # relation
    "weirdnet.layers.dba",         # dba
))
"""Every mixer.  The modules listed hold the built-in ones (``@register`` on each class),
imported on the first lookup.  A new mixer module goes in this list."""


CROSS_MIXERS: Registry[Callable[..., nn.Module]] = Registry("cross mixer", (
    "weirdnet.layers.softmax",     # softmax
    "weirdnet.layers.dba",         # dba
))
"""The cross mixers (queries from x, keys and values from a context), by name: an
encoder–decoder builds its blocks' cross mixers from here (``register_cross``)."""


WHOLE_SEQUENCE: dict[str, str] = {}
"""Why each mixer that needs the whole sequence at once does (``register(...,
whole_sequence=...)``): its sequence mixing has no sharded form, so a sequence sharded
over processes refuses it (the trainer's ``check_shardable``)."""


SHARED: dict[str, tuple[str, ...]] = {}
"""The shared settings each mixer declares at its registration (``register(...,
shared=...)``)."""


def register(name: str, *, shared: tuple[str, ...] = (), whole_sequence: str | None = None):
    """Class decorator: make a mixer buildable as ``build(name, dim, ...)``.
    ``shared``: the backbone settings it takes (names of :data:`SHARED_SETTINGS`, each a
    constructor parameter; a backbone passes it these and no others).
    ``whole_sequence``: why the mixer needs every position of a sequence at once (None:
    its sequence ops also run on the shards of one, see ``weirdnet.ops.sequence_scan``)."""
    SHARED[name] = tuple(shared)
    if whole_sequence:
        WHOLE_SEQUENCE[name] = whole_sequence
    return MIXERS.register(name)


def whole_sequence(name: str) -> str | None:
    """Why mixer ``name`` needs the whole sequence at once, or None (it shards)."""
    factory(name)  # the built-in mixers registered
    return WHOLE_SEQUENCE.get(name)


def register_cross(name: str):
    """Class decorator: make a cross mixer buildable as ``cross_factory(name)(dim, ...)``."""
    return CROSS_MIXERS.register(name)


def cross_factory(name: str) -> Callable[..., nn.Module]:
    """The cross mixer class registered as ``name`` (``"softmax"``, ``"dba"``)."""
    return CROSS_MIXERS.get(name)


def available() -> list[str]:
    """Names of all registered mixers, sorted."""
    return MIXERS.names()


def factory(name: str) -> Callable[..., nn.Module]:
    """The class (or function) registered as ``name``, e.g. to inspect its options."""
    return MIXERS.get(name)


@functools.cache
def has_causal_form(name: str) -> bool:
    """Whether mixer ``name`` can be built causal (a decoder, a language model), read from
    the mixer itself: one without a causal form refuses ``causal=True`` with a ValueError
    (built on the meta device: nothing is allocated)."""
    with torch.device("meta"):
        try:
            factory(name)(64, causal=True)
        except ValueError:
            return False
    return True


def accepted_options(name: str) -> list[str] | None:
    """The keyword options mixer ``name``'s constructor takes besides ``dim``, in its
    order (``causal`` included); None when it takes any (``**kwargs``)."""
    params = inspect.signature(factory(name)).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.name != "dim" and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


SHARED_SETTINGS = ("max_len", "heads", "n_layers", "dropout", "bias", "rope", "rope_theta")
"""The settings a backbone shares with its mixers (its max_len, heads, depth, attention
dropout, ``bias=False``, rotary positions).  A mixer takes the ones it lists in its
registration (e.g. ``@register("weird", shared=("max_len", "bias", "n_layers"))``), and
only those."""


def shared_settings(name: str) -> tuple[str, ...]:
    """The shared settings mixer ``name`` declares (at its registration, none by
    default), checked against its constructor: a ValueError naming the mixer and the
    setting for a declared one it does not take (say a renamed parameter), one that is not
    shared, or a shared one it takes but does not declare (it would be dropped)."""
    factory(name)  # the built-in mixers registered
    declared = SHARED.get(name, ())
    accepted = accepted_options(name)
    for setting in declared:
        if setting not in SHARED_SETTINGS:
            raise ValueError(f"mixer {name!r} declares {setting!r} in its shared settings, which "
                             f"is not a shared setting (those are {', '.join(SHARED_SETTINGS)})")
        if accepted is not None and setting not in accepted:
            raise ValueError(f"mixer {name!r} declares the shared setting {setting!r} but its "
                             f"constructor takes no {setting!r} (renamed?); accepted options: "
                             f"{', '.join(accepted)}")
    undeclared = [s for s in SHARED_SETTINGS if accepted and s in accepted and s not in declared]
    if undeclared:
        raise ValueError(f"mixer {name!r} takes the shared setting(s) "
                         f"{', '.join(map(repr, undeclared))} but does not declare them: add "
                         "them at its registration (shared=), or the backbone's value is "
                         "dropped")
    return declared


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
