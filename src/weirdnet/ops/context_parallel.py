"""Context parallelism as an op-level context: one sequence in contiguous shards over a
``torch.distributed`` group, each rank running the same model on its own shard.

A :class:`ContextParallel` is entered around the forward (and backward) of a model
(``with ContextParallel(group): loss = model(shard)...``; the trainer enters it, through
:func:`weirdnet.train.context_parallel.sharded`, which first refuses a model that cannot
shard).  Only the ops that exchange data read it: the sequence ops below, which the
mixers, the short convolution and the backbone's positions call.  On one process (no
context entered) each runs its whole-sequence op, after one read of a module list; while
one is entered, its sharded form, which exchanges what crosses the shard boundaries
(:mod:`weirdnet.ops.sequence_shards`, the weird scan's own
:func:`weirdnet.ops.weird_scan_context_parallel`).

What each exchanges (docs/context_parallel.md, "The other mixers"):

    sequence_scan               weird, ps: the scan's distributed halos (log-step levels)
    sequence_softmax_attention  ring attention: (K, V) blocks passed around the ring (an
                                all-gather of K and V only with attention dropout)
    sequence_linear_attention   state passing: the exclusive prefix over ranks of the
                                (phi(K)^T V, phi(K)) sums (causal), or their sum over the
                                group (bidirectional)
    sequence_local_attention    halos of K and V: window - 1 positions from the earlier
                                ranks (causal), window // 2 from each side (bidirectional)
    sequence_short_conv         a halo of k - 1 inputs from the earlier ranks
    sequence_positions          token positions in the whole sequence (an all_gather of
                                the shards' real-token counts)
    sequence_length             the whole sequence's length L (an all_gather)

Under the backbone's activation checkpointing, :func:`sharded_checkpoint_context` keeps
the outputs of the ops that exchange the most (the sharded scan, ring attention), so a
block's recomputation sends nothing (:func:`checkpoint_context_fn`: the ``context_fn`` a
block takes now).

A mixer whose sequence mixing has no sharded form (relation, dba, linformer) declares
why at its registration (``whole_sequence=``, :func:`weirdnet.layers.registry.
whole_sequence`), and :func:`weirdnet.train.context_parallel.sharded` refuses it before
the context is entered; its ops (``sequence_relation_mix``, ``sequence_relation_mean``,
``sequence_linformer_attention``, ``sequence_dba_compress``,
``sequence_dba_authors_attention``) refuse in one line inside a context entered without
that check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from .dba import compress_positions, dba_authors_attention
from .linear_attention import (
    LinearAttentionState,
    attend_sums,
    causal_linear_attention,
    key_value_sums,
    linear_attention,
)
from .linformer import linformer_attention
from .local_attention import local_attention
from .packing import per_document, positions_in_document
from .relation import relation_mean, relation_mix
from .ring_attention import ring_softmax_attention
from .rotary import token_positions
from .sequence_shards import (
    exclusive_prefix,
    gather_sequence,
    global_positions,
    group_sum,
    shard_layout,
    window_halo,
)
from .shard_transfers import ShardLayout
from .short_conv import short_conv
from .softmax_attention import (
    merge_heads,
    packed_softmax_attention,
    softmax_attention,
    split_heads,
)
from .weird_scan.context_parallel import HALOS, weird_scan_bidirectional_context_parallel
from .weird_scan.op import scan_op


@dataclass(frozen=True)
class ContextParallel:
    """The process group one sequence is sharded over (None: the default group, which
    must be initialised); group rank r holds the r-th contiguous shard.

    ``halos``: what weird/ps attention's sharded scan keeps for its backward
    (:func:`weirdnet.ops.weird_scan_context_parallel`): "resend" (the default) keeps
    only its inputs and exchanges the forward's halos again in the backward; "keep"
    keeps them (one forward's bytes fewer per step, 3 (2 + log2 P) more values per
    position and channel held).

    ``recompute_exchanges``: under the backbone's activation checkpointing, False (the
    default) keeps the outputs of the sharded scans and ring attentions
    (:func:`weirdnet.ops.sharded_checkpoint_context`), so a block's recomputation sends
    nothing; True recomputes them like every other activation (their messages sent
    again): one value per position and channel less per such layer, one more forward's
    bytes per step."""

    group: Any = None
    halos: str = "resend"
    recompute_exchanges: bool = False

    def __post_init__(self):
        if self.halos not in HALOS:
            raise ValueError(f"ContextParallel halos must be one of {HALOS}, got "
                             f"{self.halos!r}")
        if not isinstance(self.recompute_exchanges, bool):
            raise ValueError(f"ContextParallel recompute_exchanges must be a bool, got "
                             f"{self.recompute_exchanges!r}")

    @property
    def process_group(self):
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("context parallelism needs an initialised torch.distributed "
                             "process group (torch.distributed.init_process_group, or "
                             "torchrun)")
        return dist.group.WORLD if self.group is None else self.group

    @property
    def size(self) -> int:
        """P, the number of shards."""
        return dist.get_world_size(self.process_group)

    def layout(self, x: torch.Tensor) -> ShardLayout:
        """The layout of the sequence whose shard here is x (B, n, ...)."""
        return shard_layout(x.shape[1], self.process_group, x.device)

    def positions(self, mask, layout: ShardLayout, batch: int, device) -> torch.Tensor:
        """(B, n): this shard's token positions in the whole sequence."""
        return global_positions(mask, layout, self.process_group, batch, device)

    def __enter__(self) -> ContextParallel:
        _ENTERED.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ENTERED.remove(self)


