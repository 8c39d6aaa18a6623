"""A one-token cached ``Backbone.forward`` is ``Backbone.step`` (issue 35, item 13).

``forward(tokens[:, None], cache=cache)`` in eval mode without autograd takes the path
``step`` takes (fused C blocks for causal Weird-attention on CPU), so the two give
bitwise-equal hidden states at every cache position, for every causal mixer pattern
(structures A and B, the softmax Transformer, ...), in float32 and float64.  Under
autograd, in training mode, with a padded token or past ``FUSED_STEP_MAX_BATCH`` it stays
the PyTorch path, which agrees with the fused one to rounding.
"""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.models import WeirdNetLM
from weirdnet.models.decoding import fused_decode
from weirdnet.ops import block_step

PATTERNS = ["A", "B", "softmax", "ps", "relation", "linear", "local", "weird,relation"]
FUSED = {"A": 3, "B": 2, "ps": 3, "weird,relation": 2}  # fused blocks of 3 (C compiler)
needs_c = pytest.mark.skipif(block_step.unavailable_reason() is not None,
                             reason="no C compiler for the fused step")


def lm(pattern: str, dtype=torch.float64, seed=0) -> WeirdNetLM:
    torch.manual_seed(seed)
    config = {"backbone": {"dim": 32, "depth": 3, "max_len": 64, "pattern": pattern,
                           "causal": True, "vocab_size": 50, "heads": 4,
                           "mixer_options": {"local": {"window": 5}}}}
    return WeirdNetLM(config).to(dtype).eval()


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 50, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("prompt", [1, 6, 17])
def test_one_token_cached_forward_equals_step_bitwise(pattern, dtype, prompt):
    """After a prompt of ``prompt`` tokens (1: the first step is a one-token forward too),
    every later position: forward (with no mask, and with an all-True mask) == step."""
    bb = lm(pattern, dtype).backbone
    x = tokens(2, 40)
    with torch.no_grad():
        by_forward, by_step, by_masked = (bb.init_cache(2, 40) for _ in range(3))
        for cache in (by_forward, by_step, by_masked):
            bb(x[:, :prompt], cache=cache)
        for t in range(prompt, 40):
            got = bb(x[:, t:t + 1], cache=by_forward)
            want = bb.step(x[:, t], by_step)
            masked = bb(x[:, t:t + 1], torch.ones(2, 1, dtype=torch.bool), cache=by_masked)
            assert got.shape == (2, 1, 32) and got.dtype == dtype
            assert torch.equal(got[:, 0], want), f"position {t}"
            assert torch.equal(masked[:, 0], want), f"position {t} (all-True mask)"
    for cache in (by_forward, by_masked):
        assert (cache.steps, cache.lengths.tolist()) == (by_step.steps, by_step.lengths.tolist())


@needs_c
@pytest.mark.parametrize("pattern", sorted(FUSED))
def test_one_token_cached_forward_runs_the_fused_blocks(pattern):
    """The one-token forward makes the cache's fused steps, as ``step`` does."""
    bb = lm(pattern).backbone
    with torch.no_grad():
        cache = bb.init_cache(2, 8)
        bb(tokens(2, 3), cache=cache)
        assert cache.fused is None  # a prompt of several tokens: the PyTorch path
        bb(tokens(2, 1), cache=cache)
    assert cache.fused is not None and sum(f is not None for f in cache.fused) == FUSED[pattern]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("pattern", ["A", "B"])
def test_the_fused_path_agrees_with_the_pytorch_path(pattern, dtype):
    """Under autograd a one-token forward stays the PyTorch path (differentiable, no fused
    steps); it agrees with the fused path to rounding."""
    bb = lm(pattern, dtype).backbone
    x = tokens(3, 30, seed=2)
    slow, fast = bb.init_cache(3, 30), bb.init_cache(3, 30)
    with torch.no_grad():
        bb(x[:, :4], cache=slow), bb(x[:, :4], cache=fast)
    worst = 0.0
    for t in range(4, 30):
        with torch.enable_grad():
            expected = bb(x[:, t:t + 1], cache=slow)
        assert expected.requires_grad
        with torch.no_grad():
            worst = max(worst, rel_err(bb(x[:, t:t + 1], cache=fast), expected.detach()))
    assert slow.fused is None
    assert worst < (1e-12 if dtype == torch.float64 else 1e-5)


def test_a_padded_token_stays_on_the_masked_path():
    """A one-token forward whose mask is False for a row keeps the masked PyTorch path
    (``step`` takes no mask): the same outputs as under autograd, where that path is the
    only one, and that row's real-token count does not advance."""
    bb = lm("A").backbone
    x = tokens(2, 12, seed=3)
    mask = torch.tensor([[True], [False]])
    caches = bb.init_cache(2, 12), bb.init_cache(2, 12)
    outputs = []
    for cache, grad in zip(caches, (False, True)):
        with torch.set_grad_enabled(grad):
            bb(x[:, :5], cache=cache)
            outputs.append(bb(x[:, 5:6], mask, cache=cache).detach())
        assert cache.lengths.tolist() == [6, 5] and cache.steps == 6 and cache.fused is None
    assert torch.equal(*outputs)


def test_left_padded_prompts_continue_alike():
    """After a left-padded prompt, one-token forwards and steps stay bitwise equal."""
    bb = lm("B").backbone
    x = tokens(2, 20, seed=5)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, :3] = False
    with torch.no_grad():
        by_forward, by_step = bb.init_cache(2, 20), bb.init_cache(2, 20)
        bb(x[:, :8], mask, cache=by_forward), bb(x[:, :8], mask, cache=by_step)
        for t in range(8, 20):
            assert torch.equal(bb(x[:, t:t + 1], cache=by_forward)[:, 0],
                               bb.step(x[:, t], by_step))
    assert by_forward.lengths.tolist() == by_step.lengths.tolist() == [20, 17]


def test_large_batches_and_training_mode_take_the_pytorch_path(monkeypatch):
    monkeypatch.setattr(fused_decode, "FUSED_STEP_MAX_BATCH", 2)
    bb = lm("A").backbone
    with torch.no_grad():
        cache = bb.init_cache(3, 4)
        bb(tokens(3, 1), cache=cache)
        assert cache.fused is None and cache.steps == 1
        bb.train()
        cache = bb.init_cache(2, 4)
        bb(tokens(2, 1), cache=cache)
        assert cache.fused is None and cache.steps == 1


def test_generation_from_a_one_token_prompt_equals_forward_decoding():
    """``generate`` (prompt forward, then ``step``) gives the tokens of a greedy loop of
    one-token cached forwards, in float32, where both run the fused blocks."""
    model = lm("A", torch.float32)
    prompt = tokens(2, 1, seed=4)
    out = model.generate(prompt, 20, temperature=0)
    with torch.no_grad():
        cache = model.backbone.init_cache(2, 21)
        seq = prompt
        for _ in range(20):
            hidden = model.backbone(seq[:, -1:], cache=cache)[:, -1]
            seq = torch.cat([seq, model.logits(hidden).argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)
