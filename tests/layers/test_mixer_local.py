"""Local (sliding-window) attention (blocked op, window cache, mixer) against its float64
reference."""

import pytest
import torch

from helpers.mixers import (
    LENGTHS,
    check_against_reference,
    check_cache_errors,
    check_causality,
    check_decoding,
    check_input_errors,
    check_layer_against_reference,
    check_linear_memory,
    check_padding_invariance,
    random_mask,
    random_qkv,
)
from helpers.numerics import rel_err
from weirdnet.layers import LocalAttention, LocalAttentionCache, available, build
from weirdnet.ops import local_attention, local_attention_reference
from weirdnet.ops.local_attention import local_attention_decode


def local_reference_mix(layer, q, k, v, mask):
    return local_attention_reference(q, k, v, window=layer.window, causal=layer.causal,
                                     mask=mask)


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_op_matches_reference(L, causal):
    q, k, v = random_qkv(2, 2, L, 8, seed=L)
    for window, mask in ((16, None), (16, random_mask(2, L, seed=L)), (5, random_mask(2, L, 1))):
        check_against_reference(
            lambda q, k, v, w=window, m=mask: local_attention(q, k, v, window=w, causal=causal,
                                                              mask=m),
            lambda q, k, v, w=window, m=mask: local_attention_reference(
                q, k, v, window=w, causal=causal, mask=m),
            [q, k, v])


@pytest.mark.parametrize("window", [1, 2, 3, 4, 7, 8, 64, 200])
@pytest.mark.parametrize("causal", [True, False])
def test_window_sizes_and_block_edges(window, causal):
    L = 130
    q, k, v = random_qkv(2, 3, L, 4, seed=window)
    mask = random_mask(2, L, seed=window)
    out = local_attention(q, k, v, window=window, causal=causal, mask=mask)
    want = local_attention_reference(q, k, v, window=window, causal=causal, mask=mask)
    assert rel_err(out, want) <= 1e-12


def test_window_definition():
    """Causal: keys i - w < j <= i.  Non-causal: |i - j| <= w // 2.  Checked by which
    values reach each output (one-hot values, equal scores)."""
    L, w = 12, 4
    q = torch.zeros(1, 1, L, 1, dtype=torch.float64)
    k = torch.zeros_like(q)
    v = torch.eye(L, dtype=torch.float64).view(1, 1, L, L)
    i, j = torch.arange(L).unsqueeze(1), torch.arange(L).unsqueeze(0)
    for causal, band in ((True, (j <= i) & (j > i - w)), (False, (i - j).abs() <= w // 2)):
        out = local_attention(q, k, v, window=w, causal=causal)[0, 0]
        assert torch.equal(out > 0, band)
        assert torch.allclose(out.sum(-1), torch.ones(L, dtype=torch.float64))


def test_decode_op_matches_full_pass():
    q, k, v = random_qkv(2, 2, 300, 4, seed=3)
    mask = random_mask(2, 300, seed=3)
    w, P = 16, 15
    full = local_attention(q, k, v, window=w, causal=True, mask=mask)
    for start, end in ((100, 103), (100, 300)):  # a few tokens; a long prompt (blocked)
        past = [t[:, :, start - P : start] for t in (k, v)]
        out = local_attention_decode(q[:, :, start:end], k[:, :, start:end], v[:, :, start:end],
                                     *past, mask[:, start - P : start], window=w,
                                     mask=mask[:, start:end])
        assert rel_err(out, full[:, :, start:end]) <= 1e-12


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_layer_matches_reference(L, causal):
    torch.manual_seed(L)
    layer = LocalAttention(16, causal=causal, heads=2, window=12)
    x = torch.randn(2, L, 16)
    check_layer_against_reference(layer, local_reference_mix, x, random_mask(2, L, L))


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_changes_real_outputs(causal):
    torch.manual_seed(0)
    check_padding_invariance(LocalAttention(16, causal=causal, heads=4, window=8))


def test_causal_layer_never_sees_the_future():
    torch.manual_seed(1)
    check_causality(LocalAttention(16, causal=True, heads=2, window=16))


@pytest.mark.parametrize("window", [1, 7, 16])
def test_decoding_matches_full_pass(window):
    torch.manual_seed(2)
    layer = LocalAttention(32, causal=True, heads=4, window=window)
    check_decoding(layer, pieces=(5, 30))  # the second chunk is longer than the window
    cache = layer.init_cache(3)
    assert isinstance(cache, LocalAttentionCache)
    assert cache.k.shape == cache.v.shape == (3, 4, window - 1, 8)
    assert cache.mask.shape == (3, window - 1) and not cache.mask.any()


@pytest.mark.slow  # child processes
@pytest.mark.parametrize("causal", [True, False])
def test_memory_is_linear_in_length(causal):
    check_linear_memory("local", causal=causal)


def test_registry_and_defaults():
    assert "local" in available()
    layer = build("local", 256)
    assert isinstance(layer, LocalAttention) and layer.causal
    assert layer.window == 128 and layer.heads == 4


def test_errors():
    layer = LocalAttention(16, causal=True, heads=2, window=4)
    check_input_errors(layer)
    check_cache_errors(layer)
    with pytest.raises(ValueError, match="causal=True"):
        LocalAttention(16, causal=False).init_cache(1)
    with pytest.raises(ValueError, match="window must be a positive int"):
        LocalAttention(16, window=0)
    with pytest.raises(ValueError, match="window must be a positive int"):
        local_attention(*random_qkv(1, 1, 4, 2, seed=0), window=2.0, causal=True)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [1, 4, 128])
def test_an_empty_sequence_gives_an_empty_output(window, causal):
    """L = 0 (issue 35): (B, H, 0, dv), not a reshape error; gradients flow (empty)."""
    q, k, v = (torch.zeros(2, 3, 0, 4, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    for mask in (None, torch.ones(2, 0, dtype=torch.bool)):
        out = local_attention(q, k, v, window=window, causal=causal, mask=mask)
        assert out.shape == (2, 3, 0, 4)
        out.sum().backward()
    assert q.grad.shape == q.shape and v.grad.shape == v.shape
