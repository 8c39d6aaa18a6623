"""Packed documents through whole models (issue 33, item 1): a packed batch gives every
document the logits and gradients it gets alone (float64), for every mixer pattern and the
Transformer++ options; decoding starts a fresh document on request; the LM data packs
documents and the LM task never predicts across a boundary."""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.data.registry import get
from weirdnet.data.text.lm import ByteLMDataset, document_starts
from weirdnet.models import BackboneConfig, LMConfig, WeirdNetLM
from weirdnet.models.classifier import WeirdNetClassifier
from weirdnet.models.dba_authors import DBAuthorsBackbone
from weirdnet.ops.packing import (
    cu_seqlens_from_doc_ids,
    doc_ids_from_cu_seqlens,
    positions_in_document,
    repack,
    segment_ids,
    unpack,
    unpack_layout,
    within_documents,
)
from weirdnet.train.tasks import LMTask

IDS = [[5] * 4 + [2] + [5] * 11 + [9] * 5,    # a 1-token document; an id seen again
       [0] * 16 + [1] * 5]                     # a start at a power of two
L = 21

MODELS = {
    "weird-a": dict(pattern="A"),
    "weird-b": dict(pattern="B"),
    "transformerpp": dict(pattern="softmax", positions="rope", activation="swiglu", norm="rmsnorm",
                          bias=False),
    "weird-a-pp": dict(pattern="A", positions="none", activation="swiglu", norm="rmsnorm",
                       short_conv=4),
    "every-mixer": dict(pattern="weird,softmax,linear,ps,local,relation",
                        mixer_options={"local": {"window": 4}}, short_conv=3),
}


def _lm(seed=0, **backbone) -> WeirdNetLM:
    torch.manual_seed(seed)
    config = BackboneConfig(dim=16, depth=2, heads=2, max_len=32, causal=True, **backbone)
    return WeirdNetLM(LMConfig(config)).double().eval()


def _documents(row):
    starts = [0] + [i for i in range(1, len(row)) if row[i] != row[i - 1]] + [len(row)]
    return list(zip(starts, starts[1:]))


def _check_each_document_alone(model, ids, doc_ids, mask=None):
    """Logits and parameter gradients of the packed batch against the documents alone."""
    params = [p for p in model.parameters() if p.requires_grad]
    logits = model(ids, mask=mask, doc_ids=doc_ids).logits
    g = torch.randn(logits.shape, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(3))
    if mask is not None:
        g = g * mask[..., None]
    packed = torch.autograd.grad(logits, params, g, allow_unused=True)
    alone = [torch.zeros_like(p) for p in params]
    for b, row in enumerate(doc_ids.tolist()):
        for lo, hi in _documents(row):
            part_mask = None if mask is None else mask[b:b + 1, lo:hi]
            part = model(ids[b:b + 1, lo:hi], mask=part_mask).logits
            real = slice(None) if part_mask is None else part_mask[0]
            assert rel_err(logits[b, lo:hi][real], part[0][real]) < 1e-10
            grads = torch.autograd.grad(part, params, g[b:b + 1, lo:hi], allow_unused=True)
            for acc, grad in zip(alone, grads):
                if grad is not None:
                    acc += grad
    scale = max(float(w.norm()) for w in alone)  # some gradients are 0 in exact arithmetic
    for got, want in zip(packed, alone):
        got = torch.zeros_like(want) if got is None else got
        assert float((got - want).norm()) <= 1e-9 * max(float(want.norm()), 1e-3 * scale)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("positions", ["learned", "rope", "none"])
def test_every_document_is_modelled_alone(name, positions):
    backbone = dict(MODELS[name])
    backbone.setdefault("positions", positions)
    if backbone["positions"] != positions:
        pytest.skip("the model fixes its positions")
    model = _lm(**backbone)
    ids = torch.randint(0, 256, (2, L), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, L, dtype=torch.bool)
    mask[1, 19] = False  # padding inside a document
    _check_each_document_alone(model, ids, torch.tensor(IDS), mask)


def test_dba_with_a_carried_z_runs_each_document_alone():
    torch.manual_seed(0)
    config = {"backbone": {"dim": 16, "depth": 3, "heads": 2, "max_len": 32, "pattern": "dba",
                           "vocab_size": 20}, "num_classes": 3}
    model = WeirdNetClassifier(config).double().eval()
    assert isinstance(model.backbone, DBAuthorsBackbone)
    ids = torch.randint(1, 20, (2, L), generator=torch.Generator().manual_seed(2))
    hidden = model.backbone(ids, doc_ids=torch.tensor(IDS))
    for b, row in enumerate(IDS):
        for lo, hi in _documents(row):
            alone = model.backbone(ids[b:b + 1, lo:hi])
            assert rel_err(hidden[b, lo:hi], alone[0]) < 1e-10


