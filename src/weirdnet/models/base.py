"""What every weirdnet model shares: its config, parameter count, save and load.

``model.save(dir)`` writes ``dir/config.json`` (the model class and its config) and
``dir/model.safetensors`` (the weights; no pickle).  ``Class.load(dir)`` reads them back
bit-identically, building the model on the meta device first so no memory is spent on a
throw-away initialisation.  ``weirdnet.models.load(dir)`` picks the class from the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from weirdnet import __version__
from weirdnet.config.plugins import plugin_modules
from weirdnet.config.registry import Registry
from weirdnet.config.typed import ConfigError, from_dict, to_dict
from weirdnet.run.checkpoint import WEIGHTS_FILE, CheckpointError
from weirdnet.run.files import write_atomic
from weirdnet.run.safetensors_io import load_file, save_file

from .backbone import Backbone
from .size import check_fits_in_memory

CONFIG_FILE = "config.json"
HF_MODEL_TYPE = "weirdnet"
"""The ``model_type`` of a Hugging Face ``config.json`` written by :mod:`weirdnet.hf`; it
holds the document of :meth:`WeirdNetModel.document` under the key ``weirdnet``, so one
folder loads both with ``weirdnet.models.load`` and with ``from_pretrained``."""


def plugin_model_modules() -> tuple[str, ...]:
    """The ``MODEL_MODULES`` the installed plugins' modules list
    (:func:`weirdnet.config.plugins.plugin_modules`), in entry-point name order."""
    return tuple(name for module in plugin_modules().values()
                 for name in getattr(module, "MODEL_MODULES", ()))


MODELS: Registry[type[WeirdNetModel]] = Registry("model class", (
    "weirdnet.models.lm",          # WeirdNetLM
    "weirdnet.models.classifier",  # WeirdNetClassifier, WeirdNetDualEncoder
    "weirdnet.models.seq2seq",     # WeirdNetSeq2Seq
), more_modules=plugin_model_modules, error=KeyError)
"""Every model class a saved ``config.json`` may name.  The modules listed hold the
built-in ones (``@register_model`` on each class), imported on the first lookup, then
those the installed plugins list (:mod:`weirdnet.config.plugins`).  A new built-in
model module goes in this list."""


def register_model(cls: type[WeirdNetModel]) -> type[WeirdNetModel]:
    """Class decorator: ``save``/``load`` (and ``model.class`` in a training config) know
    the class by its name."""
    return MODELS.register(cls.__name__)(cls)


class WeirdNetModel(nn.Module):
    """Base class: subclasses set ``config_class`` and build themselves from ``config``."""

    config_class: type
    build_on_meta = True
    """``load`` builds the model on the meta device and takes the file's tensors as its
    own; a class whose modules make tensors the file does not hold (buffers that are not
    saved) or that share weights sets False: it is built on the CPU and loaded by copy."""

    def __init__(self, config):
        super().__init__()
        if isinstance(config, dict):
            config = from_dict(self.config_class, config)
        if not isinstance(config, self.config_class):
            raise ConfigError(f"{type(self).__name__} needs a {self.config_class.__name__}, "
                              f"got {type(config).__name__}")
        self.config = config

    def num_parameters(self, trainable_only: bool = False, embeddings: bool = True) -> int:
        """Number of parameters (each tied tensor counted once).  ``embeddings=False``
        leaves out every ``nn.Embedding`` table (token and learned-position embeddings,
        and an output head tied to them): the non-embedding count by which models of
        different families are matched (Kaplan et al. 2020)."""
        tables = set() if embeddings else {id(m.weight) for m in self.modules()
                                           if isinstance(m, nn.Embedding)}
        seen = {id(p): p for p in self.parameters()
                if (p.requires_grad or not trainable_only) and id(p) not in tables}
        return sum(p.numel() for p in seen.values())

    def save(self, directory: str | os.PathLike,
             state_dict: dict[str, torch.Tensor] | None = None) -> Path:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if
        needed; each file written to a temporary file, then renamed).  Returns the path.

        state_dict: the weights to write instead of ``self.state_dict()`` (e.g. the full
        state gathered from a sharded FSDP model)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = dict(self.state_dict() if state_dict is None else state_dict)
        save_file(tensors, directory / WEIGHTS_FILE,
                  {"format": "pt",  # what Hugging Face's loader asks of a PyTorch file
                   "weirdnet.model": type(self).__name__, "weirdnet.version": __version__})
        write_atomic(directory / CONFIG_FILE, json.dumps(self.document(), indent=2) + "\n")
        return directory

    def document(self) -> dict[str, Any]:
        """What ``config.json`` holds: see :func:`model_document`."""
        return model_document(type(self).__name__, self.config)

    @classmethod
    def load(cls, directory: str | os.PathLike, map_location: str | torch.device = "cpu"):
        """The model saved in ``directory`` by :meth:`save`; called on the base class it
        builds whatever class the file names, otherwise the file must name ``cls``."""
        directory = Path(directory)
        name, config = _read_config(directory)
        if name not in MODELS:
            raise CheckpointError(f"{directory / CONFIG_FILE}: unknown model class {name!r}; "
                                  f"known: {', '.join(MODELS.names())}")
        target = MODELS.get(name)
        if cls is not WeirdNetModel and target is not cls:
            raise CheckpointError(f"{directory} holds a {name}, not a {cls.__name__}; load "
                                  f"it with {name}.load() or weirdnet.models.load()")
        try:
            config = from_dict(target.config_class, config)
            check_fits_in_memory(target, config)  # before building any block
        except ConfigError as error:
            raise CheckpointError(f"{directory / CONFIG_FILE}: {error}") from None
        on_meta = target.build_on_meta or torch.device(map_location).type == "meta"
        with torch.device("meta" if on_meta else "cpu"):
            model = target(config)
        tensors = _read_weights(directory, map_location)
        _check_state(model, tensors, directory)
        model.load_state_dict(tensors, strict=True, assign=on_meta)
        model.after_load()
        return model

    def after_load(self) -> None:
        """Called by :meth:`load` once the weights are in (e.g. to share tied weights
        again); nothing by default."""

    def set_activation_checkpointing(self, mode: str, every: int = 1,
                                     ffn_chunk: int = 0) -> None:
        """``train.activation_checkpointing`` (``mode``: "none", "blocks" or "every_k",
        with ``every``) and ``train.ffn_chunk``: by default on every backbone of the
        model (an encoder-decoder has two; see
        :meth:`Backbone.set_activation_checkpointing
        <weirdnet.models.Backbone.set_activation_checkpointing>`).  A model with other
        blocks (the lab's ``transformers`` peers) implements its own."""
        for module in self.modules():
            if isinstance(module, Backbone):
                module.set_activation_checkpointing(mode, every, ffn_chunk)


def model_document(model: str, config) -> dict[str, Any]:
    """The ``config.json`` document of a saved model: the format, the weirdnet version,
    the model class name ``model`` and its ``config`` (a config dataclass) as a dict."""
    return {"format": "weirdnet-model", "version": __version__, "model": model,
            "config": to_dict(config)}


def _read_config(directory: Path) -> tuple[str, dict[str, Any]]:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} not found: {directory} is not a saved weirdnet model "
                              "(model.save(dir) writes config.json and model.safetensors)")
    try:
        document = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON ({error})") from None
    if isinstance(document, dict) and document.get("model_type") == HF_MODEL_TYPE:
        document = document.get("weirdnet")  # a Hugging Face config.json (weirdnet.hf)
    if not isinstance(document, dict) or document.get("format") != "weirdnet-model" \
            or "model" not in document or "config" not in document:
        raise CheckpointError(f"{path} is not a weirdnet model config (expected keys format="
                              "'weirdnet-model', model, config)")
    return document["model"], document["config"]


