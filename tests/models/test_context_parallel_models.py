"""Whole Weird-Nets on one sequence sharded over 2 and 4 gloo processes, float32: the
output shards put together, and every parameter's gradient summed over the group, equal
the single-process model's within 1e-5 relative; mixers that cannot shard refuse."""

import pytest
import torch

from helpers.context_parallel import spawn
from helpers.context_parallel_models import BASE, ModelCase, build, run_model_cases, single
from helpers.numerics import rel_err
from weirdnet.ops.ring_attention import ring_sent_bytes
from weirdnet_lab.context_parallel.cost import halo_values, step_values

A = dict(pattern="A")
B_ROPE_CONV = dict(pattern="B", positions="rope", short_conv=4)
B_ENCODER = dict(pattern="B", causal=False)
LINEAR_LOCAL = dict(pattern="linear,local", short_conv=3, mixer_options={"local": {"window": 5}})
LINEAR_LOCAL_ENC = dict(pattern="linear,local", causal=False,
                        mixer_options={"local": {"window": 6}})
A_DOCS = dict(pattern="A", positions="none", short_conv=4)
A_NONE = dict(pattern="A", positions="none")  # the scan's halos are all it sends
B_NO_CONV = dict(pattern="B", positions="none")  # one weird, one softmax (ring) layer

TWO = [
    ModelCase("A-L1-group-of-one", (1,), A, members=(0,)),
    ModelCase("A-L2", (1, 1), A, seed=1),
    ModelCase("A-L7", (3, 4), A, masked=True, seed=2),
    ModelCase("A-L1000", (500, 500), A, seed=3),
    ModelCase("A-L1001-masked", (600, 401), A, masked=True, seed=4),
    ModelCase("B-rope-conv-L7", (6, 1), B_ROPE_CONV, masked=True, seed=5),
    ModelCase("B-rope-conv-L1000", (500, 500), B_ROPE_CONV, seed=6),
    ModelCase("B-rope-conv-L1001-masked", (401, 600), B_ROPE_CONV, masked=True, seed=7),
    ModelCase("B-encoder-L7", (3, 4), B_ENCODER, masked=True, seed=8),
    ModelCase("B-encoder-L1001", (501, 500), B_ENCODER, seed=9),
    ModelCase("linear-local-conv-L7", (2, 5), LINEAR_LOCAL, masked=True, seed=10),
    ModelCase("linear-local-conv-L1001", (700, 301), LINEAR_LOCAL, seed=11),
    ModelCase("linear-local-encoder-L9", (4, 5), LINEAR_LOCAL_ENC, masked=True, seed=12),
    ModelCase("A-docs-conv-L301", (150, 151), A_DOCS, docs=True, masked=True, seed=13),
    ModelCase("A-keep-L301-masked", (150, 151), A, masked=True, seed=14, halos="keep"),
    ModelCase("A-checkpointed-resend-L301", (150, 151), A_NONE, seed=15, checkpoint=True),
    ModelCase("A-checkpointed-keep-L301", (150, 151), A_NONE, seed=15, checkpoint=True,
              halos="keep"),
    ModelCase("B-checkpointed-L301", (150, 151), B_NO_CONV, seed=16, checkpoint=True),
    ModelCase("B-checkpointed-recomputed-L301", (150, 151), B_NO_CONV, seed=17,
              checkpoint=True, recompute_exchanges=True),
    ModelCase("refuses-relation", (3, 4), dict(pattern="weird,relation")),
    ModelCase("refuses-dba", (3, 4), dict(pattern="dba", causal=False)),
    ModelCase("refuses-linformer", (3, 4), dict(pattern="linformer", causal=False)),
]
FOUR = [
    ModelCase("A-L7", (1, 2, 3, 1), A, masked=True, seed=20),
    ModelCase("A-L1000", (250, 250, 250, 250), A, seed=21),
    ModelCase("B-rope-conv-L7", (1, 2, 3, 1), B_ROPE_CONV, masked=True, seed=22),
    ModelCase("B-rope-conv-L1001", (1, 300, 500, 200), B_ROPE_CONV, masked=True, seed=23),
    ModelCase("B-encoder-L1001", (400, 1, 300, 300), B_ENCODER, seed=24),
    ModelCase("linear-local-conv-L7", (1, 1, 1, 4), LINEAR_LOCAL, masked=True, seed=25),
    ModelCase("linear-local-encoder-L13", (1, 5, 2, 5), LINEAR_LOCAL_ENC, seed=26),
    ModelCase("A-docs-conv-L101", (1, 50, 25, 25), A_DOCS, docs=True, seed=27),
    ModelCase("A-checkpointed-resend-L1001", (1, 300, 500, 200), A_NONE, masked=True,
              seed=28, checkpoint=True),
]
REFUSALS = {"refuses-relation": "Relation cannot run context-parallel: its per-sequence mean",
            "refuses-dba": "cannot run context-parallel: it compresses the whole sequence",
            "refuses-linformer": "LinformerAttention cannot run context-parallel: it projects"}


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return spawn(2, run_model_cases, TWO, tmp_path_factory.mktemp("cpm2"))


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return spawn(4, run_model_cases, FOUR, tmp_path_factory.mktemp("cpm4"))


