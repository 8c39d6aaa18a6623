"""Activation checkpointing (issue 33, item 2): a checkpointed pass gives the outputs and
every gradient of the plain pass (float64, dropout on: its draws are replayed), for every
mixer pattern, in "blocks" and "every_k" modes; evaluation and decoding are untouched; the
trainer and ``transformers``' ``gradient_checkpointing_enable`` switch it on."""

import json

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.models import BackboneConfig, LMConfig, WeirdNetLM
from weirdnet.models.backbone import Backbone
from weirdnet.models.classifier import WeirdNetClassifier
from weirdnet.models.dba_authors import DBAuthorsBackbone

PATTERNS = ["A", "B", "weird,softmax,linear,ps,local,relation"]


def _lm(pattern: str, seed: int = 0, dropout: float = 0.1, **backbone) -> WeirdNetLM:
    torch.manual_seed(seed)
    config = BackboneConfig(dim=16, depth=4, heads=2, max_len=64, pattern=pattern,
                            causal=True, dropout=dropout, attn_dropout=dropout,
                            mixer_options={"local": {"window": 4}}, **backbone)
    return WeirdNetLM(LMConfig(config)).double().train()


def _loss_and_grads(model, ids, seed: int = 7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout draws in both passes
    loss = model(ids[:, :-1], ids[:, 1:]).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                           if p.grad is not None}


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("mode,every", [("blocks", 2), ("every_k", 2), ("every_k", 3)])
@pytest.mark.parametrize("length", [1, 2, 7, 33])
def test_gradients_equal_the_plain_pass(pattern, mode, every, length):
    model = _lm(pattern)
    ids = torch.randint(0, 256, (3, length + 1), generator=torch.Generator().manual_seed(1))
    plain_loss, plain = _loss_and_grads(model, ids)
    model.backbone.set_activation_checkpointing(mode, every)
    loss, grads = _loss_and_grads(model, ids)
    assert torch.isfinite(loss) and rel_err(loss, plain_loss) < 1e-12
    assert grads.keys() == plain.keys()
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), name
        assert rel_err(grad, plain[name]) < 1e-10, name


def test_dba_carries_its_state_through_checkpointed_blocks():
    torch.manual_seed(0)
    config = {"backbone": {"dim": 16, "depth": 3, "heads": 2, "max_len": 40, "pattern": "dba",
                           "vocab_size": 20, "dropout": 0.1}, "num_classes": 3}
    model = WeirdNetClassifier(config).double().train()
    assert isinstance(model.backbone, DBAuthorsBackbone)
    tokens = torch.randint(1, 20, (4, 40), generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([0, 1, 2, 1])

    def grads():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(3)
        model(tokens, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.backbone.set_activation_checkpointing("blocks")
    for name, grad in grads().items():
        assert rel_err(grad, plain[name]) < 1e-10, name


def test_checkpointing_keeps_less_for_the_backward():
    """The point of it: fewer saved activations (counted through the autograd graph's
    saved-tensor hooks)."""
    model = _lm("A").float()
    ids = torch.randint(0, 256, (2, 65), generator=torch.Generator().manual_seed(1))

    def saved_bytes() -> int:
        total = 0

        def pack(tensor):
            nonlocal total
            total += tensor.numel() * tensor.element_size()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(ids[:, :-1], ids[:, 1:]).loss.backward()
        return total

    plain = saved_bytes()
    model.backbone.set_activation_checkpointing("blocks")
    assert saved_bytes() < 0.5 * plain


def test_evaluation_and_decoding_do_not_checkpoint(monkeypatch):
    model = _lm("B")
    model.backbone.set_activation_checkpointing("blocks")
    called = []
    monkeypatch.setattr(Backbone, "_checkpointed", lambda *a: called.append(1))
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, 256, (1, 8)))
        model.generate(torch.randint(0, 256, (1, 4)), 3, temperature=0)
    model.train()
    with torch.no_grad():  # no autograd: nothing to recompute
        model(torch.randint(0, 256, (1, 8)))
    assert called == []


def test_bad_modes_are_refused():
    backbone = _lm("A").backbone
    with pytest.raises(ValueError, match="activation checkpointing must be one of"):
        backbone.set_activation_checkpointing("layers")
    with pytest.raises(ValueError, match="every must be an int >= 1"):
        backbone.set_activation_checkpointing("every_k", 0)
    backbone.set_activation_checkpointing("none")
    assert not backbone.gradient_checkpointing


