"""The fused C decoding step of a Weird-attention block against its PyTorch reference,
and Backbone.step (which uses it) against the cached forward pass."""

import pytest
import torch

from weirdnet.models import WeirdNetLM
from weirdnet.ops import block_step
from weirdnet.ops.block_step import BlockStep, BlockWeights, block_step_reference

pytestmark = pytest.mark.skipif(block_step.unavailable_reason() is not None,
                                reason="no C compiler for the fused step")


def rel_err(out, ref):
    err = ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-300)).item()
    assert err == err, "NaN"
    return err


def weights(D, F, K, dtype, *, biases=True, affine=True, activation="gelu", seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=dtype) * scale

    def maybe(tensor, keep):
        return tensor if keep else None

    return BlockWeights(
        maybe(1 + 0.1 * rand(D), affine), maybe(rand(D), affine), 1e-5,
        rand(D, D, scale=D ** -0.5), maybe(rand(D), biases),
        rand(D, D, scale=D ** -0.5), maybe(rand(D), biases),
        rand(D, D, scale=D ** -0.5), maybe(rand(D), biases),
        torch.cumsum(rand(K, D), 0),
        maybe(1 + 0.1 * rand(D), affine), maybe(rand(D), affine), 1e-6,
        rand(F, D, scale=D ** -0.5), maybe(rand(F), biases),
        rand(D, F, scale=F ** -0.5), maybe(rand(D), biases), activation)


def rings(K, B, D, dtype):
    return [torch.zeros((1 << K) - 1, B, D, dtype=dtype) for _ in range(3)]


def run_both(w, B, L, dtype, seed=1):
    """Step L tokens through the C step and the reference; max relative error and the
    rings of both."""
    gen = torch.Generator().manual_seed(seed)
    K = max(1, (L - 1).bit_length())
    fast, ref = rings(K, B, w.dim, dtype), rings(K, B, w.dim, dtype)
    worst = 0.0
    for t in range(L):
        x = torch.randn(B, w.dim, generator=gen, dtype=dtype)
        expected = block_step_reference(w, x, *ref, t)
        got = x.clone()
        BlockStep(w)(got, *fast, t)
        worst = max(worst, rel_err(got, expected))
    return worst, fast, ref


@pytest.mark.parametrize("L", [1, 2, 3, 7, 1000])
@pytest.mark.parametrize("B,D,F", [(1, 1, 1), (2, 3, 5), (3, 17, 40), (1, 128, 512)])
def test_float64_step_equals_the_reference(L, B, D, F):
    if L == 1000 and D > 17:
        pytest.skip("covered at smaller widths")
    w = weights(D, F, max(1, (L - 1).bit_length()), torch.float64)
    err, fast, ref = run_both(w, B, L, torch.float64)
    assert err < 1e-12
    for a, b in zip(fast, ref):
        assert rel_err(a, b) < 1e-12


@pytest.mark.parametrize("activation", ["gelu", "leaky_relu"])
@pytest.mark.parametrize("biases,affine", [(True, True), (False, False), (True, False)])
def test_options_and_float32(activation, biases, affine):
    w64 = weights(33, 70, 6, torch.float64, biases=biases, affine=affine,
                  activation=activation)
    err, _, _ = run_both(w64, 2, 50, torch.float64)
    assert err < 1e-12
    w32 = weights(33, 70, 6, torch.float32, biases=biases, affine=affine,
                  activation=activation)
    err, _, _ = run_both(w32, 2, 50, torch.float32)
    assert err < 1e-5


def test_bad_inputs_get_clear_errors():
    w = weights(8, 16, 3, torch.float32)
    step = BlockStep(w)
    r = rings(3, 2, 8, torch.float32)
    with pytest.raises(ValueError, match="contiguous torch.float32"):
        step(torch.zeros(2, 9), *r, 0)
    with pytest.raises(ValueError, match="contiguous torch.float32"):
        step(torch.zeros(2, 8, dtype=torch.float64), *r, 0)
    with pytest.raises(ValueError, match="ring buffers"):
        step(torch.zeros(3, 8), *r, 0)
    with pytest.raises(ValueError, match="must have shape"):
        BlockStep(BlockWeights(**{**w.__dict__, "inner_bias": torch.zeros(15)}))
    with pytest.raises(ValueError, match="every weight must be"):
        BlockStep(BlockWeights(**{**w.__dict__, "o_bias": torch.zeros(8, dtype=torch.float64)}))
    with pytest.raises(ValueError, match="activation"):
        BlockStep(BlockWeights(**{**w.__dict__, "activation": "relu"}))
    with pytest.raises(ValueError, match="float32 or float64 CPU"):
        BlockStep(weights(8, 16, 3, torch.float16))


