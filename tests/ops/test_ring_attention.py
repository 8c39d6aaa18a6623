"""Ring attention over a gloo process group (2 and 4 CPU processes) against one process.

O, dQ, dK and dV are within 1e-12 (float64) or 1e-5 (float32) relative of the float64
single-process reference on the whole sequence; causal and bidirectional; shards of
unequal lengths (length 1 included); padding masks with a wholly padded shard and queries
that see no real key; scores of magnitude ~50; the fused CPU kernel and the matmul
kernel.  Each rank sends the bytes of ``ring_sent_bytes`` and saves only its shard's
tensors for the backward.  One spawn per group size runs every case
(helpers/ring_attention.py).
"""

import pytest
import torch

from helpers.context_parallel import ranks_of, spawn
from helpers.numerics import rel_err
from helpers.ring_attention import RingCase, inputs, run_ring_cases
from weirdnet.ops.ring_attention import ring_sent_bytes, ring_softmax_attention
from weirdnet.ops.shard_transfers import ShardLayout
from weirdnet.ops.softmax_attention import softmax_attention, softmax_attention_reference

F32 = "float32"
TWO = [
    RingCase("L1-group-of-one", (1,), members=(0,)),
    RingCase("L2-causal", (1, 1), seed=1),
    RingCase("L2-bidirectional-masked", (1, 1), causal=False, masked=True, seed=2),
    RingCase("L7-causal-masked", (3, 4), masked=True, seed=3),
    RingCase("L7-bidirectional-masked", (6, 1), causal=False, masked=True, seed=4),
    RingCase("L1000-causal", (500, 500), seed=5),
    RingCase("L1000-bidirectional-masked", (700, 300), causal=False, masked=True, seed=6),
    RingCase("L1001-causal-masked-wide", (1000, 1), masked=True, spread=7.0, seed=7),
    RingCase("L1001-bidirectional-wide", (1, 1000), causal=False, spread=7.0, seed=8),
    RingCase("L9-causal-scale", (4, 5), scale=0.7, seed=9),
    RingCase("f32-L1000-causal-masked", (501, 499), masked=True, dtype=F32, seed=10),
    RingCase("f32-L1001-bidirectional", (1000, 1), causal=False, dtype=F32, seed=11),
    RingCase("f32-L101-causal-wide", (50, 51), spread=7.0, dtype=F32, seed=12),
    RingCase("matmul-L7-causal-masked", (3, 4), masked=True, kernel="matmul", seed=13),
    RingCase("matmul-L101-bidirectional-masked-chunks", (50, 51), causal=False,
             masked=True, kernel="matmul", budget=1000, seed=14),
    RingCase("matmul-L101-causal-wide-chunks", (51, 50), spread=7.0, kernel="matmul",
             budget=1000, seed=15),
    RingCase("f32-matmul-L101-causal-masked", (50, 51), masked=True, dtype=F32,
             kernel="matmul", seed=16),
    RingCase("bf16-L101-causal-masked", (51, 50), masked=True, dtype="bfloat16", seed=18),
    RingCase("f16-matmul-L101-bidirectional-masked", (50, 51), causal=False, masked=True,
             dtype="float16", kernel="matmul", seed=19),
    RingCase("layer-dropout-causal", (5, 4), layer="dropout", seed=17),
]
FOUR = [
    RingCase("L7-causal-masked", (1, 2, 3, 1), masked=True, seed=20),
    RingCase("L7-bidirectional-masked", (1, 2, 3, 1), causal=False, masked=True, seed=21),
    RingCase("L1000-causal", (250, 250, 250, 250), seed=22),
    RingCase("L1000-bidirectional", (1, 300, 500, 199), causal=False, seed=23),
    RingCase("L1001-causal-masked-wide", (400, 1, 300, 300), masked=True, spread=7.0,
             seed=24),
    RingCase("L1001-bidirectional-masked-wide", (300, 300, 400, 1), causal=False,
             masked=True, spread=7.0, seed=25),
    RingCase("f32-L1001-causal-masked", (1, 300, 500, 200), masked=True, dtype=F32,
             seed=26),
    RingCase("matmul-L13-causal-masked", (1, 5, 2, 5), masked=True, kernel="matmul",
             seed=27),
    RingCase("matmul-L13-bidirectional", (5, 1, 5, 2), causal=False, kernel="matmul",
             seed=28),
    RingCase("L5-subgroup-masked", (2, 3), members=(1, 3), masked=True, seed=29),
    RingCase("memory-L2000-causal-masked", (500, 500, 500, 500), masked=True, dtype=F32,
             seed=30),
]


