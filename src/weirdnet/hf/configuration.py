"""``WeirdNetConfig``: the Hugging Face config of a weirdnet language model.

It holds the weirdnet model document (:meth:`weirdnet.models.WeirdNetModel.document`: the
class name and its config) under ``weirdnet``, so the one ``config.json`` reads both as a
Hugging Face config and through ``weirdnet.models.load``.  The names that tools read
(``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``max_position_embeddings``, ``tie_word_embeddings``) are read-only views of that
document, so they can never disagree with the model that is built.

Special tokens are bytes (the byte tokenizer of :mod:`.tokenizer`): ``pad`` = 0 (NUL),
``bos`` = 2 (STX, start of text), ``eos`` = 3 (ETX, end of text).
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedConfig

from weirdnet.models import LMConfig, WeirdNetLM
from weirdnet.models.base import HF_MODEL_TYPE, model_document
from weirdnet.typed_config import ConfigError, from_dict

PAD_ID, BOS_ID, EOS_ID = 0, 2, 3


def lm_document(config: LMConfig | dict | None = None) -> dict[str, Any]:
    """The weirdnet document of a :class:`WeirdNetLM` with ``config`` (default: the
    default LM), checked by building the config."""
    if config is None:
        config = LMConfig()
    elif isinstance(config, dict):
        config = from_dict(LMConfig, config)
    return model_document(WeirdNetLM.__name__, config)


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
        if self.weirdnet is None:
            self.weirdnet = lm_document()
        self.weirdnet = _checked_document(self.weirdnet)
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

    @property
    def _backbone(self) -> dict[str, Any]:
        return self.weirdnet["config"]["backbone"]

    @property
    def vocab_size(self) -> int:
        return self._backbone["vocab_size"]

    @property
    def hidden_size(self) -> int:
        return self._backbone["dim"]

    @property
    def num_hidden_layers(self) -> int:
        return self._backbone["depth"]

    @property
    def num_attention_heads(self) -> int | None:
        return self._backbone.get("heads")

    @property
    def max_position_embeddings(self) -> int:
        return self._backbone["max_len"]

    @property
    def tie_word_embeddings(self) -> bool:
        return self.weirdnet["config"].get("tie_embeddings", True)


def _checked_document(document: Any) -> dict[str, Any]:
    """The document, its config checked by building it (a clear error otherwise)."""
    if not isinstance(document, dict) or document.get("model") != WeirdNetLM.__name__:
        raise ValueError(f"WeirdNetConfig.weirdnet must be a {WeirdNetLM.__name__} document "
                         f"({{'model': 'WeirdNetLM', 'config': {{...}}}}), got {document!r:.200}")
    try:
        return lm_document(document.get("config", {}))
    except ConfigError as error:
        raise ValueError(f"WeirdNetConfig.weirdnet: {error}") from None
