"""Relation mixer: op and layer against the float64 reference, padding, causality,
decoding, memory growth, errors."""


import pytest
import torch

from helpers.mixers import check_linear_memory
from helpers.numerics import random_padding_mask, rel_err
from weirdnet.layers import build
from weirdnet.layers.relation import Relation, RelationCache
from weirdnet.ops.relation import relation_mix, relation_mix_continue, relation_reference

LENGTHS = [1, 7, 37, 1000]


pytestmark = pytest.mark.usefixtures("one_thread")


def make_hg(B, L, d, seed):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, L, d, dtype=torch.float64, generator=g)
    gg = torch.randn(B, L, d, dtype=torch.float64, generator=g)
    return h, gg, random_padding_mask(B, L, g)


def explicit_layer(layer, x, mask):
    """The layer written out with the float64 reference mix (no folding), in float64."""
    hbar_g = relation_reference(layer.proj_h(x), layer.proj_g(x), mask, layer.causal)
    return layer.proj_o(torch.relu(layer.w_1(hbar_g)))


def float64_copy(layer):
    twin = Relation(layer.dim, causal=layer.causal, inner_dim=layer.inner_dim)
    twin.load_state_dict(layer.state_dict())
    return twin.double()


def make_layer(D, d, causal, seed):
    torch.manual_seed(seed)
    layer = Relation(D, causal=causal, inner_dim=d)
    for b in (layer.proj_h.bias, layer.proj_g.bias):  # the paper's init is 0; test nonzero
        torch.nn.init.normal_(b)
    return layer


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [False, True])
def test_op_values_and_gradients_match_reference(L, causal):
    B, d = 3, 5
    h, g, mask = make_hg(B, L, d, seed=L)
    grad = torch.randn(B, L, d, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (h, g)]
    ref = relation_reference(*leaves, mask, causal)
    ref_grads = torch.autograd.grad(ref, leaves, grad)
    for dtype, tol in [(torch.float64, 1e-12), (torch.float32, 1e-5)]:
        xs = [t.to(dtype).requires_grad_() for t in (h, g)]
        out = relation_mix(*xs, mask, causal)
        assert out.dtype == dtype and out.shape == (B, L, d)
        assert rel_err(out, ref) <= tol
        for got, want in zip(torch.autograd.grad(out, xs, grad.to(dtype)), ref_grads):
            assert rel_err(got, want) <= tol


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [False, True])
def test_layer_values_and_gradients_match_reference(L, causal):
    B, D, d = 3, 12, 10
    layer = make_layer(D, d, causal, seed=L)
    twin = float64_copy(layer)
    g = torch.Generator().manual_seed(100 + L)
    x = torch.randn(B, L, D, dtype=torch.float64, generator=g)
    mask = random_padding_mask(B, L, g)
    grad = torch.randn(B, L, D, dtype=torch.float64, generator=g)

    x64 = x.clone().requires_grad_()
    ref = explicit_layer(twin, x64, mask)
    ref_grads = torch.autograd.grad(ref, [x64, *twin.parameters()], grad)
    for model, dtype, tol in [(twin, torch.float64, 1e-10), (layer, torch.float32, 1e-5)]:
        xs = x.to(dtype).requires_grad_()
        out = model(xs, mask)
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert rel_err(out, ref) <= tol
        grads = torch.autograd.grad(out, [xs, *model.parameters()], grad.to(dtype))
        names = ["x"] + [n for n, _ in model.named_parameters()]
        for name, got, want in zip(names, grads, ref_grads):
            assert rel_err(got, want) <= tol, name


@pytest.mark.parametrize("causal", [False, True])
def test_padding_never_changes_real_outputs(causal):
    B, L, P, D = 3, 40, 13, 16
    layer = make_layer(D, D, causal, seed=1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, L, D, generator=g)
    mask = random_padding_mask(B, L, g)
    mask[-1, :5] = True  # the last row keeps a few real tokens here
    y = layer(x, mask)
    garbage = torch.randn(B, P, D, generator=g) * 1e3
    x_pad = torch.cat([x, garbage], 1)
    mask_pad = torch.cat([mask, torch.zeros(B, P, dtype=torch.bool)], 1)
    y_pad = layer(x_pad, mask_pad)
    assert torch.isfinite(y_pad).all()
    assert rel_err(y_pad[:, :L][mask], y[mask]) <= 1e-6
    # padded positions inside the sequence are free too, whatever they hold (even NaN)
    x_nan = x.clone()
    x_nan[~mask] = float("nan")
    assert rel_err(layer(x_nan, mask)[mask], y[mask]) <= 1e-6


def test_sequence_without_real_token_is_finite_and_zero():
    layer = make_layer(8, 8, False, seed=2)
    x = torch.randn(2, 9, 8, requires_grad=True)
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[0, 3] = True
    for causal in (False, True):
        layer.causal = causal
        y = layer(x, mask)
        assert torch.isfinite(y).all()
        # h̄ = 0 -> W_o ReLU(W_1 0) = 0 (W_1, W_o have no bias)
        assert torch.equal(y[1], torch.zeros_like(y[1]))
        if causal:
            assert torch.equal(y[0, :3], torch.zeros_like(y[0, :3]))
        (gx,) = torch.autograd.grad(y.sum(), x)
        assert torch.isfinite(gx).all() and torch.equal(gx[1], torch.zeros_like(gx[1]))


