"""The context-parallel switch of the mixers: one sequence in contiguous shards over a
``torch.distributed`` group, each rank running the same model on its own shard.

``Backbone.set_context_parallel(group)`` (or ``mixer.set_context_parallel(
ContextParallel(group))`` on a lone mixer) sets the mixers' ``context_parallel``
attribute; ``Mixer.forward`` then runs the mixer's ``_mix_sharded``, which exchanges what
crosses the shard boundaries (:mod:`weirdnet.ops.sequence_shards`, the weird scan's own
:func:`weirdnet.ops.weird_scan_context_parallel`).  The attribute is None by default: the
single-process path reads one attribute and is otherwise untouched.

What each mixer exchanges (docs/context_parallel.md, "The other mixers"):

    weird, ps   the scan's distributed halos (log-step levels)
    softmax     ring attention: (K, V) blocks passed around the ring (an all-gather of K
                and V only with attention dropout)
    linear      state passing: the exclusive prefix over ranks of the (phi(K)^T V, phi(K))
                sums (causal), or their sum over the group (bidirectional)
    local       halos of K and V: window - 1 positions from the earlier ranks (causal),
                window // 2 from each side (bidirectional)
    short_conv  a halo of k - 1 inputs from the earlier ranks
    relation, dba, linformer   refuse (``cannot_shard`` says why)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .sequence_shards import global_positions, shard_layout
from .weird_scan.context_parallel import HALOS
from .weird_scan.halo import ShardLayout


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

    @staticmethod
    def no_documents(doc_ids, mixer) -> None:
        """ValueError for packed documents in a mixer whose sharded form has none."""
        if doc_ids is not None:
            raise ValueError(f"{type(mixer).__name__} has no context-parallel form for packed "
                             "documents (doc_ids); only weird/ps attention and short_conv do")


def check_can_shard(module, cannot: str | None) -> None:
    """ValueError naming ``module`` and why it cannot run on a sharded sequence."""
    if cannot:
        raise ValueError(f"{type(module).__name__} cannot run context-parallel: {cannot}")
