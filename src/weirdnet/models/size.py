"""Whether a model can be built here: its parameter count, taken before anything is
allocated, against this machine's memory.

Training (:func:`weirdnet.train.setup.build_model`), ``weirdnet.models.load`` and the
Hugging Face model (``from_pretrained``) check a config with :func:`check_fits_in_memory`
before building it, so a config with ``depth = 1000000000`` or ``dim = 10**12`` is one
line, not minutes of building blocks or an allocator's error.

The count is taken on the meta device (no memory).  A deep backbone is not built whole:
its parameters grow by the same amount with each cycle of its mixer pattern, so the count
of ``q`` cycles is read off models of one and two cycles (plus the remainder layers).
"""

from __future__ import annotations

import dataclasses
import os

import torch

from weirdnet.config.typed import ConfigError

from .config import BackboneConfig, pattern_mixers

BYTES_PER_PARAMETER = 2
"""The fewest bytes a weight takes (bfloat16 or float16): a model whose parameters do not
fit in memory even so cannot be built here in any form."""


def parameter_count(cls: type, config) -> int | None:
    """The parameters of ``cls(config)`` (each tied tensor once), counted on the meta
    device without building more than two pattern cycles of any backbone; None where a
    tensor's size overflows 64 bits."""
    extra, reduced = 0, config
    for name, backbone in _backbones(config):
        cycle = len(pattern_mixers(backbone.pattern))
        cycles, rest = divmod(backbone.depth, cycle)
        if cycles <= 2:
            continue
        one, two = (dataclasses.replace(backbone, depth=k * cycle + rest) for k in (1, 2))
        low = _meta_count(cls, dataclasses.replace(config, **{name: one}))
        high = _meta_count(cls, dataclasses.replace(config, **{name: two}))
        if low is None or high is None:
            return None
        extra += (cycles - 1) * (high - low)
        reduced = dataclasses.replace(reduced, **{name: one})
    count = _meta_count(cls, reduced)
    return None if count is None else count + extra


def check_fits_in_memory(cls: type, config) -> None:
    """ConfigError (one line) when the parameters of ``cls(config)`` cannot fit in this
    machine's memory even at :data:`BYTES_PER_PARAMETER` bytes each; nothing is
    allocated.  A machine whose memory is unknown is not checked."""
    memory = physical_memory()
    count = parameter_count(cls, config)
    if memory is not None and (count is None or count * BYTES_PER_PARAMETER > memory):
        raise does_not_fit(count, memory)


def does_not_fit(count: int | None, memory: int | None = None) -> ConfigError:
    """The error of a model too large for this machine (``count`` None: more than 2^63
    parameters)."""
    counted = "more than 2^63" if count is None else f"{count:,}"
    held = "" if memory is None else f" ({memory / 2**30:.1f} GiB)"
    return ConfigError(f"{counted} parameters do not fit in this machine's memory{held}; "
                       "make the model's sizes smaller")


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _backbones(config) -> list[tuple[str, BackboneConfig]]:
    """The (field name, backbone config) pairs of a model config."""
    return [(f.name, getattr(config, f.name)) for f in dataclasses.fields(config)
            if isinstance(getattr(config, f.name), BackboneConfig)]


def _meta_count(cls: type, config) -> int | None:
    """``cls(config)``'s parameters built on the meta device; None on a size overflow."""
    try:
        with torch.device("meta"):
            model = cls(config)
    except RuntimeError:  # a tensor's size overflows 64 bits
        return None
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
