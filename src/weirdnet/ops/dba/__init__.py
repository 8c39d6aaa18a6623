"""Dynamic Bilinear Low-Rank Attention (DBA paper §3, eqs. 7–12 and 14; docs/design.md §4).

Per batch row and head, on already projected tensors (n positions, width d)::

    W_r = softmax_n(Z Qᵀ),  W_c = softmax_n(Z Kᵀ)           (d_p × n; eqs. 11, 12)
    Q_DBA = (W_r Q) R,      K_DBA = (W_c K) R               (d_p × d_in; R: d × d_in)
    V_DBA = W'_cᵀ V                                         (d_p × d; W'_c: n × d_p)
    out   = W'_r (softmax(Q_DBA K_DBAᵀ / √d_in) V_DBA)      (n × d; eq. 10)

Padded positions (mask False) get -inf logits in both softmaxes (weight exactly 0) and
zero rows of W'_c, so they never reach a real token's output.  A sequence without a real
token has W_r = W_c = 0 and V_DBA = 0: its outputs are 0.  Padded positions must hold
finite values (0 · inf is NaN); every output of these functions is finite.

Nothing n × n is built: the cost is O(n · d_p · d) per head, for any n.

Cross-attention (eq. 14): the context is compressed to d_p rows beforehand (see
``DBACrossAttention`` in :mod:`weirdnet.layers.dba`), so keys and values arrive already
compressed (d_p × d) and only the queries are compressed, with a per-sample Z = Z_1.

Authors' form (``form="authors"`` of the ``dba`` mixer): values through the softmax
compression, a LayerNorm on the d_p × D attention output, a softmax over d_p for the
reconstruction, and the compressed sequence handed on as the next layer's Z; see
:mod:`.authors` and docs/design.md §4.

Files: ``authors.py`` (the authors' form), ``reference.py`` (float64 references:
explicit n x n maps), ``compress.py`` (the sequence compressions as custom ops with lean
backwards), ``attention.py`` (self- and cross-attention), ``checks.py`` (argument checks).
"""

from .attention import bilinear_mix, dba_attention, dba_cross_attention
from .authors import AuthorsWeights, dba_authors_attention
from .checks import check_authors_inputs, check_cross_inputs, check_dba_inputs
from .compress import compress_positions, compression_weights, dba_compress, position_softmax
from .reference import (
    dba_authors_reference,
    dba_compress_reference,
    dba_cross_reference,
    dba_reference,
)

__all__ = [
    "AuthorsWeights",
    "bilinear_mix",
    "check_authors_inputs",
    "check_cross_inputs",
    "check_dba_inputs",
    "compress_positions",
    "compression_weights",
    "dba_attention",
    "dba_authors_attention",
    "dba_authors_reference",
    "dba_compress",
    "dba_compress_reference",
    "dba_cross_attention",
    "dba_cross_reference",
    "dba_reference",
    "position_softmax",
]