@pytest.mark.parametrize("level", ["op", "layer"])
def test_causal_never_sees_the_future_bitwise(level):
    B, L, D, t = 2, 300, 16, 123
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, L, D, generator=g)
    mask = torch.rand(B, L, generator=g) > 0.2
    x2, mask2 = x.clone(), mask.clone()
    x2[:, t:] = torch.randn(B, L - t, D, generator=g) * 100
    mask2[:, t:] = ~mask2[:, t:]
    if level == "op":
        run = lambda a, m: relation_mix(a, a.flip(-1), m, causal=True)  # noqa: E731
    else:
        run = make_layer(D, D, True, seed=3)
    assert torch.equal(run(x, mask)[:, :t], run(x2, mask2)[:, :t])
    bidir = make_layer(D, D, False, seed=3)
    assert not torch.allclose(bidir(x, mask)[:, :t], bidir(x2, mask2)[:, :t])


def test_decoding_equals_full_pass():
    B, L, D = 3, 60, 16
    layer = make_layer(D, 12, True, seed=4)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(B, L, D, generator=g)
    mask = torch.rand(B, L, generator=g) > 0.2
    mask[2, :30] = False  # a row whose prompt has no real token
    full = layer(x, mask)
    cache = layer.init_cache(batch_size=B)
    assert isinstance(cache, RelationCache)
    y_prompt = layer(x[:, :25], mask[:, :25], cache=cache)
    steps = [layer.step(x[:, i], cache, mask[:, i]) for i in range(25, L)]
    decoded = torch.cat([y_prompt, torch.stack(steps, 1)], 1)
    assert cache.position == L and torch.equal(cache.count, mask.sum(1))
    # the mixing is exact; the projections differ only by matmul blocking
    assert torch.allclose(decoded, full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_op_continuation_matches_full_pass(dtype):
    h, g, mask = make_hg(2, 50, 4, seed=5)
    h, g = h.to(dtype), g.to(dtype)
    full = relation_mix(h, g, mask, causal=True)
    total = torch.zeros(2, 4, dtype=torch.float64)
    count = torch.zeros(2, dtype=torch.long)
    parts = []
    for a, b in [(0, 20), (20, 21), (21, 50)]:
        out, total, count = relation_mix_continue(h[:, a:b], g[:, a:b], mask[:, a:b],
                                                  total, count)
        parts.append(out)
    got = torch.cat(parts, 1)
    if dtype == torch.float64:
        assert torch.equal(got, full)  # the same sequential float64 sums
    else:
        assert rel_err(got, full) <= 1e-6


def test_dropout_only_in_training():
    torch.manual_seed(6)
    layer = Relation(16, dropout=0.5)
    plain = Relation(16)
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(2, 30, 16)
    layer.eval()
    assert torch.allclose(layer(x), plain(x), atol=1e-6)
    layer.train()
    assert not torch.allclose(layer(x), plain(x), atol=1e-3)
    assert torch.isfinite(layer(x)).all()


def test_registry_and_defaults():
    layer = build("relation", 24, causal=False, inner_dim=8, dropout=0.1)
    assert isinstance(layer, Relation) and not layer.causal and layer.inner_dim == 8
    assert Relation(24).causal is False and Relation(24).inner_dim == 24
    assert build("relation", 24, causal=True).causal
    assert Relation(24).proj_o.bias is None and Relation(24).w_1.bias is None


# --- memory ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_memory_grows_linearly_in_length(causal):
    check_linear_memory("relation", causal=causal, B=8, D=128)


# --- errors ------------------------------------------------------------------------------


def test_layer_errors():
    layer = Relation(8, causal=True)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, length, 8\)"):
        layer(torch.randn(1, 5, 9))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        layer(torch.randn(5, 8))
    with pytest.raises(ValueError, match="floating-point"):
        layer(torch.ones(1, 5, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="mask must have shape"):
        layer(torch.randn(2, 5, 8), torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        layer(torch.randn(2, 5, 8), torch.ones(2, 5))
    with pytest.raises(ValueError, match="inner_dim must be a positive int"):
        Relation(8, inner_dim=0)
    with pytest.raises(ValueError, match="dim must be a positive int"):
        Relation(0)
    with pytest.raises(ValueError, match="dropout must be a probability"):
        Relation(8, dropout=1.0)
    with pytest.raises(ValueError, match="causal"):
        Relation(8).init_cache(1)
    with pytest.raises(ValueError, match="causal"):
        Relation(8)(torch.randn(1, 3, 8), cache=layer.init_cache(1))
    cache = layer.init_cache(2, max_len=3)
    with pytest.raises(ValueError, match="cache was made for batch_size=2, got a batch of 1"):
        layer.step(torch.randn(1, 8), cache)
    layer(torch.randn(2, 3, 8), cache=cache)
    with pytest.raises(ValueError, match="capacity 3 exceeded"):
        layer.step(torch.randn(2, 8), cache)
    with pytest.raises(ValueError, match="cache must come from Relation.init_cache"):
        layer(torch.randn(2, 3, 8), cache=object())
    with pytest.raises(ValueError, match="x_t must have 2 dimensions"):
        layer.step(torch.randn(2, 1, 8), layer.init_cache(2))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        layer.init_cache(0)


def test_op_errors():
    h = torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match="g must have the shape of h"):
        relation_mix(h, torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="same dtype"):
        relation_mix(h, h.double())
    with pytest.raises(ValueError, match="h must have 3 dimensions"):
        relation_mix(h[0], h[0])
    with pytest.raises(ValueError, match="mask must have shape"):
        relation_mix(h, h, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="running state must have shapes"):
        relation_mix_continue(h, h, None, torch.zeros(2, 4, dtype=torch.float64),
                              torch.zeros(2, dtype=torch.long))