def _config(tmp_path, *overrides):
    from helpers.train import write_config
    from weirdnet.train.config import load_config

    path = write_config(tmp_path, steps=4, eval_every=0, checkpoint_every=0)
    return load_config(path, [f"run.out_dir={json.dumps(str(tmp_path / 'runs'))}",
                              *overrides])


def test_the_trainer_switches_it_on_and_a_run_reads_the_same(tmp_path):
    from weirdnet.train.trainer import train

    results = {}
    for mode in ("none", "blocks"):
        config = _config(tmp_path, f'run.name="ac-{mode}"',
                         f'train.activation_checkpointing="{mode}"')
        results[mode] = train(config, progress_bar=False)["results"]
    assert json.dumps(results["none"], sort_keys=True) == \
        json.dumps(results["blocks"], sort_keys=True)
    with pytest.raises(ValueError, match="train.activation_checkpointing must be one of"):
        _config(tmp_path, 'train.activation_checkpointing="all"')
    with pytest.raises(ValueError, match="train.activation_checkpointing_k"):
        _config(tmp_path, 'train.activation_checkpointing_k=0')


def test_a_run_written_before_a_new_train_key_still_resumes(tmp_path):
    """The sweep store compares a run's saved config as today's code reads it: a key
    added since (at its default) does not make an interrupted cell start afresh."""
    run_matches = pytest.importorskip("weirdnet_lab.sweep.store").run_matches  # the lab's

    config = _config(tmp_path).to_dict()
    written = json.loads(json.dumps(config, default=str))
    del written["train"]["activation_checkpointing"]
    del written["train"]["activation_checkpointing_k"]
    step = tmp_path / "run" / "checkpoints" / "step-00000010"
    step.mkdir(parents=True)
    (step / "train_config.json").write_text(json.dumps(written))
    assert run_matches(tmp_path / "run", config)
    changed = {**config, "train": {**config["train"], "steps": 99}}
    assert not run_matches(tmp_path / "run", changed)


@pytest.mark.slow
def test_checkpointed_blocks_compile_in_one_graph():
    """torch.compile(fullgraph=True) traces the checkpointed blocks (the custom ops
    included) and gives the eager gradients."""
    torch._dynamo.reset()
    model = _lm("B", dropout=0.0).float()  # compiled and eager dropout draw differently
    model.backbone.set_activation_checkpointing("blocks")
    ids = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(1))

    def loss_of(m):
        return m(ids[:, :-1], ids[:, 1:]).loss

    eager_loss, eager = _loss_and_grads(model, ids)
    compiled = torch.compile(loss_of, fullgraph=True)
    model.zero_grad(set_to_none=True)
    loss = compiled(model)
    loss.backward()
    assert rel_err(loss.detach(), eager_loss) < 1e-5
    names = sorted(eager)  # all together: a key bias's gradient is zero but for rounding
    got = torch.cat([dict(model.named_parameters())[n].grad.flatten() for n in names])
    assert rel_err(got, torch.cat([eager[n].flatten() for n in names])) < 1e-4


@pytest.mark.parametrize("mode", ["none", "blocks"])
def test_a_chunked_ffn_gives_the_plain_gradients(mode):
    """``ffn_chunk``: the FFN in checkpointed chunks of the sequence (uneven last chunk).
    Without dropout: chunks draw their dropout masks chunk by chunk, other draws."""
    model = _lm("B", dropout=0.0)
    ids = torch.randint(0, 256, (2, 30), generator=torch.Generator().manual_seed(3))
    plain_loss, plain = _loss_and_grads(model, ids)
    model.backbone.set_activation_checkpointing(mode, ffn_chunk=8)
    loss, grads = _loss_and_grads(model, ids)
    assert rel_err(loss, plain_loss) < 1e-12
    # each parameter against its own gradient, but a key bias's gradient is zero but for
    # rounding (softmax ignores a shift shared by every key), so it is measured against
    # a millionth of the whole gradient instead: its rounding differs between CPUs
    whole = torch.cat([g.flatten() for g in plain.values()]).norm().item()
    for name, grad in grads.items():
        scale = max(plain[name].norm().item(), 1e-6 * whole)
        assert (grad - plain[name]).norm().item() / scale < 1e-10, name
    with pytest.raises(ValueError, match="ffn_chunk must be an int >= 0"):
        model.backbone.set_activation_checkpointing(mode, ffn_chunk=-1)
