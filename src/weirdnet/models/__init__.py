"""Weird-Net models: backbones with structure A, B or any mixer pattern, a causal language
model with cached generation, classifiers, a retrieval dual encoder, an encoder–decoder,
presets of the papers' sizes, and save/load (config JSON + safetensors).  Other
libraries' models for comparisons (``PeerLM``) are the lab's (``weirdnet_lab.peers``)."""

from weirdnet.config.typed import ConfigError

from .backbone import Backbone
from .base import CheckpointError, WeirdNetModel, load, register_model
from .blocks import Block, FeedForward
from .config import BackboneConfig, resolve_pattern
from .decoding.cache import BackboneCache
from .lm import LMConfig, LMOutput, WeirdNetLM, lm_loss, positions_at, selected_output, token_nll

__all__ = ["Backbone", "BackboneCache", "BackboneConfig", "Block", "CheckpointError",
           "ConfigError", "FeedForward", "LMConfig", "LMOutput", "WeirdNetLM", "WeirdNetModel",
           "lm_loss", "positions_at", "selected_output", "token_nll",
           "load", "register_model", "resolve_pattern"]
from .classifier import (  # noqa: E402
    ClassifierConfig,
    ClassifierOutput,
    DualEncoderConfig,
    WeirdNetClassifier,
    WeirdNetDualEncoder,
)
from .presets import PRESETS, build_preset, get_preset, preset_config, swiglu_width  # noqa: E402
from .seq2seq import Seq2SeqConfig, WeirdNetSeq2Seq  # noqa: E402

__all__ += ["PRESETS", "ClassifierConfig", "ClassifierOutput", "DualEncoderConfig",
            "Seq2SeqConfig", "WeirdNetClassifier",
            "WeirdNetDualEncoder", "WeirdNetSeq2Seq",
            "build_preset", "get_preset", "preset_config", "swiglu_width"]

# The fused-decoding threshold and a pattern's mixers: public for code built on weirdnet
# (the lab reports them; issue 63).
from .backbone import FUSED_STEP_MAX_BATCH  # noqa: E402
from .config import pattern_mixers  # noqa: E402

__all__ += ["FUSED_STEP_MAX_BATCH", "pattern_mixers"]
