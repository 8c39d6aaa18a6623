"""One task object per kind: each trains on its model's own loss, and its evaluation
statistics give that same loss back (one loss, written once, in the model)."""

import pytest
import torch

from weirdnet.models.classifier import WeirdNetClassifier
from weirdnet.models.lm import WeirdNetLM, lm_loss, token_nll
from weirdnet.models.seq2seq import WeirdNetSeq2Seq
from weirdnet.train import tasks

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = {"dim": 16, "depth": 2, "d_ff": 32, "heads": 2, "max_len": 32, "vocab_size": 30}


def _padded(B=3, L=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 30, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1, 7:] = False
    return ids, mask


def _case(kind):
    torch.manual_seed(0)
    ids, mask = _padded()
    if kind == "lm":
        model = WeirdNetLM({"backbone": {**SMALL, "pattern": "B", "causal": True}})
        return model, {"tokens": ids, "tokens_mask": mask}
    if kind == "recall":
        model = WeirdNetLM({"backbone": {**SMALL, "pattern": "B", "causal": True}})
        targets = torch.full_like(ids, -100)
        targets[:, -3:] = ids[:, :3]  # a few asked positions (some of them padding)
        return model, {"tokens": ids, "tokens_mask": mask, "targets": targets}
    if kind == "seq2seq":
        model = WeirdNetSeq2Seq({"encoder": {**SMALL, "pattern": "A", "causal": False},
                                 "decoder": {**SMALL, "pattern": "B", "causal": True}})
        return model, {"src": ids, "src_mask": mask, "tgt": _padded(seed=1)[0],
                       "tgt_mask": mask}
    model = WeirdNetClassifier({"backbone": {**SMALL, "pattern": "A", "causal": False},
                                "num_classes": 4})
    return model, {"tokens": ids, "tokens_mask": mask, "label": torch.tensor([0, 3, 1])}


def test_one_task_object_per_kind():
    assert set(tasks.TASKS) == {"lm", "classification", "retrieval", "seq2seq", "recall"}
    assert tasks.MODEL_CLASSES == {name: t.model_class for name, t in tasks.TASKS.items()}
    assert tasks.best_metric("lm", "auto") == ("loss", True)
    assert tasks.best_metric("seq2seq", "auto") == ("exact_match", False)
    assert tasks.best_metric("recall", "auto") == ("accuracy", False)
    with pytest.raises(KeyError, match="unknown task 'tagging'"):
        tasks.get("tagging")


@pytest.mark.parametrize("kind", ["lm", "seq2seq", "classification", "recall"])
def test_training_loss_is_the_models_and_matches_the_evaluation(kind):
    model, batch = _case(kind)
    task = tasks.get(kind)
    loss, count = task.loss(model, batch)
    sums = task.batch_sums(model, batch)
    assert count == sums["targets"]
    assert loss.item() == pytest.approx(sums["nll"] / sums["targets"], rel=1e-6)
    metrics = task.metrics(sums, type("Info", (), {"encoding": None, "vocab_size": 30})())
    assert metrics["loss"] == pytest.approx(loss.item(), rel=1e-6)


def test_lm_loss_counts_only_real_targets():
    g = torch.Generator().manual_seed(3)
    logits, targets = torch.randn(2, 5, 7, generator=g), torch.randint(0, 7, (2, 5), generator=g)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    nll = token_nll(logits, targets)
    assert torch.allclose(lm_loss(logits, targets, mask), nll[mask].mean())
    ignored = targets.masked_fill(~mask, -100)
    assert torch.allclose(lm_loss(logits, ignored), nll[mask].mean())
    assert lm_loss(logits, targets, torch.zeros_like(mask)) == 0  # nothing counted: 0, no NaN


@pytest.mark.parametrize("tie", [True, False])
def test_the_head_at_selected_positions_is_the_full_heads_rows(tie):
    """logits_at: the same logits, loss and gradients as the full head, in float64."""
    torch.manual_seed(0)
    model = WeirdNetLM({"backbone": {**SMALL, "pattern": "B", "causal": True},
                        "tie_embeddings": tie}).double()
    ids, mask = _padded()
    targets = torch.full_like(ids, -100)
    targets[:, -3:] = ids[:, :3]
    at = (targets != -100) & mask
    full = model(ids, targets.masked_fill(~at, -100), mask)
    full_grads = torch.autograd.grad(full.loss, list(model.parameters()), allow_unused=True)
    part = model(ids, targets, mask, logits_at=at)
    part_grads = torch.autograd.grad(part.loss, list(model.parameters()), allow_unused=True)
    assert part.logits.shape == (int(at.sum()), 30)
    assert torch.allclose(part.logits, full.logits[at], rtol=1e-12, atol=0)
    assert torch.allclose(part.loss, full.loss, rtol=1e-12)
    for want, got in zip(full_grads, part_grads):
        assert (want is None) == (got is None)
        if want is not None:
            assert torch.allclose(got, want, rtol=1e-10, atol=1e-14)
    assert model(ids, logits_at=at).loss is None
    with pytest.raises(ValueError, match="logits_at must be a bool tensor of shape"):
        model(ids, logits_at=at.long())