def _check(case, results):
    parts = [results[r][case.name] for r in sorted(case.members or range(len(results)))]
    want_o, want_grads = single(case)
    got_o = torch.cat([p["o"] for p in parts], 1)
    assert rel_err(got_o, want_o) <= 1e-5, "output"
    typical = torch.stack([g.norm() for g in want_grads.values()]).median()
    for name, want in want_grads.items():
        got = sum(p["grads"][name] for p in parts if name in p["grads"])
        if want.norm() < 1e-4 * typical:  # zero but for rounding (softmax's key bias)
            assert (got - want).norm() <= 1e-5 * typical, name
        else:
            assert rel_err(got, want) <= 1e-5, name
    assert all(set(p["grads"]) <= set(want_grads) for p in parts)


@pytest.mark.parametrize("case", [c for c in TWO if c.name not in REFUSALS],
                         ids=lambda c: c.name)
def test_two_processes_match_one(two, case):
    _check(case, two)


@pytest.mark.slow
@pytest.mark.parametrize("case", FOUR, ids=lambda c: c.name)
def test_four_processes_match_one(four, case):
    _check(case, four)


def _check_checkpointed_bytes(case, results):
    """Selective checkpointing keeps the scans' and rings' outputs: a checkpointed step
    sends each weird layer's forward halos once (and "resend" once more in the
    backward) and each softmax layer's ring once each way, as by formula."""
    parts = [results[r][case.name] for r in range(len(results))]
    weird, rings = (2, 0) if case.config["pattern"] == "A" else (1, 1)
    unit = case.B * BASE["dim"] * 4 * weird
    twice = case.recompute_exchanges  # the checkpoint's recomputation exchanges again
    steps = step_values(list(case.lengths), case.halos, twice)
    for index, ((f, b), step, p) in enumerate(zip(halo_values(list(case.lengths)), steps,
                                                  parts)):
        again = f * unit if case.halos == "resend" else 0
        assert p["sent"] == ((1 + twice) * f * unit, again, b * unit)
        assert sum(p["sent"]) == step * unit
        ring_f, ring_b = ring_sent_bytes(case.lengths, index, BASE["dim"], case.B,
                                         torch.float32, case.masked)
        # a recomputed ring runs (and sends) its forward once more
        assert p["ring"] == (rings * (1 + twice) * ring_f, rings * ring_b)


@pytest.mark.parametrize("case", [c for c in TWO if c.checkpoint], ids=lambda c: c.name)
def test_checkpointed_step_sends_the_forward_halos_once(two, case):
    _check_checkpointed_bytes(case, two)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in FOUR if c.checkpoint], ids=lambda c: c.name)
def test_checkpointed_step_sends_the_forward_halos_once_on_four(four, case):
    _check_checkpointed_bytes(case, four)


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_mixers_without_a_sharded_form_refuse_in_one_line(two, name):
    for rank in (0, 1):
        message = two[rank][name]
        assert REFUSALS[name] in message and "\n" not in message, message


def test_context_parallel_settings_are_checked_in_one_line():
    from weirdnet.ops import ContextParallel

    assert ContextParallel().halos == "resend" and not ContextParallel().recompute_exchanges
    with pytest.raises(ValueError, match="halos must be one of"):
        ContextParallel(halos="drop")
    with pytest.raises(ValueError, match="recompute_exchanges must be a bool"):
        ContextParallel(recompute_exchanges="yes")


def test_the_context_is_entered_and_left_and_refuses_what_needs_one_process():
    """The op-level context on one process (no group is touched): entered and left as a
    context manager; inside it decoding is refused in one line; check_shardable refuses
    a mixer registered with whole_sequence= and cross-attention blocks, before any
    process group exists."""
    from weirdnet.models import Seq2SeqConfig, WeirdNetLM, WeirdNetSeq2Seq
    from weirdnet.ops import ContextParallel
    from weirdnet.ops.context_parallel import active
    from weirdnet.train.context_parallel import check_shardable

    cp = ContextParallel()
    assert active() is None
    with cp:
        assert active() is cp
        lm = WeirdNetLM({"backbone": {**BASE, "pattern": "A"}})
        with pytest.raises(ValueError, match="^decoding does not run context-parallel"):
            lm.backbone.init_cache(1)
    assert active() is None
    check_shardable(lm)  # weird attention shards
    relation = build(ModelCase("r", (1,), dict(pattern="weird,relation", causal=False)))
    with pytest.raises(ValueError, match="^Relation cannot run context-parallel: its"):
        check_shardable(relation)
    seq2seq = WeirdNetSeq2Seq(Seq2SeqConfig())
    with pytest.raises(ValueError, match="^cross-attention blocks cannot run"):
        check_shardable(seq2seq.decoder)


@pytest.mark.parametrize("pattern, what", [("relation", "Relation"),
                                           ("linformer", "Linformer attention"),
                                           ("dba", "DBA's compression")])
def test_a_whole_sequence_mixer_refuses_inside_a_context_entered_without_the_check(
        pattern, what):
    """A context entered directly (not through ``sharded``) still never lets a mixer
    that needs the whole sequence run on a shard: its op refuses in one line."""
    from weirdnet.ops import ContextParallel

    mixer = build(ModelCase("w", (1,), dict(pattern=pattern, causal=False))).blocks[0].mixer
    x = torch.randn(1, 8, BASE["dim"])
    mixer(x)  # one process: runs
    with ContextParallel(), pytest.raises(ValueError) as err:  # no group is touched
        mixer(x)
    assert str(err.value).startswith(what) and "\n" not in str(err.value)
