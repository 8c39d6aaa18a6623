"""Sequence mixers (nn.Module) with one interface, registered by name."""

from .registry import available, build, register
from .weird import PSAttention, WeirdAttention, WeirdAttentionCache

__all__ = ["PSAttention", "WeirdAttention", "WeirdAttentionCache", "available", "build",
           "register"]
