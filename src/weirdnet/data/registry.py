"""One registry for every dataset: ``weirdnet.data.get(name, split, root=None, **options)``.

A dataset module registers a *factory* under a name::

    @register("listops", splits=("train", "val", "test"), task="classification",
              summary="LRA ListOps: nested MIN/MAX/MED/SM expressions, 10 classes",
              root=Root("folder", "the folder holding basic_*.tsv"))
    def _listops(split, root=None, **options) -> torch.utils.data.Dataset: ...

Every dataset declares what its ``root=`` may name (:class:`Root`: a file, a folder,
either, or nothing for a generated one); :func:`check_root` holds a root to that, so
``get`` and the config check (``data.root``) refuse a root that does not exist, or a
file where a folder is needed, in one line that says what the dataset takes.

Item format (every dataset documents its own; the trainer relies on these keys):

- classification on tokens:  ``{"tokens": LongTensor (L,), "label": int}``
- classification on values:  ``{"values": FloatTensor (L, C), "label": int}``
  (missing values are NaN only in the raw parser; datasets fill them)
- retrieval (two documents): ``{"tokens": LongTensor (L1,), "tokens2": LongTensor (L2,),
  "label": int}``
- language modelling:        ``{"tokens": LongTensor (L + 1,)}`` (inputs ``[:-1]``,
  targets ``[1:]``)
- recall diagnostics:        ``{"tokens": LongTensor (L,), "targets": LongTensor (L,)}``,
  targets -100 where nothing is asked (:mod:`weirdnet.data.recall`)
- sequence to sequence:      ``{"src": LongTensor (Ls,), "tgt": LongTensor (Lt,)}`` with
  ``tgt = [bos] + target + [eos]`` (decoder inputs ``tgt[:-1]``, targets ``tgt[1:]``; the
  ids are ``info.bos_id`` / ``info.eos_id``)

Variable lengths are allowed; :func:`weirdnet.data.collate.pad_collate` pads a batch and adds
``<key>_mask`` (True = real position).  Every dataset object also has an ``info``
attribute, a :class:`DatasetInfo` (vocabulary size or input channels, classes, task).

Preprocessed or generated data is cached under :func:`data_root` (``$WEIRDNET_DATA``,
default ``~/.cache/weirdnet``).  A dataset whose files are missing raises
:class:`DataMissingError`, whose message says exactly how to get them.

Options are checked before the factory runs (:func:`check_options`): their names and types
come from the factory's signature (its keyword parameters after ``split`` and ``root``,
with their annotations), plus, for a factory that passes ``**options`` on, the table given
as ``register(..., options=...)`` (:func:`signature_options` makes one from the function
the options go to).  An unknown name suggests the closest known one.
"""

from __future__ import annotations

import difflib
import inspect
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weirdnet.config.registry import Registry
from weirdnet.config.typed import ConfigError, coerce

__all__ = ["NO_ROOT", "DataMissingError", "DatasetEntry", "DatasetInfo", "Root", "available",
           "check_options", "check_root", "data_root", "entry", "get", "register",
           "signature_options"]


class DataMissingError(FileNotFoundError):
    """A dataset's files are not there; the message says how to get them."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about a dataset.

    task: "classification", "retrieval", "lm", "recall" or "seq2seq".
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


ROOT_KINDS = {"file": "a file", "folder": "a folder", "either": "a file or a folder",
              "none": "no root"}
"""What a dataset's ``root=`` may name, and how a message says it."""


@dataclass(frozen=True)
class Root:
    """What ``root=`` of a dataset may name.

    kind: "file", "folder", "either" (a file or a folder) or "none" (generated data: the
        dataset takes no root).
    form: what it is, in words ("the text file", "the folder holding aclImdb/"), for
        messages and ``weirdnet data list``.
    required: the dataset has no default source, so ``root=None`` is refused.
    """

    kind: str
    form: str = ""
    required: bool = False

    def __post_init__(self):
        if self.kind not in ROOT_KINDS:
            raise ValueError(f"Root kind must be one of {', '.join(ROOT_KINDS)}, got "
                             f"{self.kind!r}")

    def describe(self) -> str:
        """``"a folder (the folder holding aclImdb/)"``; ``"no root"`` for kind "none"."""
        what = ROOT_KINDS[self.kind]
        return f"{what} ({self.form})" if self.form and self.kind != "none" else what


NO_ROOT = Root("none", "generated")
"""The root of a generated dataset: there is none."""