CASES = {2: TWO, 4: FOUR}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """ran(P): each rank's results of the P-process cases (one spawn per P, on first use)."""
    done = {}

    def results(world: int) -> list[dict]:
        if world not in done:
            done[world] = spawn(world, run_ring_cases, CASES[world],
                                tmp_path_factory.mktemp(f"ring{world}"))
        return done[world]
    return results


def _single(case, reference: bool):
    """(O, dQ, dK, dV) on the whole sequence from the case's (rounded) inputs: the float64
    reference, or ``softmax_attention`` in the case's dtype."""
    q, k, v, mask, grad = inputs(case)
    if reference:
        q, k, v, grad = (x.double() for x in (q, k, v, grad))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    factor = 1.0 if case.scale is None else case.scale * case.d ** 0.5
    attend = softmax_attention_reference if reference else softmax_attention
    out = attend(q * factor, k, v, causal=case.causal, mask=mask)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


def _check(case, results):
    """Each of O, dQ, dK, dV within 1e-12 (float64) or 1e-5 (float32) of the reference;
    float32 with scores of ~50 (where one process's float32 SDPA is itself ~1e-5 off),
    float16 and bfloat16: within twice the single-process op's own error.  The bytes each
    rank sent are ``ring_sent_bytes``."""
    parts = ranks_of(case, results)
    want = _single(case, reference=True)
    tols = [1e-12 if case.dtype == "float64" else 1e-5] * 4
    if case.dtype != "float64" and (case.spread > 1 or case.dtype != "float32"):
        tols = [max(1e-5, 2 * rel_err(a, b)) for a, b in zip(_single(case, False), want)]
    for name, ref, tol in zip(("o", "dq", "dk", "dv"), want, tols, strict=True):
        got = torch.cat([p[name] for p in parts], 2)
        assert got.dtype == getattr(torch, case.dtype), name
        assert torch.isfinite(ref).all() and torch.isfinite(got).all(), name
        assert rel_err(got, ref) <= tol, (name, rel_err(got, ref), tol)
    for index, p in enumerate(parts):
        assert (p["forward"], p["backward"]) == ring_sent_bytes(
            case.lengths, index, case.H * case.d, case.B, getattr(torch, case.dtype),
            case.masked)


OP_TWO = [c for c in TWO if c.layer is None]
OP_FOUR = [c for c in FOUR if not c.name.startswith("memory")]


@pytest.mark.parametrize("case", OP_TWO, ids=lambda c: c.name)
def test_two_processes_match_one(ran, case):
    _check(case, ran(2))


@pytest.mark.slow  # the second spawn, of four processes (two stay in the fast tier)
@pytest.mark.parametrize("case", OP_FOUR, ids=lambda c: c.name)
def test_four_processes_match_one(ran, case):
    _check(case, ran(4))


def test_a_query_that_sees_no_real_key_gets_zero_as_on_one_process():
    """The reference's convention is the op's: 0, not NaN (the ring matches it above)."""
    q, k, v, mask, _ = inputs(RingCase("m", (3, 4), masked=True))
    out = softmax_attention(q, k, v, causal=True, mask=mask)
    assert (out[0, :, :3] == 0).all() and (out[-1] == 0).all()
    assert torch.isfinite(out).all()


@pytest.mark.slow  # the four-process spawn
def test_the_backward_saves_only_this_ranks_shard(ran):
    """Saved for the backward: q, k, v, out, lse and the mask of this rank's 500 positions
    (at most 1.5x q, k and v's bytes), never a tensor of more positions than the shard."""
    case = next(c for c in FOUR if c.name.startswith("memory"))
    _check(case, ran(4))
    for index, p in enumerate(ranks_of(case, ran(4))):
        n = case.lengths[index]
        qkv = 3 * case.B * case.H * n * case.d * 4
        assert p["saved_positions"] == n
        assert qkv < p["saved"] <= 1.5 * qkv, (p["saved"], qkv)


def test_with_dropout_the_layer_falls_back_to_the_all_gather(ran):
    """Training with dropout: no point-to-point bytes (the all-gather is not counted);
    eval: the ring's bytes."""
    case = next(c for c in TWO if c.layer == "dropout")
    for index, p in enumerate(ranks_of(case, ran(2))):
        assert p["train"] == (0, 0, True)
        sent = ring_sent_bytes(case.lengths, index, case.H * case.d, case.B, torch.float32,
                               False)
        assert p["eval"] == (*sent, True)


def test_bad_arguments_raise_before_any_message():
    layout = ShardLayout((3, 4), 0, (0, 1), (0, 1))
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="the layout gives this rank 3"):
        ring_softmax_attention(q, q, q, layout, None, causal=True)
    with pytest.raises(ValueError, match="v of k's shape"):
        ring_softmax_attention(q, q, q[..., :4], layout, None, causal=True)
