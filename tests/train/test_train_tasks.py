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