@dataclass(frozen=True)
class DatasetEntry:
    """A registered dataset: its factory and what it offers.

    options: every option the factory takes, name -> type hint (``Any`` when not
    annotated), or None when they are not known (a factory that passes ``**options`` on
    without a table): then they are not checked.
    """

    name: str
    factory: Callable[..., Any]
    splits: tuple[str, ...]
    task: str
    summary: str
    root: Root
    options: Mapping[str, Any] | None = None


def data_root() -> Path:
    """The cache directory: ``$WEIRDNET_DATA`` if set, else ``~/.cache/weirdnet``."""
    root = os.environ.get("WEIRDNET_DATA")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "weirdnet"


def _keywords(function: Callable[..., Any], skip: int, exclude: tuple[str, ...]
              ) -> tuple[dict[str, Any], bool]:
    """(name -> type hint of the parameters of ``function`` that can be given by keyword,
    after the first ``skip`` and leaving out ``exclude``; whether it takes ``**kwargs``)."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no type check
        hints = {}
    parameters = list(inspect.signature(function).parameters.values())
    table = {p.name: hints.get(p.name, Any) for p in parameters[skip:]
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in exclude}
    return table, any(p.kind is p.VAR_KEYWORD for p in parameters)


def signature_options(function: Callable[..., Any], *, exclude: tuple[str, ...] = ()
                      ) -> dict[str, Any] | None:
    """The options ``function`` takes by keyword, name -> type hint (``Any`` when not
    annotated), leaving out ``exclude``; None when it also takes ``**kwargs``."""
    table, open_ended = _keywords(function, 0, exclude)
    return None if open_ended else table


def _factory_options(factory: Callable[..., Any], extra: Mapping[str, Any] | None
                     ) -> dict[str, Any] | None:
    """The option table of ``factory(split, root=None, ...)``: its own keyword parameters,
    plus ``extra`` (what its ``**options`` accept) when it has ``**options``."""
    table, open_ended = _keywords(factory, 2, ())
    if open_ended:
        if extra is None:
            return None
        table.update({k: v for k, v in extra.items() if k not in table})
    return table


def _entry(name: str, factory: Callable[..., Any], *, splits: tuple[str, ...], task: str,
           summary: str, root: Root, options: Mapping[str, Any] | None = None
           ) -> DatasetEntry:
    if not isinstance(root, Root):
        raise TypeError(f"dataset {name!r}: root= must be a Root (what root= may name), "
                        f"got {root!r}")
    return DatasetEntry(name, factory, tuple(splits), task, summary, root,
                        _factory_options(factory, options))


DATASETS: Registry[DatasetEntry] = Registry("dataset", (
    "weirdnet.data.lra.listops",      # listops: generator + official TSV reader
    "weirdnet.data.lra.pathfinder",   # pathfinder32, pathfinder128: generator + reader
    "weirdnet.data.lra.imdb",         # LRA Text (IMDb) and its offline stand-ins
    "weirdnet.data.lra.aan",          # LRA Retrieval (AAN) and its offline stand-in
    "weirdnet.data.lra.images",       # LRA Image (CIFAR-10 gray), MNIST, Fashion-MNIST
    "weirdnet.data.text.lm",          # enwik8, text8, any text file
    "weirdnet.data.text.corpora",     # offline real corpora out of PyPI releases
    "weirdnet.data.text.stdlib",      # python-stdlib: always offline
    "weirdnet.data.timeseries.uea",   # UEA/UCR .ts problems
    "weirdnet.data.seq2seq.digits",   # seq2seq-digits: generator
    "weirdnet.data.recall.mqar",      # recall diagnostics: generators
    "weirdnet.data.recall.selective_copy",
    "weirdnet.data.recall.induction",
), error=KeyError, wrap=_entry)
"""Every dataset.  The modules listed hold the built-in ones (``@register`` beside each
factory), imported on the first lookup (so ``import weirdnet.data`` stays cheap).  A new
dataset module goes in this list."""


def register(name: str, *, splits: tuple[str, ...], task: str, summary: str, root: Root,
             options: Mapping[str, Any] | None = None
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``factory(split, root=None, **options)`` under ``name``.

    root: what ``root=`` may name (:class:`Root`; :data:`NO_ROOT` for generated data);
    the factory is only called with a root that :func:`check_root` accepts.
    options: for a factory that passes ``**options`` on, what they may be (name -> type
    hint, e.g. from :func:`signature_options`); the factory's own keyword parameters are
    read from its signature.
    """
    return DATASETS.register(name, splits=splits, task=task, summary=summary, root=root,
                             options=options)


