"""Who holds which positions of a sharded sequence, and the transfers between them.

A group's ranks hold one sequence in contiguous shards, in group rank order; the rank
with index q holds global positions ``[offset(q), offset(q) + lengths[q])``.  An op
that needs positions another rank holds (the scan's partner ``s`` back or ahead at the
level with shift ``s``: its *halo*; a window's positions in front and behind) gets them
point to point (``isend`` / ``irecv``) from the ranks that own them.

    ShardLayout          who holds which positions, in sequence order
    ShardLayout.plan     the (source, destination, positions) transfers of one scan level
    ShardLayout.plan_window  those of a window (positions in front and behind)
    post_transfers       posts one plan's sends and receives; ``.wait()`` gives what
                         arrived (start_halo: a scan level's; ReadyHalo: one at hand)
    op_group_name        a process group by name, for the custom ops that take one
    count_sent_bytes     a context manager that counts the bytes this rank sends

Every rank computes the same plan from the layout, so no message carries a header.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ShardLayout:
    """Shard lengths in sequence order, and which of them is this rank's.

    lengths: positions of each shard, in sequence order (all >= 1).
    index: this rank's place in that order.
    ranks: the global rank that holds each shard (what point-to-point calls address).
    members: the group rank that holds each shard.
    """

    lengths: tuple[int, ...]
    index: int
    ranks: tuple[int, ...]
    members: tuple[int, ...]

    @property
    def total(self) -> int:
        """L, the global sequence length."""
        return sum(self.lengths)

    def offset(self, q: int) -> int:
        """Global position of shard ``q``'s first position."""
        return sum(self.lengths[:q])

    @property
    def start(self) -> int:
        """Global position of this rank's first position."""
        return self.offset(self.index)

    @property
    def length(self) -> int:
        """n, the positions this rank holds."""
        return self.lengths[self.index]

    def op_args(self) -> tuple[list[int], int, list[int], list[int]]:
        """The layout as a custom op's arguments: (lengths, index, ranks, members)."""
        return list(self.lengths), self.index, list(self.ranks), list(self.members)

    @classmethod
    def from_op_args(cls, lengths, index: int, ranks, members) -> ShardLayout:
        """The layout back from :meth:`op_args`."""
        return cls(tuple(lengths), index, tuple(ranks), tuple(members))

    def needed(self, q: int, shift: int, ahead: bool) -> tuple[int, int]:
        """[lo, hi): the global positions shard ``q``'s partners at ``shift`` occupy on
        other shards (``ahead``: partners at +shift, else at -shift)."""
        off, n = self.offset(q), self.lengths[q]
        if ahead:
            return max(off + n, off + shift), min(self.total, off + n + shift)
        return max(0, off - shift), min(off, off + n - shift)

    def plan(self, shift: int, ahead: bool) -> list[tuple[int, int, int, int]]:
        """Transfers of one level: (source shard, destination shard, lo, hi), sources in
        position order for each destination, so a destination's pieces concatenate."""
        return self._transfers(lambda q: self.needed(q, shift, ahead))

    def plan_window(self, before: int, after: int) -> list[tuple[int, int, int, int]]:
        """Transfers that give every shard the ``before`` positions in front of it and the
        ``after`` positions behind it (clipped to the sequence): a destination's pieces
        concatenate to [its positions in front, its positions behind], in order."""
        def front(q):
            return max(0, self.offset(q) - before), self.offset(q)

        def back(q):
            end = self.offset(q) + self.lengths[q]
            return end, min(self.total, end + after)
        return self._transfers(front) + self._transfers(back)

    def _transfers(self, needed) -> list[tuple[int, int, int, int]]:
        """(src, dst, lo, hi) for the ranges ``needed(dst)`` = [lo, hi), by destination,
        sources in position order."""
        transfers = []
        for dst in range(len(self.lengths)):
            lo, hi = needed(dst)
            for src in range(len(self.lengths)):
                a = max(lo, self.offset(src))
                b = min(hi, self.offset(src) + self.lengths[src])
                if src != dst and a < b:
                    transfers.append((src, dst, a, b))
        return transfers


