"""WeirdAttention / PSAttention layers: forms, initialisation, decoding, errors."""

import math

import pytest
import torch

from weirdnet.layers import PSAttention, WeirdAttention, WeirdAttentionCache, available, build
from weirdnet.ops import weird_scan, weird_scan_bidirectional


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("weights", ["cumexp", "exp", "ones"])
@pytest.mark.parametrize("bias", [False, True])
def test_forward_shapes_and_gradients(causal, weights, bias):
    layer = WeirdAttention(32, causal=causal, max_len=128, weights=weights, bias=bias)
    x = torch.randn(3, 100, 32, requires_grad=True)
    mask = torch.rand(3, 100) > 0.2
    y = layer(x, mask)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y.square().mean().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert (layer.proj_a.bias is not None) == bias


def test_layer_is_projections_around_the_scan():
    torch.manual_seed(0)
    for causal in (True, False):
        layer = WeirdAttention(10, causal=causal, max_len=64, bias=True)
        x = torch.randn(2, 33, 10)
        a, v = layer.proj_a(x), layer.proj_v(x)
        log_w = layer.w.cumsum(0)
        o = weird_scan(a, v, log_w) if causal else weird_scan_bidirectional(a, v, log_w, split=5)
        assert torch.allclose(layer(x), layer.proj_o(o), atol=1e-6)


def test_weight_modes():
    layer = WeirdAttention(8, max_len=100, weights="exp")
    assert layer.w.shape == (7, 8)  # ceil(log2 100) levels
    assert torch.equal(layer.log_weights(), layer.w)
    ps = PSAttention(8, max_len=100)
    assert ps.w is None and torch.equal(ps.log_weights(), torch.zeros(7, 8))
    assert ps.weights == "ones"


def test_encoder_form_sees_both_sides_and_decoder_only_the_past():
    torch.manual_seed(1)
    x = torch.randn(1, 40, 16)
    x2 = x.clone()
    x2[:, 30:] += 1.0
    dec = WeirdAttention(16, causal=True, max_len=64)
    assert torch.equal(dec(x)[:, :30], dec(x2)[:, :30])
    enc = WeirdAttention(16, causal=False, max_len=64)
    assert not torch.allclose(enc(x)[:, :30], enc(x2)[:, :30])


def test_papers_initialisation():
    torch.manual_seed(2)
    D, N = 512, 12
    layer = WeirdAttention(D, max_len=4096, n_layers=N, bias=True)
    assert layer.w.shape == (12, D)
    assert abs(layer.proj_a.weight.std().item() - 1 / math.sqrt(D)) < 0.002
    assert abs(layer.proj_v.weight.std().item() - 1 / math.sqrt(D)) < 0.002
    assert abs(layer.w.std().item() - 1.0) < 0.03
    want_o = math.sqrt((1 - 2 / D) / (2 * N * D))
    assert abs(layer.proj_o.weight.std().item() / want_o - 1) < 0.02
    for b in (layer.proj_a.bias, layer.proj_v.bias, layer.proj_o.bias):
        assert torch.count_nonzero(b) == 0


def test_decoding_matches_full_forward():
    torch.manual_seed(3)
    layer = WeirdAttention(24, max_len=64)
    x = torch.randn(2, 50, 24)
    mask = torch.rand(2, 50) > 0.1
    full = layer(x, mask)
    cache = layer.init_cache(batch_size=2)
    assert isinstance(cache, WeirdAttentionCache) and cache.capacity == 64
    y_prompt = layer(x[:, :20], mask[:, :20], cache=cache)
    steps = [layer.step(x[:, t], cache, mask[:, t]) for t in range(20, 50)]
    decoded = torch.cat([y_prompt, torch.stack(steps, 1)], 1)
    assert cache.position == 50
    # the scan itself is bitwise equal; the projections differ only by matmul blocking
    assert torch.allclose(decoded, full, rtol=1e-5, atol=1e-6)


def test_registry_builds_by_name():
    assert {"weird", "ps"} <= set(available())
    layer = build("weird", 16, causal=False, max_len=32, weights="exp")
    assert isinstance(layer, WeirdAttention) and not layer.causal
    assert isinstance(build("ps", 16), PSAttention)
    with pytest.raises(ValueError, match="unknown mixer"):
        build("nope", 16)


def test_layer_errors():
    layer = WeirdAttention(8, max_len=50)
    with pytest.raises(ValueError, match=r"length 51 exceeds max_len=50.*max_len >= 51"):
        layer(torch.randn(1, 51, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(batch, length, 8\)"):
        layer(torch.randn(1, 5, 9))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        layer(torch.randn(5, 8))
    with pytest.raises(ValueError, match="floating-point"):
        layer(torch.ones(1, 5, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="mask must have shape"):
        layer(torch.randn(2, 5, 8), torch.ones(2, 6, dtype=torch.bool))
    cache = layer.init_cache(1, max_len=3)
    for _ in range(3):
        layer.step(torch.randn(1, 8), cache)
    with pytest.raises(ValueError, match="capacity"):
        layer.step(torch.randn(1, 8), cache)
    with pytest.raises(ValueError, match="causal"):
        WeirdAttention(8, causal=False).init_cache(1)
    with pytest.raises(ValueError, match="weights must be one of"):
        WeirdAttention(8, weights="linear")
    with pytest.raises(ValueError, match="max_len"):
        WeirdAttention(8, max_len=0)
    with pytest.raises(ValueError, match="exceeds the layer's max_len"):
        layer.init_cache(1, max_len=51)