_ENTERED: list[ContextParallel] = []
"""The contexts entered, innermost last (a plain list: one read on the one-process path,
which ``torch.compile`` guards as it guards any global)."""


def active() -> ContextParallel | None:
    """The innermost entered :class:`ContextParallel`, or None (one process)."""
    return _ENTERED[-1] if _ENTERED else None


def sequence_op(whole: Callable) -> Callable:
    """Decorator: the decorated ``sharded(cp, *args, **kwargs)`` becomes the sharded form
    of the whole-sequence op ``whole``; the function returned runs ``whole(*args,
    **kwargs)`` on one process and the sharded form while a context is entered."""

    def mark(sharded: Callable) -> Callable:
        @functools.wraps(sharded)
        def op(*args, **kwargs):
            if not _ENTERED:
                return whole(*args, **kwargs)
            return sharded(_ENTERED[-1], *args, **kwargs)

        return op

    return mark


def refuse_sharded(what: str) -> None:
    """ValueError (one line) while a context is entered: ``what`` (e.g. "decoding")
    needs the whole sequence on one process."""
    if _ENTERED:
        raise ValueError(f"{what} does not run context-parallel: run it on one process "
                         "(outside the ContextParallel context)")


def whole_sequence_op(whole: Callable, what: str) -> Callable:
    """``whole`` as a sequence op without a sharded form: inside an entered context it
    refuses in one line (``what`` needs every position of the sequence at once)."""

    @sequence_op(whole)
    def refuse(cp: ContextParallel, *args, **kwargs):
        raise ValueError(f"{what} cannot run context-parallel: it needs every position of "
                         "the sequence on one process")

    return refuse


sequence_relation_mix = whole_sequence_op(relation_mix, "Relation (relation_mix)")
sequence_relation_mean = whole_sequence_op(relation_mean, "Relation (relation_mean)")
sequence_linformer_attention = whole_sequence_op(linformer_attention, "Linformer attention")
sequence_dba_compress = whole_sequence_op(compress_positions, "DBA's compression")
sequence_dba_authors_attention = whole_sequence_op(dba_authors_attention, "DBA's compression")


def _no_documents(doc_ids, op: str) -> None:
    """ValueError for packed documents in an op whose sharded form has none."""
    if doc_ids is not None:
        raise ValueError(f"{op} has no context-parallel form for packed documents "
                         "(doc_ids); only weird/ps attention and short_conv do")