def lm(pattern, dtype, activation="gelu"):
    torch.manual_seed(0)
    config = {"backbone": {"dim": 24, "depth": 3, "d_ff": 40, "max_len": 300, "heads": 4,
                           "pattern": pattern, "causal": True, "vocab_size": 50,
                           "activation": activation}}
    return WeirdNetLM(config).to(dtype).eval()


@pytest.mark.parametrize("pattern", ["A", "B", "ps"])
def test_backbone_step_equals_the_cached_forward(pattern):
    """Backbone.step (fused Weird blocks, PyTorch softmax blocks) against forward with a
    cache, token by token after a prompt, in float64: same hidden states."""
    model = lm(pattern, torch.float64)
    bb = model.backbone
    x = torch.randint(0, 50, (3, 260), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        slow, fast = bb.init_cache(3, 260), bb.init_cache(3, 260)
        bb(x[:, :5], cache=slow), bb(x[:, :5], cache=fast)
        for t in range(5, 260):
            with torch.enable_grad():  # a one-token no-grad forward would take step's path
                expected = bb(x[:, t:t + 1], cache=slow)[:, 0].detach()
            got = bb.step(x[:, t], fast)
            assert rel_err(got, expected) < 1e-12
    assert fast.fused is not None
    assert sum(f is not None for f in fast.fused) == {"A": 3, "B": 2, "ps": 3}[pattern]
    assert (fast.steps, fast.lengths.tolist()) == (slow.steps, slow.lengths.tolist())


def test_float32_generation_equals_the_full_pass():
    """Greedy float32 decoding through the fused steps: every token is the argmax of a full
    forward over the sequence so far."""
    for pattern, activation in (("A", "gelu"), ("B", "leaky_relu")):
        model = lm(pattern, torch.float32, activation)
        out = model.generate(torch.randint(0, 50, (2, 7)), 40, temperature=0)
        with torch.no_grad():
            full = model(out[:, :-1]).logits[:, 6:].argmax(-1)
        assert torch.equal(full, out[:, 7:])


def test_step_falls_back_under_autograd_and_checks_its_inputs():
    model = lm("A", torch.float64)
    bb = model.backbone
    cache = bb.init_cache(2, 4)
    out = bb.step(torch.tensor([1, 2]), cache)  # grad enabled: the PyTorch path
    assert out.requires_grad and cache.fused is None and cache.steps == 1
    with pytest.raises(ValueError, match="shape \\(2,\\)"):
        bb.step(torch.tensor([[1, 2]]), cache)
    with torch.no_grad():
        for _ in range(3):
            bb.step(torch.tensor([1, 2]), cache)
        with pytest.raises(ValueError, match="all are used"):
            bb.step(torch.tensor([1, 2]), cache)


def test_reorder_between_steps():
    """Beam-search reordering of the cache between fused steps."""
    model = lm("A", torch.float64)
    bb = model.backbone
    x = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        fast, slow = bb.init_cache(3, 12), bb.init_cache(3, 12)
        for t in range(6):
            bb.step(x[:, t], fast)
            with torch.enable_grad():  # the PyTorch path (no-grad would fuse it too)
                bb(x[:, t:t + 1], cache=slow)
        index = torch.tensor([2, 0, 0])
        fast.reorder(index), slow.reorder(index)
        for t in range(6, 12):
            with torch.enable_grad():
                expected = bb(x[index, t:t + 1], cache=slow)[:, 0].detach()
            assert rel_err(bb.step(x[index, t], fast), expected) < 1e-12


def test_large_batches_take_the_pytorch_path(monkeypatch):
    from weirdnet.models.decoding import fused_decode

    monkeypatch.setattr(fused_decode, "FUSED_STEP_MAX_BATCH", 2)
    bb = lm("A", torch.float64).backbone
    with torch.no_grad():
        cache = bb.init_cache(3, 4)
        bb.step(torch.tensor([1, 2, 3]), cache)
    assert cache.fused is None and cache.steps == 1