def test_a_peer_runs_each_document_alone():
    pytest.importorskip("transformers")
    from weirdnet_lab.peers import PeerLM  # the lab's transformers peers

    torch.manual_seed(0)
    peer = PeerLM({"peer": "llama", "backbone": {"dim": 32, "depth": 2, "vocab_size": 40,
                                                 "max_len": 32, "heads": 2}}).double().eval()
    ids = torch.randint(0, 40, (2, L), generator=torch.Generator().manual_seed(2))
    _check_each_document_alone(peer, ids, torch.tensor(IDS))


def test_checkpointed_packed_gradients_equal_the_plain_ones():
    model = _lm(pattern="B", short_conv=4).train()
    ids = torch.randint(0, 256, (2, L + 1), generator=torch.Generator().manual_seed(4))
    doc_ids = torch.tensor(IDS)
    grads = []
    for mode in ("none", "blocks"):
        model.backbone.set_activation_checkpointing(mode)
        model.zero_grad()
        torch.manual_seed(5)
        model(ids[:, :-1], ids[:, 1:], doc_ids=doc_ids).loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for plain, checkpointed in zip(*grads):
        assert rel_err(checkpointed, plain) < 1e-12


@pytest.mark.parametrize("name", ["weird-b", "transformerpp", "weird-a-pp", "every-mixer"])
def test_decoding_starts_a_fresh_document_on_request(name):
    model = _lm(**MODELS[name])
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        cache = model.backbone.init_cache(2)
        model.backbone(ids[:, :5], cache=cache)
        cache.start_document(torch.tensor([True, False]))
        got = torch.stack([model.backbone.step(ids[:, t], cache) for t in range(5, 12)], 1)
        fresh = model.backbone(ids[:1, 5:])
        kept = model.backbone(ids[1:])[:, 5:]
    assert rel_err(got[:1], fresh) < 1e-12
    assert rel_err(got[1:], kept) < 1e-12


def test_the_lm_task_never_predicts_across_a_boundary():
    tokens = torch.arange(8).unsqueeze(0)
    doc_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2]])
    targets = within_documents(tokens[:, 1:], doc_ids)
    assert targets.tolist() == [[1, 2, -100, 4, 5, 6, -100]]
    model = _lm(pattern="A", vocab_size=16)
    out, task_targets, counted = LMTask().forward(model, {"tokens": tokens, "doc_ids": doc_ids},
                                                  with_loss=True)
    assert task_targets.tolist() == targets.tolist()
    assert counted.tolist() == [[True, True, False, True, True, True, False]]
    assert torch.isfinite(out.loss)


def test_packing_helpers():
    doc_ids = torch.tensor([[7, 7, 3, 3, 3, 7], [1, 1, 1, 1, 1, 1]])
    assert segment_ids(doc_ids).tolist() == [[0, 0, 1, 1, 1, 2], [0] * 6]
    assert positions_in_document(doc_ids).tolist() == [[0, 1, 0, 1, 2, 0], list(range(6))]
    mask = torch.tensor([[True, True, False, True, True, True], [True] * 6])
    assert positions_in_document(doc_ids, mask)[0].tolist() == [0, 1, 0, 0, 1, 0]
    cu = cu_seqlens_from_doc_ids(doc_ids)
    assert cu.tolist() == [0, 2, 5, 6, 12] and cu.dtype == torch.int32
    assert doc_ids_from_cu_seqlens(torch.tensor([0, 2, 5])).tolist() == [[0, 0, 1, 1, 1]]
    with pytest.raises(ValueError, match="cu_seqlens must start at 0"):
        doc_ids_from_cu_seqlens(torch.tensor([0, 3, 3]))
    x = torch.randn(2, 6, 3)
    layout = unpack_layout(doc_ids)
    assert unpack(x, layout).shape == (4, 6, 3)
    assert torch.equal(repack(unpack(x, layout), layout), x)


def test_lm_data_packs_documents(tmp_path):
    text = b"".join(b"== doc %d ==\n" % i + b"x" * (7 * i + 3) + b"\n" for i in range(6))
    starts = document_starts(text, rb"^== doc")
    assert starts.tolist() == [m for m in range(len(text)) if text.startswith(b"== doc", m)]
    path = tmp_path / "docs.txt"
    path.write_bytes(text)
    data = get("text-file", "train", root=path, seq_len=32, pack=True, doc_pattern="^== doc",
               split_scheme="standard")
    item = data[0]
    assert item["doc_ids"].shape == item["tokens"].shape == (33,)
    start = _start_of(data, item)
    for offset, doc in enumerate(item["doc_ids"].tolist()):
        assert doc == (data.doc_starts <= start + offset).sum() - 1
    with pytest.raises(ValueError, match="pack=True needs documents"):
        get("text-file", "train", root=path, seq_len=32, pack=True)


def _start_of(data: ByteLMDataset, item) -> int:
    """Where the window of ``item`` starts in the split (found by its bytes)."""
    window = item["tokens"].numpy().astype("uint8").tobytes()
    return data.data.tobytes().find(window)


def test_the_built_in_corpora_know_their_documents():
    data = get("python-stdlib", "val", seq_len=64, pack=True)
    assert data.documents > 10
    assert data[0]["doc_ids"].dtype == torch.int64
