"""Bytes each rank sends for a context-parallel scan, by formula (docs/context_parallel.md).

Counts are *values per batch row and channel*; bytes = values x B x D x itemsize.
Positions are in scan order (the anti-causal scan reverses the shards' order).

    halo_values          (a) the log-step scan with distributed halos, implemented in
                         weirdnet.ops.weird_scan.context_parallel: exact per rank, any shard lengths
    step_values          (a) per training step, for halos="keep" or "resend"
    halo_values_equal    (a) in closed form for P equal shards of S = 2^c positions
    chunk_values         (b) the chunk factorization (not implemented; its derivation)
    ring_values          (c) ring attention's K and V (and dK, dV) of width D each
    cost_table           the three side by side for P = 2 .. 64
"""

from __future__ import annotations

from weirdnet.ops import levels_needed

STATE = 3  # (m, h, u) or the adjoint's (bm, b1, b2): values per position and channel


def _forward_positions(lengths: list[int]) -> list[int]:
    """Positions each shard sends in the forward: at every level with shift s < L, its
    positions j whose partner j + s lies on a later shard (j + s < L)."""
    L = sum(lengths)
    sent, off = [], 0
    for n in lengths:
        count = 0
        for k in range(levels_needed(L)):
            s = 1 << k
            # j in [off, off + n) with j + s >= off + n (another shard) and j + s < L
            count += max(0, min(off + n, L - s) - max(off, off + n - s))
        sent.append(count)
        off += n
    return sent


def halo_values(lengths) -> list[tuple[int, int]]:
    """(forward, backward) values per row and channel that each shard (scan order) sends.

    The forward sends a 3-value state per position; the backward sends the adjoint's
    3 values to the *earlier* shards, the mirror image (it recomputes the forward
    levels from the halos the forward kept, without sending them again)."""
    lengths = list(lengths)
    fwd = _forward_positions(lengths)
    bwd = _forward_positions(lengths[::-1])[::-1]
    return [(STATE * f, STATE * b) for f, b in zip(fwd, bwd)]


def step_values(lengths, halos: str = "keep", recomputed: bool = False) -> list[int]:
    """Values per row and channel each shard (scan order) sends in one training step:
    forward + backward with ``halos="keep"``; with "resend" the backward sends the
    forward's halos once more; with ``recomputed`` an activation checkpoint's
    recomputation runs the forward (and sends its halos) once more too.  Without
    ``recomputed`` this is also a checkpointed step under
    :func:`weirdnet.ops.sharded_checkpoint_context`, which keeps the scan's output."""
    if halos not in ("keep", "resend"):
        raise ValueError(f"halos must be 'keep' or 'resend', got {halos!r}")
    forwards = 1 + (halos == "resend") + bool(recomputed)
    return [f * forwards + b for f, b in halo_values(lengths)]


def halo_values_equal(P: int, S: int) -> int:
    """The largest forward count of :func:`halo_values` for P >= 2 shards of S = 2^c:
    3 (2S - 1 + S floor(log2(P - 1))), sent by the first shard (levels s <= S send s
    positions each; the levels s = 2^j S < (P - 1) S + 1 send the whole shard)."""
    if P < 2 or S < 1 or S & (S - 1):
        raise ValueError(f"the closed form needs P >= 2 and S a power of two, got {P}, {S}")
    return STATE * (2 * S - 1 + S * ((P - 1).bit_length() - 1))


def chunk_values(P: int, S: int) -> tuple[int, int]:
    """(forward, backward) of the chunk factorization, for the rank that sends most.

    With S = 2^c and a_{qS + r} = a_lo(r) a_hi(q): the chunk-level scan over P positions
    of S x D channels in R = ceil(log2 P) rounds (round 0 sends the raw (A, V), 2 values;
    later rounds a 3-value state), then Z_{p-1} from p - 1 (3 values); the backward is
    the transpose: R rounds of adjoint states and Z_{p-1}'s adjoint back (3 values each).
    """
    R = max(1, (P - 1).bit_length())
    return S * (2 + STATE * (R - 1) + STATE), S * STATE * (R + 1)


def ring_values(P: int, S: int) -> tuple[int, int]:
    """(forward, backward) of ring attention on the same shards, K and V of width D:
    P - 1 hops of (K, V) forward; P - 1 hops of (K, V) and (dK, dV) backward."""
    return 2 * (P - 1) * S, 4 * (P - 1) * S


def cost_table(Ps=(2, 3, 4, 5, 8, 16, 32, 64), S: int = 1 << 12) -> list[dict]:
    """One row per P: each method's largest per-rank forward and per-step (forward +
    backward) count, in units of S values (one shard's worth of one value per channel)."""
    rows = []
    for P in Ps:
        per_rank = halo_values([S] * P)
        fb = [f + b for f, b in per_rank]
        cf, cb = chunk_values(P, S)
        rf, rb = ring_values(P, S)
        rows.append(dict(P=P, halo_fwd=max(f for f, _ in per_rank) / S, halo_step=max(fb) / S,
                         chunk_fwd=cf / S, chunk_step=(cf + cb) / S, ring_fwd=rf / S,
                         ring_step=(rf + rb) / S))
    return rows
