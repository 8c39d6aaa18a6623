"""``WeirdNetConfig``: the Hugging Face config of a weirdnet language model.

It holds the weirdnet model document (:meth:`weirdnet.models.WeirdNetModel.document`: the
class name and its config) under ``weirdnet``, so the one ``config.json`` reads both as a
Hugging Face config and through ``weirdnet.models.load``.  The names that tools read
(``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``max_position_embeddings``, ``tie_word_embeddings``) are read-only views of that
document, so they can never disagree with the model that is built: a ``config.json`` (or
a ``from_pretrained`` argument) may repeat one with the document's value, and any other
value is a ValueError naming the key.

Special tokens are bytes (the byte tokenizer of :mod:`.tokenizer`): ``pad`` = 0 (NUL),
``bos`` = 2 (STX, start of text), ``eos`` = 3 (ETX, end of text).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.dataclasses import type_validator
from transformers import PreTrainedConfig

from weirdnet.config.typed import ConfigError, from_dict
from weirdnet.models import LMConfig, WeirdNetLM
from weirdnet.models.base import HF_MODEL_TYPE, model_document

PAD_ID, BOS_ID, EOS_ID = 0, 2, 3


def lm_document(config: LMConfig | dict | None = None) -> dict[str, Any]:
    """The weirdnet document of a :class:`WeirdNetLM` with ``config`` (default: the
    default LM), checked by building the config."""
    if config is None:
        config = LMConfig()
    elif isinstance(config, dict):
        config = from_dict(LMConfig, config, where="weirdnet.config")
    return model_document(WeirdNetLM.__name__, config)


_DEFAULTS = {"tie_embeddings": True}


def _derived(name: str, *path: str) -> property:
    """A read-only view of ``weirdnet["config"][path...]`` named ``name``.

    Setting it (a ``config.json`` with a top-level ``name``, or ``from_pretrained(...,
    name=value)``) is accepted when the value equals the document's and is a ValueError
    naming the key otherwise, so the view can never disagree with the model built."""
    def get(self) -> Any:
        node = self.weirdnet["config"]
        for key in path[:-1]:
            node = node[key]
        return node.get(path[-1], _DEFAULTS.get(path[-1]))

    def set_(self, value: Any) -> None:
        held = get(self)
        if value != held:
            raise ValueError(f"WeirdNetConfig: {name}={value!r} (in config.json or an "
                             f"argument) conflicts with the weirdnet model config "
                             f"({'.'.join(path)}={held!r}), from which {name} is derived: "
                             f"remove {name} or make it {held!r}")

    return property(get, set_, doc=f"``weirdnet.config.{'.'.join(path)}`` (read-only).")


class WeirdNetConfig(PreTrainedConfig):
    """A weirdnet causal LM for ``transformers``.

    Args:
        weirdnet: the weirdnet model document (``{"model": "WeirdNetLM", "config":
            {"backbone": {...}, "tie_embeddings": ...}}``), default: ``WeirdNetLM()``'s.
        use_cache: whether ``generate`` decodes through the layers' caches (it should).
        bos_token_id, eos_token_id, pad_token_id: byte values (see the module docstring).

    Build one from a model with :meth:`from_lm_config`.
    """

    model_type = HF_MODEL_TYPE

    weirdnet: dict[str, Any] | None = None
    use_cache: bool = True
    bos_token_id: int | None = BOS_ID
    eos_token_id: int | None = EOS_ID
    pad_token_id: int | None = PAD_ID

    def __post_init__(self, **kwargs):
        _check_field_types(self)
        if self.weirdnet is None:
            self.weirdnet = lm_document()
        self.weirdnet = _checked_document(self.weirdnet)
        _check_values(self)
        super().__post_init__(**kwargs)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs) -> WeirdNetConfig:
        """A saved config: refused with a clear error when it is another model type's or
        lacks the weirdnet document (it would otherwise become a default model)."""
        model_type = config_dict.get("model_type")
        if model_type != HF_MODEL_TYPE:
            raise ValueError(f"this config.json is for a {model_type!r} model, not a weirdnet "
                             "model (model_type 'weirdnet')")
        if "weirdnet" not in config_dict:
            raise ValueError("this weirdnet config.json has no 'weirdnet' entry (the model "
                             "class and its config); export the model with weirdnet export-hf")
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def from_lm_config(cls, config: LMConfig, **kwargs) -> WeirdNetConfig:
        """The config of a :class:`~weirdnet.models.WeirdNetLM` built from ``config``."""
        return cls(weirdnet=lm_document(config), **kwargs)

    @property
    def lm_config(self) -> LMConfig:
        """The weirdnet :class:`~weirdnet.models.LMConfig` (built afresh on each read)."""
        return from_dict(LMConfig, self.weirdnet["config"])

    vocab_size = _derived("vocab_size", "backbone", "vocab_size")
    hidden_size = _derived("hidden_size", "backbone", "dim")
    num_hidden_layers = _derived("num_hidden_layers", "backbone", "depth")
    num_attention_heads = _derived("num_attention_heads", "backbone", "heads")
    max_position_embeddings = _derived("max_position_embeddings", "backbone", "max_len")
    tie_word_embeddings = _derived("tie_word_embeddings", "tie_embeddings")


@functools.cache
def _field_types(cls: type) -> dict[str, tuple[Any, str]]:
    """Every field of config class ``cls`` (``transformers``' own included): its type and
    the type as written."""
    hints = typing.get_type_hints(cls, localns={"torch": torch})
    return {f.name: (hints[f.name], str(f.type)) for f in dataclasses.fields(cls)}


def _check_field_types(config: WeirdNetConfig) -> None:
    """ValueError (one line, naming the key) for a field of the wrong type, ours or
    ``transformers``': its field annotations are strings, which its own check skips, so
    a tampered ``"pad_token_id": "x"`` would otherwise fail later as a TypeError."""
    for name, (hint, written) in _field_types(type(config)).items():
        value = getattr(config, name)
        try:
            type_validator(name, value, hint)
        except TypeError:
            raise ValueError(f"WeirdNetConfig: {name} must be {written}, got {value!r:.80} "
                             f"({type(value).__name__})") from None


def _check_values(config: WeirdNetConfig) -> None:
    """The special token ids: None or an id of the vocabulary; ``dtype`` a name of a torch
    dtype (ValueError otherwise)."""
    if isinstance(config.dtype, str) and not isinstance(getattr(torch, config.dtype, None),
                                                        torch.dtype):
        raise ValueError(f"WeirdNetConfig: dtype must name a torch dtype (e.g. "
                         f"\"float32\"), got {config.dtype!r:.80}")
    vocab = config.weirdnet["config"]["backbone"]["vocab_size"]
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(config, name)
        if value is not None and not 0 <= value < vocab:
            raise ValueError(f"WeirdNetConfig: {name} must be None or a token id in "
                             f"[0, {vocab}), got {value}")


def check_generation_file(path: Path) -> None:
    """ValueError (one line, naming the file and key) for a special token id of
    ``generation_config.json`` (when there is one) that is not None or an id >= 0
    (``eos_token_id`` may also be a list of them): ``transformers`` compares them with
    ``<`` and a tampered ``"x"`` would fail there as a TypeError."""
    if not path.is_file():
        return
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(document).__name__}")
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        value = document.get(name)
        ids = value if name == "eos_token_id" and isinstance(value, list) else [value]
        if value is not None and not all(isinstance(i, int) and not isinstance(i, bool)
                                         and i >= 0 for i in ids):
            raise ValueError(f"{path}: {name} must be None or a token id >= 0, got "
                             f"{value!r:.80}")


def _checked_document(document: Any) -> dict[str, Any]:
    """The document, its config checked by building it (a clear error otherwise)."""
    if not isinstance(document, dict) or document.get("model") != WeirdNetLM.__name__:
        raise ValueError(f"WeirdNetConfig.weirdnet must be a {WeirdNetLM.__name__} document "
                         f"({{'model': 'WeirdNetLM', 'config': {{...}}}}), got {document!r:.200}")
    try:
        return lm_document(document.get("config", {}))
    except ConfigError as error:
        raise ValueError(f"WeirdNetConfig: {error}") from None
