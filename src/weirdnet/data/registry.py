"""One registry for every dataset: ``weirdnet.data.get(name, split, root=None, **options)``.

A dataset module registers a *factory* under a name::

    @register("listops", splits=("train", "val", "test"), task="classification",
              summary="LRA ListOps: nested MIN/MAX/MED/SM expressions, 10 classes")
    def _listops(split, root=None, **options) -> torch.utils.data.Dataset: ...

Item format (every dataset documents its own; the trainer relies on these keys):

- classification on tokens:  ``{"tokens": LongTensor (L,), "label": int}``
- classification on values:  ``{"values": FloatTensor (L, C), "label": int}``
  (missing values are NaN only in the raw parser; datasets fill them)
- retrieval (two documents): ``{"tokens": LongTensor (L1,), "tokens2": LongTensor (L2,),
  "label": int}``
- language modelling:        ``{"tokens": LongTensor (L + 1,)}`` (inputs ``[:-1]``,
  targets ``[1:]``)
- sequence to sequence:      ``{"src": LongTensor (Ls,), "tgt": LongTensor (Lt,)}`` with
  ``tgt = [bos] + target + [eos]`` (decoder inputs ``tgt[:-1]``, targets ``tgt[1:]``; the
  ids are ``info.bos_id`` / ``info.eos_id``)

Variable lengths are allowed; :func:`weirdnet.data.collate.pad_collate` pads a batch and adds
``<key>_mask`` (True = real position).  Every dataset object also has an ``info``
attribute, a :class:`DatasetInfo` (vocabulary size or input channels, classes, task).

Preprocessed or generated data is cached under :func:`data_root` (``$WEIRDNET_DATA``,
default ``~/.cache/weirdnet``).  A dataset whose files are missing raises
:class:`DataMissingError`, whose message says exactly how to get them.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DataMissingError", "DatasetInfo", "DatasetEntry", "available", "data_root",
           "entry", "get", "register"]


class DataMissingError(FileNotFoundError):
    """A dataset's files are not there; the message says how to get them."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about a dataset.

    task: "classification", "retrieval", "lm" or "seq2seq".
    vocab_size: number of token ids (token datasets), else None.
    input_dim: channels C of ``values`` (continuous datasets), else None.
    num_classes: number of labels (classification/retrieval), else None.
    max_len: the longest item length the dataset produces (after truncation), if fixed;
        for seq2seq the longer of ``src`` and ``tgt``.
    pad_id: the token id used for padding (token datasets); 0 unless said.
    bos_id, eos_id: the start/end token ids that open and close every seq2seq ``tgt``
        (``tgt = [bos_id] + target + [eos_id]``); None for the other tasks.
    encoding: the text encoding of the bytes when tokens are text bytes ("utf-8",
        "gb18030", "ascii", ...), so generated ids can be decoded back to text; None
        when the tokens are not text bytes (e.g. pixels, ListOps symbols).
    """

    task: str
    vocab_size: int | None = None
    input_dim: int | None = None
    num_classes: int | None = None
    max_len: int | None = None
    pad_id: int = 0
    bos_id: int | None = None
    eos_id: int | None = None
    encoding: str | None = None


@dataclass(frozen=True)
class DatasetEntry:
    """A registered dataset: its factory and what it offers."""

    name: str
    factory: Callable[..., Any]
    splits: tuple[str, ...]
    task: str
    summary: str


_REGISTRY: dict[str, DatasetEntry] = {}
_LOADED = False


def data_root() -> Path:
    """The cache directory: ``$WEIRDNET_DATA`` if set, else ``~/.cache/weirdnet``."""
    root = os.environ.get("WEIRDNET_DATA")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "weirdnet"


def register(name: str, *, splits: tuple[str, ...], task: str, summary: str
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``factory(split, root=None, **options)`` under ``name``."""

    def decorate(factory: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY and _REGISTRY[name].factory is not factory:
            raise ValueError(f"dataset {name!r} is already registered")
        _REGISTRY[name] = DatasetEntry(name, factory, tuple(splits), task, summary)
        return factory

    return decorate


def _load_builtin() -> None:
    """Import the modules that register the built-in datasets (once)."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from weirdnet.data import _builtin  # noqa: F401  (registers on import)


def available() -> list[str]:
    """Sorted names of all registered datasets."""
    _load_builtin()
    return sorted(_REGISTRY)


def entry(name: str) -> DatasetEntry:
    """The registered :class:`DatasetEntry` for ``name``; unknown names suggest the closest."""
    _load_builtin()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise KeyError(f"unknown dataset {name!r}{hint} Available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def get(name: str, split: str, *, root: str | os.PathLike | None = None, **options: Any):
    """The ``split`` of dataset ``name`` as a ``torch.utils.data.Dataset``.

    root: a directory with the official files (layout per dataset); None uses the offline
    source (generator cache or packaged real data).  Other options go to the dataset.
    """
    found = entry(name)
    if split not in found.splits:
        raise ValueError(f"dataset {name!r} has splits {found.splits}, not {split!r}")
    return found.factory(split, root=None if root is None else Path(root), **options)