@sequence_op(scan_op)
def sequence_scan(cp: ContextParallel, a, v, log_w, mask, doc_ids, n_causal, backend=""):
    """The weird scan of checked inputs (the custom op :func:`~weirdnet.ops.weird_scan.op.
    scan_op`, channels [0, n_causal) causal, ``backend`` "" picks one); sharded: the scan
    over the group, distributed halos, packed documents included."""
    return weird_scan_bidirectional_context_parallel(
        a, v, log_w, group=cp.process_group, mask=mask, doc_ids=doc_ids, split=n_causal,
        halos=cp.halos)


@sequence_op(softmax_attention)
def sequence_softmax_attention(cp: ContextParallel, q, k, v, *, causal: bool, mask=None,
                               dropout_p: float = 0.0):
    """:func:`~weirdnet.ops.softmax_attention.softmax_attention`; sharded: ring attention
    (:func:`~weirdnet.ops.ring_attention.ring_softmax_attention`), each rank holding its
    own shard's K and V and one travelling block.  The ring has no attention dropout:
    with ``dropout_p > 0`` K and V are all-gathered (the causal form: up to this shard's
    end) and one softmax attention with dropout runs over them."""
    layout, group = shard_layout(q.shape[2], cp.process_group, q.device), cp.process_group
    if dropout_p == 0:
        return ring_softmax_attention(q, k, v, layout, group, causal=causal, mask=mask)
    upto = layout.start + layout.length if causal else layout.total
    kv = gather_sequence(torch.cat([merge_heads(k), merge_heads(v)], -1), layout, group, upto)
    keys, values = (split_heads(t, q.shape[1]) for t in kv.chunk(2, -1))
    real = None if mask is None else gather_sequence(mask, layout, group, upto)
    return softmax_attention(q, keys, values, causal=causal, mask=real, dropout_p=dropout_p)


@sequence_op(linear_attention)
def sequence_linear_attention(cp: ContextParallel, q, k, v, *, causal: bool, mask=None,
                              chunk_size: int = 64, eps: float = 1e-6):
    """:func:`~weirdnet.ops.linear_attention.linear_attention`; sharded: state passing,
    the causal form starting its shard from the exclusive prefix over ranks of the
    shards' (phi(K)^T V, phi(K)) sums, the bidirectional form attending to their sum over
    the group."""
    sums = key_value_sums(k, v, mask)
    if not causal:
        return attend_sums(q, group_sum(sums, cp.process_group), eps)
    layout = shard_layout(q.shape[2], cp.process_group, q.device)
    before = exclusive_prefix(sums, layout, cp.process_group)
    out, _ = causal_linear_attention(q, k, v, mask=mask, eps=eps, chunk_size=chunk_size,
                                     state=LinearAttentionState.from_augmented(before))
    return out


