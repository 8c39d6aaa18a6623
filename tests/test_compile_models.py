"""The models under torch.compile(fullgraph=True) and torch.export: no graph break, the
same outputs and gradients as eager, and cached generation through a compiled backbone."""

import copy

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.models.classifier import WeirdNetClassifier
from weirdnet.models.lm import WeirdNetLM
from weirdnet.models.seq2seq import WeirdNetSeq2Seq

pytestmark = [
    pytest.mark.slow,  # torch.compile
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"),
]

VOCAB, L = 40, 24
SMALL = {"dim": 16, "depth": 2, "d_ff": 32, "heads": 2, "max_len": 32, "vocab_size": VOCAB,
         "dropout": 0.0}


def batch(masked: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, L), generator=g)
    mask = None
    if masked:
        mask = torch.ones(3, L, dtype=torch.bool)
        mask[1, 17:] = False
        mask[2, 5:] = False
    return ids, mask


def lm(pattern: str) -> WeirdNetLM:
    torch.manual_seed(0)
    return WeirdNetLM({"backbone": {**SMALL, "pattern": pattern, "causal": True}})


def classifier(pattern: str) -> WeirdNetClassifier:
    torch.manual_seed(0)
    return WeirdNetClassifier({"backbone": {**SMALL, "pattern": pattern, "causal": False},
                               "num_classes": 3})


def seq2seq(cross: str) -> WeirdNetSeq2Seq:
    torch.manual_seed(0)
    return WeirdNetSeq2Seq({"encoder": {**SMALL, "pattern": "A", "causal": False},
                            "decoder": {**SMALL, "pattern": "B", "causal": True},
                            "cross": cross})


def loss_of(model, masked: bool):
    ids, mask = batch(masked)
    if isinstance(model, WeirdNetLM) or getattr(model, "_orig_mod", None).__class__ is \
            WeirdNetLM:
        return model(ids[:, :-1], ids[:, 1:], None if mask is None else mask[:, 1:])
    if isinstance(model, WeirdNetSeq2Seq) or getattr(model, "_orig_mod", None).__class__ is \
            WeirdNetSeq2Seq:
        tgt, _ = batch(masked, seed=1)
        return model(ids, tgt[:, :-1], mask, None, tgt[:, 1:])
    return model(ids, mask, labels=torch.tensor([0, 2, 1]))


def train_step(model, masked: bool):
    """Loss, logits and parameter gradients of one step; then an optimizer step."""
    out = loss_of(model, masked)
    out.loss.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return out.loss.detach(), out.logits.detach(), grads


def assert_compiled_matches_eager(build, masked: bool, backend: str):
    eager_model = build()
    compiled_model = copy.deepcopy(eager_model)
    compiled = torch.compile(compiled_model, fullgraph=True, backend=backend)
    torch._dynamo.reset()
    for _ in range(2):  # two steps: the second runs updated weights through the same graph
        want, got = train_step(eager_model, masked), train_step(compiled, masked)
        assert rel_err(got[0], want[0]) <= 1e-5
        assert rel_err(got[1], want[1]) <= 1e-5
        assert len(got[2]) == len(want[2])
        # All gradients as one vector: some are exactly 0 in exact arithmetic (a bias
        # that a softmax or a norm cancels) and hold only rounding noise.
        assert rel_err(torch.cat([g.flatten() for g in got[2]]),
                       torch.cat([w.flatten() for w in want[2]])) <= 1e-5


# aot_eager (no code generation) keeps the tests fast.  Linear attention's feature map
# F.elu(x) + 1 on a head-split (transposed) view trips a stride mismatch between
# F.elu's fake and real outputs under aot_eager in torch 2.13 ("view size is not
# compatible"); inductor lays the tensors out itself and is what users run.
BACKENDS = {"linear": "inductor"}


@pytest.mark.parametrize("pattern", ["B", "linear", "local", "relation"])
@pytest.mark.parametrize("masked", [False, True])
def test_lm_compiles_without_graph_breaks(pattern, masked):
    assert_compiled_matches_eager(lambda: lm(pattern), masked,
                                  BACKENDS.get(pattern, "aot_eager"))


def test_lm_compiles_with_inductor():
    assert_compiled_matches_eager(lambda: lm("B"), True, "inductor")


@pytest.mark.parametrize("pattern", ["A", "dba", "linformer", "softmax"])
def test_classifier_compiles_without_graph_breaks(pattern):
    assert_compiled_matches_eager(lambda: classifier(pattern), True, "aot_eager")


@pytest.mark.parametrize("cross", ["softmax", "dba"])
def test_seq2seq_compiles_without_graph_breaks(cross):
    assert_compiled_matches_eager(lambda: seq2seq(cross), True, "aot_eager")


def test_export_of_the_lm_gives_the_same_logits():
    model = lm("B").eval()
    ids, mask = batch(True)
    program = torch.export.export(model.backbone, (ids, mask))
    text = str(program.graph)
    assert "weirdnet.weird_scan" in text
    ids2, mask2 = batch(True, seed=3)
    with torch.no_grad():
        assert torch.equal(program.module()(ids2, mask2), model.backbone(ids2, mask2))


def test_export_of_the_lm_and_classifier_forward():
    """The models' output dataclasses are pytree nodes: whole models export."""
    ids, mask = batch(True)
    model = lm("weird,softmax").eval()
    program = torch.export.export(model, (ids,))
    classify = classifier("A").eval()
    program2 = torch.export.export(classify, (ids, mask))
    with torch.no_grad():
        assert torch.equal(program.module()(ids).logits, model(ids).logits)
        assert torch.equal(program2.module()(ids, mask).logits, classify(ids, mask).logits)


@pytest.mark.parametrize("masked", [False, True])
def test_generation_through_a_compiled_backbone(masked):
    """The cached decoding steps of every layer (Weird ring buffers, softmax KV) run
    inside compiled graphs and give the eager model's greedy tokens."""
    model = lm("B")
    ids, mask = batch(masked)
    prompt = ids[:, :8]
    prompt_mask = None
    if masked:  # left padding
        prompt_mask = torch.ones(3, 8, dtype=torch.bool)
        prompt_mask[1, :3] = False
    want = model.generate(prompt, 10, temperature=0.0, prompt_mask=prompt_mask)
    torch._dynamo.reset()
    model.backbone.compile(fullgraph=True, backend="aot_eager")
    got = model.generate(prompt, 10, temperature=0.0, prompt_mask=prompt_mask)
    assert torch.equal(got, want)
