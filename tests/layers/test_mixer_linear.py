"""Linear attention (op, chunk-wise causal form, recurrent step, mixer) against its
float64 reference."""

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
from weirdnet.layers import LinearAttention, LinearAttentionCache, available, build
from weirdnet.ops import (
    LinearAttentionState,
    causal_linear_attention,
    linear_attention,
    linear_attention_reference,
    linear_attention_step,
)


def linear_reference_mix(layer, q, k, v, mask):
    return linear_attention_reference(q, k, v, causal=layer.causal, mask=mask, eps=layer.eps)


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_op_matches_reference(L, causal):
    q, k, v = random_qkv(2, 2, L, 8, seed=L)
    for mask in (None, random_mask(2, L, seed=L)):
        check_against_reference(
            lambda q, k, v, m=mask: linear_attention(q, k, v, causal=causal, mask=m),
            lambda q, k, v, m=mask: linear_attention_reference(q, k, v, causal=causal, mask=m),
            [q, k, v])


@pytest.mark.parametrize("chunk_size", [1, 3, 16, 64, 2000])
def test_chunk_size_does_not_change_the_result(chunk_size):
    q, k, v = random_qkv(2, 3, 100, 5, seed=1)
    mask = random_mask(2, 100, seed=1)
    want = linear_attention_reference(q, k, v, causal=True, mask=mask)
    out = linear_attention(q, k, v, causal=True, mask=mask, chunk_size=chunk_size)
    assert rel_err(out, want) <= 1e-12


def test_state_continues_the_sequence_and_step_is_the_recurrence():
    q, k, v = random_qkv(2, 3, 50, 4, seed=2)
    mask = random_mask(2, 50, seed=2)
    full, total = causal_linear_attention(q, k, v, mask=mask, chunk_size=8)
    # a prefix, then the rest from the prefix's state
    first, state = causal_linear_attention(q[:, :, :20], k[:, :, :20], v[:, :, :20],
                                           mask=mask[:, :20], chunk_size=8)
    rest, state = causal_linear_attention(q[:, :, 20:30], k[:, :, 20:30], v[:, :, 20:30],
                                          mask=mask[:, 20:30], chunk_size=8, state=state)
    outs = [first, rest]
    for t in range(30, 50):
        out_t, state = linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state,
                                             mask_t=mask[:, t])
        outs.append(out_t.unsqueeze(2))
    assert rel_err(torch.cat(outs, 2), full) <= 1e-12
    # the state is S = sum phi(k)^T v and z = sum phi(k) over the real tokens
    fk = (torch.nn.functional.elu(k) + 1) * mask[:, None, :, None]
    assert rel_err(state.kv, fk.transpose(-1, -2) @ v) <= 1e-12
    assert rel_err(state.z, fk.sum(2)) <= 1e-12
    assert rel_err(total.kv, state.kv) <= 1e-12


def test_masked_keys_contribute_nothing_and_empty_prefix_is_zero():
    q, k, v = random_qkv(1, 2, 10, 4, seed=3)
    mask = torch.ones(1, 10, dtype=torch.bool)
    mask[0, :4] = False
    for causal in (True, False):
        out = linear_attention(q, k, v, causal=causal, mask=mask)
        sub = linear_attention(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:], causal=causal)
        assert rel_err(out[:, :, 4:], sub) <= 1e-12
    out = linear_attention(q, k, v, causal=True, mask=mask)
    assert torch.equal(out[:, :, :4], torch.zeros_like(out[:, :, :4]))


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_layer_matches_reference(L, causal):
    torch.manual_seed(L)
    layer = LinearAttention(16, causal=causal, heads=2, chunk_size=16)
    x = torch.randn(2, L, 16)
    check_layer_against_reference(layer, linear_reference_mix, x, random_mask(2, L, L))


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_changes_real_outputs(causal):
    torch.manual_seed(0)
    check_padding_invariance(LinearAttention(16, causal=causal, heads=4, chunk_size=8))


def test_causal_layer_never_sees_the_future():
    torch.manual_seed(1)
    check_causality(LinearAttention(16, causal=True, heads=2, chunk_size=16))


def test_decoding_matches_full_pass():
    torch.manual_seed(2)
    layer = LinearAttention(32, causal=True, heads=4, chunk_size=8)
    check_decoding(layer)
    cache = layer.init_cache(2)
    assert isinstance(cache, LinearAttentionCache)
    assert isinstance(cache.state, LinearAttentionState)
    assert cache.state.kv.shape == (2, 4, 8, 8) and cache.state.z.shape == (2, 4, 8)


@pytest.mark.slow  # child processes
def test_memory_is_linear_in_length():
    check_linear_memory("linear", causal=True)


def test_registry_and_options():
    assert "linear" in available()
    layer = build("linear", 128, causal=False, chunk_size=32, eps=1e-5)
    assert isinstance(layer, LinearAttention) and not layer.causal
    assert layer.heads == 2 and layer.chunk_size == 32 and layer.eps == 1e-5


def test_errors():
    layer = LinearAttention(16, causal=True, heads=2)
    check_input_errors(layer)
    check_cache_errors(layer)
    with pytest.raises(ValueError, match="causal=True"):
        LinearAttention(16, causal=False).init_cache(1)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        LinearAttention(16, chunk_size=0)
    with pytest.raises(ValueError, match="eps must be a positive float"):
        LinearAttention(16, eps=0.0)
    with pytest.raises(TypeError):
        LinearAttention(16, dropout=0.1)
    q, k, v = (t.float() for t in random_qkv(2, 2, 5, 4, seed=0))
    with pytest.raises(ValueError, match="same length"):
        linear_attention(q, k[:, :, :3], v[:, :, :3])
    bad = LinearAttentionState.zeros(2, 2, 4, 3)
    with pytest.raises(ValueError, match="state must hold kv"):
        causal_linear_attention(q, k, v, state=bad)
    with pytest.raises(ValueError, match="state must be a LinearAttentionState"):
        linear_attention_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], state=None)
