"""Sequence mixers (nn.Module) with one interface (:class:`Mixer`), registered by name."""

from .base import Mixer, MultiHeadMixer
from .dba import DBACrossAttention, DBAttention, DBAuthorsAttention
from .linear import LinearAttention, LinearAttentionCache
from .linformer import LinformerAttention
from .local import LocalAttention, LocalAttentionCache
from .registry import available, build, factory, has_causal_form, register
from .relation import Relation, RelationCache
from .softmax import (
    CrossAttentionContext,
    SoftmaxAttention,
    SoftmaxCrossAttention,
    SoftmaxKVCache,
)
from .weird import PSAttention, WeirdAttention, WeirdAttentionCache

__all__ = [
    "DBACrossAttention",
    "DBAttention",
    "DBAuthorsAttention",
    "Relation",
    "RelationCache",
    "CrossAttentionContext",
    "LinearAttention",
    "LinearAttentionCache",
    "LinformerAttention",
    "LocalAttention",
    "LocalAttentionCache",
    "Mixer",
    "MultiHeadMixer",
    "SoftmaxAttention",
    "SoftmaxCrossAttention",
    "SoftmaxKVCache",
    "PSAttention",
    "WeirdAttention",
    "WeirdAttentionCache",
    "available",
    "build",
    "factory",
    "has_causal_form",
    "register",
]