@dataclass
class SentBytes:
    """Bytes (and messages) this rank sent point to point, by phase."""

    forward: int = 0
    backward: int = 0
    recompute: int = 0  # the forward's halos sent again by a backward that kept none
    ring_forward: int = 0  # ring attention's hops (weirdnet.ops.ring_attention)
    ring_backward: int = 0
    messages: int = 0

    def add(self, phase: str, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        setattr(self, phase, getattr(self, phase) + nbytes)
        self.messages += 1


_COUNTERS: list[SentBytes] = []


@contextlib.contextmanager
def count_sent_bytes():
    """Count the halo bytes this rank sends inside the block::

        with count_sent_bytes() as sent:
            out = sharded_op(x)          # the scan's halos, ring attention's hops, ...
            out.sum().backward()
        sent.forward, sent.backward   # bytes, this rank's own sends
        sent.recompute                # halos="resend": the forward's, sent again
        sent.ring_forward, sent.ring_backward   # softmax layers' ring attention
    """
    counter = SentBytes()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


_OP_GROUPS: dict = {}  # process groups by name: a custom op takes a name, not a group


def op_group_name(group) -> str:
    """The name a custom op takes for ``group`` (registered for :func:`op_group`)."""
    _OP_GROUPS[group.group_name] = group
    return group.group_name


def op_group(name: str):
    """The process group that :func:`op_group_name` named."""
    return _OP_GROUPS[name]


def record_sent(phase: str, tensor: torch.Tensor) -> None:
    """Count ``tensor`` as sent by this rank in ``phase`` (a :class:`SentBytes` field) in
    every open :func:`count_sent_bytes` block."""
    for counter in _COUNTERS:
        counter.add(phase, tensor)


@dataclass
class PendingHalo:
    """One level's posted transfers; :meth:`wait` returns the received halo."""

    works: list = field(default_factory=list)
    pieces: list = field(default_factory=list)
    empty: torch.Tensor | None = None
    _done: torch.Tensor | None = None

    def wait(self) -> torch.Tensor:
        """(C, B, h, D): the halo's C state tensors at its h positions, in order (the
        sends complete too; a second call returns the same tensor)."""
        if self._done is None:
            for work in self.works:
                work.wait()
            self._done = torch.cat(self.pieces, 2) if self.pieces else self.empty
        return self._done


@dataclass
class ReadyHalo:
    """A halo already at hand (the backward's recompute of the forward levels)."""

    halo: torch.Tensor

    def wait(self) -> torch.Tensor:
        return self.halo


def start_halo(state: tuple[torch.Tensor, ...], layout: ShardLayout, shift: int,
               ahead: bool, group, phase: str) -> PendingHalo:
    """Post the sends of this rank's positions that others need at ``shift`` and the
    receives of its own halo.  ``state``: C tensors (B, n, D) of this rank's positions."""
    return post_transfers(state, layout, layout.plan(shift, ahead), group, phase)


def post_transfers(state: tuple[torch.Tensor, ...], layout: ShardLayout, transfers,
                   group, phase: str) -> PendingHalo:
    """Post one plan's transfers (:meth:`ShardLayout.plan`, :meth:`ShardLayout.plan_window`):
    this rank sends its positions [lo, hi) of ``state`` (C tensors (B, n, ...), the
    trailing shape alike on every rank) where it is the source, receives where it is the
    destination; :meth:`PendingHalo.wait` gives (C, B, h, ...) in plan order."""
    me, off = layout.index, layout.start
    B, _, *D = state[0].shape
    ops, pieces = [], []
    for src, dst, lo, hi in transfers:
        if src == me:
            buf = torch.stack([x[:, lo - off:hi - off] for x in state]).contiguous()
            ops.append(dist.P2POp(dist.isend, buf, layout.ranks[dst], group))
            record_sent(phase, buf)
        elif dst == me:
            buf = state[0].new_empty((len(state), B, hi - lo, *D))
            ops.append(dist.P2POp(dist.irecv, buf, layout.ranks[src], group))
            pieces.append(buf)
    works = dist.batch_isend_irecv(ops) if ops else []
    return PendingHalo(works, pieces, state[0].new_empty((len(state), B, 0, *D)))
