"""Pure tensor functions of weirdnet, each with a plain reference beside its fast paths."""

from .checks import levels_needed
from .context_parallel import (
    ContextParallel,
    checkpoint_context_fn,
    refuse_sharded,
    sequence_dba_authors_attention,
    sequence_dba_compress,
    sequence_length,
    sequence_linear_attention,
    sequence_linformer_attention,
    sequence_local_attention,
    sequence_packed_softmax_attention,
    sequence_per_document,
    sequence_positions,
    sequence_relation_mean,
    sequence_relation_mix,
    sequence_scan,
    sequence_short_conv,
    sequence_softmax_attention,
    sharded_checkpoint_context,
)
from .dba import (
    dba_attention,
    dba_compress,
    dba_compress_reference,
    dba_cross_attention,
    dba_cross_reference,
    dba_reference,
)
from .linear_attention import (
    LinearAttentionState,
    causal_linear_attention,
    linear_attention,
    linear_attention_reference,
    linear_attention_step,
)
from .linformer import linformer_attention, linformer_reference
from .local_attention import local_attention, local_attention_reference
from .packing import check_doc_ids, per_document
from .relation import relation_mix, relation_mix_continue, relation_reference
from .shard_transfers import count_sent_bytes
from .short_conv import short_conv, short_conv_reference
from .softmax_attention import softmax_attention, softmax_attention_reference
from .weird_scan import (
    WeirdScanCache,
    scan_backend_name,
    weird_scan,
    weird_scan_bidirectional,
    weird_scan_reference,
)
from .weird_scan.context_parallel import (
    weird_scan_bidirectional_context_parallel,
    weird_scan_context_parallel,
)

__all__ = [
    "ContextParallel",
    "checkpoint_context_fn",
    "refuse_sharded",
    "sequence_dba_authors_attention",
    "sequence_dba_compress",
    "sequence_length",
    "sequence_linear_attention",
    "sequence_linformer_attention",
    "sequence_local_attention",
    "sequence_packed_softmax_attention",
    "sequence_per_document",
    "sequence_positions",
    "sequence_relation_mean",
    "sequence_relation_mix",
    "sequence_scan",
    "sequence_short_conv",
    "sequence_softmax_attention",
    "dba_attention",
    "dba_compress",
    "dba_compress_reference",
    "dba_cross_attention",
    "dba_cross_reference",
    "dba_reference",
    "relation_mix",
    "relation_mix_continue",
    "relation_reference",
    "short_conv",
    "short_conv_reference",
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
    "check_doc_ids",
    "count_sent_bytes",
    "levels_needed",
    "per_document",
    "scan_backend_name",
    "sharded_checkpoint_context",
    "weird_scan",
    "weird_scan_bidirectional",
    "weird_scan_bidirectional_context_parallel",
    "weird_scan_context_parallel",
    "weird_scan_reference",
]