@sequence_op(local_attention)
def sequence_local_attention(cp: ContextParallel, q, k, v, *, window: int, causal: bool,
                             mask=None, dropout_p: float = 0.0):
    """:func:`~weirdnet.ops.local_attention.local_attention`; sharded: halos of K and V
    from the neighbouring ranks (window - 1 positions in front, causal; window // 2 each
    side, bidirectional), the shard's queries run over them."""
    layout, group = shard_layout(q.shape[2], cp.process_group, q.device), cp.process_group
    before, after = (window - 1, 0) if causal else (window // 2,) * 2
    kv, front = window_halo(torch.cat([merge_heads(k), merge_heads(v)], -1), layout,
                            before, after, group)
    keys, values = (split_heads(t, q.shape[1]) for t in kv.chunk(2, -1))
    real = None if mask is None else window_halo(mask, layout, before, after, group)[0]
    n = q.shape[2]
    queries = torch.nn.functional.pad(q, (0, 0, front, keys.shape[2] - front - n))
    out = local_attention(queries, keys, values, window=window, causal=causal, mask=real,
                          dropout_p=dropout_p)
    return out[:, :, front:front + n]


@sequence_op(packed_softmax_attention)
def sequence_packed_softmax_attention(cp: ContextParallel, *args, **kwargs):
    """:func:`~weirdnet.ops.softmax_attention.packed_softmax_attention`; sharded: none."""
    _no_documents(True, "SoftmaxAttention")


@sequence_op(per_document)
def sequence_per_document(cp: ContextParallel, fn, x, mask, doc_ids):
    """:func:`~weirdnet.ops.packing.per_document` (each packed document as a row of a
    padded batch); sharded: none (a document may span the shards)."""
    _no_documents(doc_ids, type(getattr(fn, "__self__", fn)).__name__)


def _conv(x, weight, bias, doc_ids=None):
    return short_conv(x, weight, bias, None, doc_ids=doc_ids)


@sequence_op(_conv)
def sequence_short_conv(cp: ContextParallel, x, weight, bias, doc_ids=None):
    """The causal depthwise convolution of a whole sequence (:func:`~weirdnet.ops.
    short_conv.short_conv`, no decoding state); sharded: its first k - 1 taps read the
    earlier ranks' inputs (and document ids) through a halo."""
    layout, group, before = cp.layout(x), cp.process_group, weight.shape[1] - 1
    wide, front = window_halo(x, layout, before, 0, group)
    docs = None if doc_ids is None else window_halo(doc_ids, layout, before, 0, group)[0]
    return short_conv(wide, weight, bias, None, doc_ids=docs)[:, front:]


def _positions(mask, batch: int, length: int, device, start=None, doc_ids=None):
    if doc_ids is not None:
        return positions_in_document(doc_ids, mask)
    return token_positions(mask, batch, length, device, start)


@sequence_op(_positions)
def sequence_positions(cp: ContextParallel, mask, batch: int, length: int, device,
                       start=None, doc_ids=None):
    """Token positions (B, L): real tokens counted from ``start`` (B,) (default 0), or
    restarting at each packed document (``doc_ids``); sharded: this shard's positions in
    the whole sequence (packed documents have none, nor does decoding, ``start``)."""
    if start is not None:
        refuse_sharded("decoding")
    if doc_ids is not None:
        raise ValueError("learned positions of packed documents (doc_ids) have no "
                         "context-parallel form: use positions='none' or 'rope'")
    layout = shard_layout(length, cp.process_group, device)
    return cp.positions(mask, layout, batch, device)


@sequence_op(lambda x: x.shape[1])
def sequence_length(cp: ContextParallel, x: torch.Tensor) -> int:
    """The length L of the sequence whose part here is x (B, n, ...): n on one process,
    the sum of the shards' lengths when sharded."""
    return cp.layout(x).total


def checkpoint_context_fn():
    """The ``context_fn`` a block's ``torch.utils.checkpoint`` takes now: under an
    entered context that keeps its exchanges' outputs (``recompute_exchanges=False``),
    :func:`sharded_checkpoint_context`, so the recomputation sends nothing; else None
    (the plain checkpoint)."""
    cp = active()
    return None if cp is None or cp.recompute_exchanges else sharded_checkpoint_context


KEPT_BY_CHECKPOINTS = ("weirdnet::weird_scan_cp", "weirdnet::ring_attention")
"""The custom ops whose outputs :func:`sharded_checkpoint_context` keeps."""


def _keep_exchanges(ctx, op, *args, **kwargs):
    """Selective checkpointing's policy: keep the outputs of :data:`KEPT_BY_CHECKPOINTS`,
    recompute the rest."""
    if op.name() in KEPT_BY_CHECKPOINTS:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def sharded_checkpoint_context():
    """A ``context_fn`` for ``torch.utils.checkpoint.checkpoint(fn, ...,
    use_reentrant=False, context_fn=sharded_checkpoint_context)``: selective
    checkpointing that keeps the outputs of the sharded scan
    (:func:`weirdnet.ops.weird_scan_context_parallel`; with ``halos="keep"`` its halos
    too) and of ring attention (:func:`weirdnet.ops.ring_attention.ring_softmax_attention`:
    out and log-sum-exp), so the recomputation of the checkpointed region neither runs
    them nor exchanges their messages again; everything else is recomputed.  Returns the
    pair of contexts that ``checkpoint`` expects."""
    return create_selective_checkpoint_contexts(_keep_exchanges)