def available() -> list[str]:
    """Sorted names of all registered datasets."""
    return DATASETS.names()


def entry(name: str) -> DatasetEntry:
    """The registered :class:`DatasetEntry` for ``name``; unknown names suggest the closest."""
    return DATASETS.get(name)


def get(name: str, split: str, *, root: str | os.PathLike | None = None, **options: Any):
    """The ``split`` of dataset ``name`` as a ``torch.utils.data.Dataset``.

    root: the official files (a file or a folder, as the dataset's :class:`Root` says;
    :func:`check_root`); None uses the offline source (generator cache or packaged real
    data).  Other options go to the dataset.
    """
    found = entry(name)
    if split not in found.splits:
        raise ValueError(f"dataset {name!r} has splits {found.splits}, not {split!r}")
    options = check_options(name, options)
    path = check_root(name, root, present=False)  # its kind; whether it is there:
    if path is None:
        check_root(name, None)  # a required root not given
    elif not path.exists():  # with the dataset's own hint on how to get the files
        raise DataMissingError(_missing_root(found, path, split, options))
    return found.factory(split, root=path, **options)


def _missing_root(found: DatasetEntry, path: Path, split: str, options: Mapping[str, Any]
                  ) -> str:
    """The message for a root that does not exist: it, the dataset and what the dataset
    takes, and how to get the files as the dataset's own DataMissingError says it (the
    factory is asked; whatever it would have returned is not used)."""
    message = (f"root={str(path)!r} does not exist; dataset {found.name!r} takes "
               f"{found.root.describe()}")
    try:
        found.factory(split, root=path, **options)
    except DataMissingError as error:
        return f"{message}. " + " ".join(str(error).split())  # one line
    except Exception:  # noqa: BLE001 - only asked for its hint; the missing root is the error
        pass
    return message


def check_root(name: str, root: str | os.PathLike | None, key: str = "root", *,
               present: bool = True) -> Path | None:
    """``root`` as a Path (None stays None) once it is what dataset ``name`` takes.

    key: how the message names the root ("root", "data.root").  Raises ConfigError for
    a root given to a generated dataset, a file where a folder is needed or the reverse,
    and DataMissingError for a root that does not exist or a required one not given
    (neither unless ``present``: with False, a config that names data on another machine,
    a run whose data has moved, or a config whose root is to be given with ``--set``,
    still loads); each message names the root and the dataset and says what it takes.
    """
    spec = entry(name).root
    if root is None:
        if spec.required and present:
            raise DataMissingError(f"dataset {name!r} needs {key}= {spec.describe()}")
        return None
    path = Path(root).expanduser()
    takes = f"dataset {name!r} takes {spec.describe()}"
    if spec.kind == "none":
        raise ConfigError(f"dataset {name!r} is generated; it takes no {key}= "
                          f"(got {key}={str(root)!r})")
    if not path.exists():
        if not present:
            return path
        raise DataMissingError(f"{key}={str(root)!r} does not exist; {takes}")
    found = "folder" if path.is_dir() else "file" if path.is_file() else None
    if found is None or spec.kind not in ("either", found):
        what = f"a {found}" if found else "neither a file nor a folder"
        raise ConfigError(f"{key}={str(root)!r} is {what}; {takes}")
    return path


def check_options(name: str, options: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``options`` of dataset ``name`` checked against what its factory takes (names and
    types; ints are accepted for floats and become floats); ``prefix`` is put before each
    name in the messages, e.g. "data.options.".  Raises ``ConfigError`` (a ValueError)
    for an unknown name (suggesting the closest) or a value of the wrong type."""
    found = entry(name)
    if not isinstance(options, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'options'} of dataset {name!r} must be "
                          f"a table of options, got {options!r}")
    if found.options is None:
        return dict(options)
    checked = {}
    for key, value in options.items():
        if key not in found.options:
            known = [f"{prefix}{k}" for k in found.options]
            close = difflib.get_close_matches(f"{prefix}{key}", known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            listed = f"(known: {', '.join(known)})" if known else "(it takes no options)"
            raise ConfigError(f"unknown option {prefix + key!r} of dataset {name!r}{hint} "
                              f"{listed}")
        checked[key] = coerce(found.options[key], value, f"{prefix}{key}")
    return checked