def _read_weights(directory: Path, map_location) -> dict[str, torch.Tensor]:
    path = directory / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} not found: the weights of the saved model are missing")
    try:
        tensors, _ = load_file(path, map_location)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    return tensors


def _check_state(model: nn.Module, tensors: dict[str, torch.Tensor], directory: Path) -> None:
    """Missing, unexpected or mis-shaped weights: one error listing them all."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    shapes = [f"{k}: file {tuple(tensors[k].shape)} {tensors[k].dtype}, model "
              f"{tuple(v.shape)} {v.dtype}" for k, v in expected.items()
              if k in tensors and (tensors[k].shape != v.shape
                                  or tensors[k].is_floating_point() != v.is_floating_point())]
    problems = []
    if missing:
        problems.append(f"missing keys {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        problems.append(f"unexpected keys {unexpected[:8]}"
                        f"{' ...' if len(unexpected) > 8 else ''}")
    if shapes:
        problems.append("mismatched tensors: " + "; ".join(shapes[:8]))
    if problems:
        raise CheckpointError(f"{directory / WEIGHTS_FILE} does not match its config.json: "
                              + "; ".join(problems))


def model_class(name: str) -> type[WeirdNetModel]:
    """The model class called ``name`` (e.g. "WeirdNetLM")."""
    return MODELS.get(name)


def load(directory: str | os.PathLike, map_location: str | torch.device = "cpu"):
    """Any saved weirdnet model (the class is read from ``config.json``)."""
    return WeirdNetModel.load(directory, map_location)
