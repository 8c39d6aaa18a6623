"""Pure tensor functions of weirdnet, each with a plain reference beside its fast paths."""

from .linear_attention import (
    LinearAttentionState,
    causal_linear_attention,
    linear_attention,
    linear_attention_reference,
    linear_attention_step,
)
from .linformer import linformer_attention, linformer_reference
from .local_attention import local_attention, local_attention_reference
from .scan import scan_backend_name, weird_scan, weird_scan_bidirectional
from .scan_cache import WeirdScanCache
from .scan_checks import levels_needed
from .scan_reference import weird_scan_reference
from .softmax_attention import softmax_attention, softmax_attention_reference

__all__ = [
    "LinearAttentionState",
    "causal_linear_attention",
    "linear_attention",
    "linear_attention_reference",
    "linear_attention_step",
    "linformer_attention",
    "linformer_reference",
    "local_attention",
    "local_attention_reference",
    "softmax_attention",
    "softmax_attention_reference",
    "WeirdScanCache",
    "levels_needed",
    "scan_backend_name",
    "weird_scan",
    "weird_scan_bidirectional",
    "weird_scan_reference",
]
