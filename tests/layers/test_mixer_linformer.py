"""Linformer (op and mixer) against its float64 reference."""

import math

import pytest
import torch

from helpers.mixers import (
    LENGTHS,
    check_against_reference,
    check_input_errors,
    check_layer_against_reference,
    check_linear_memory,
    check_padding_invariance,
    random_mask,
    random_qkv,
)
from helpers.numerics import rel_err
from weirdnet.layers import LinformerAttention, available, build
from weirdnet.ops import linformer_attention, linformer_reference

MAX_LEN = 1024


def linformer_reference_mix(layer, q, k, v, mask):
    return linformer_reference(q, k, v, layer.proj_seq_k, layer.proj_seq_v, mask=mask)


def random_projections(k: int, max_len: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(k, max_len, dtype=torch.float64, generator=g) / math.sqrt(max_len)
            for _ in "EF"]


@pytest.mark.parametrize("L", LENGTHS)
def test_op_matches_reference(L):
    q, k, v = random_qkv(2, 2, L, 8, seed=L)
    e, f = random_projections(32, MAX_LEN, seed=L)
    for mask in (None, random_mask(2, L, seed=L)):
        check_against_reference(
            lambda *t, m=mask: linformer_attention(*t, mask=m),
            lambda *t, m=mask: linformer_reference(*t, mask=m),
            [q, k, v, e, f])


def test_short_input_uses_first_columns_like_zero_padding():
    """n < max_len: the same output as the sequence zero-padded to max_len (with the pad
    rows real, i.e. unmasked zeros) -- and trailing padded tokens change nothing."""
    q, k, v = random_qkv(2, 2, 30, 4, seed=1)
    e, f = random_projections(8, 50, seed=1)
    out = linformer_attention(q, k, v, e, f)

    def pad(t):
        return torch.cat([t, t.new_zeros(2, 2, 20, 4)], 2)

    padded = linformer_attention(pad(q), pad(k), pad(v), e, f)
    assert rel_err(padded[:, :, :30], out) <= 1e-12
    mask = torch.ones(2, 50, dtype=torch.bool)
    mask[:, 30:] = False
    junk = torch.randn(2, 2, 20, 4, dtype=torch.float64)
    masked = linformer_attention(*(torch.cat([t, junk], 2) for t in (q, k, v)), e, f, mask=mask)
    assert rel_err(masked[:, :, :30], out) <= 1e-12


@pytest.mark.parametrize("L", LENGTHS)
def test_layer_matches_reference(L):
    torch.manual_seed(L)
    layer = LinformerAttention(16, causal=False, heads=2, k=32, max_len=MAX_LEN)
    x = torch.randn(2, L, 16)
    check_layer_against_reference(layer, linformer_reference_mix, x, random_mask(2, L, L))


def test_padding_never_changes_real_outputs():
    torch.manual_seed(0)
    check_padding_invariance(LinformerAttention(16, heads=4, k=16, max_len=64))


@pytest.mark.slow  # child processes
def test_memory_is_linear_in_length():
    check_linear_memory("linformer", causal=False, max_len=8192)


def test_registry_defaults_and_initialisation():
    assert "linformer" in available()
    layer = build("linformer", 128, causal=False)
    assert isinstance(layer, LinformerAttention)
    assert (layer.k, layer.max_len, layer.heads) == (256, 4096, 2)
    assert layer.proj_seq_k.shape == layer.proj_seq_v.shape == (256, 4096)
    bound = math.sqrt(6 / (256 + 4096)) / math.sqrt(2)  # Xavier-uniform, gain 1/sqrt(2)
    assert layer.proj_seq_k.abs().max() <= bound
    assert abs(layer.proj_seq_k.std().item() / (bound / math.sqrt(3)) - 1) < 0.01


def test_errors():
    layer = LinformerAttention(16, heads=2, k=8, max_len=40)
    check_input_errors(layer)
    with pytest.raises(ValueError, match=r"length 41 exceeds max_len=40.*max_len >= 41"):
        layer(torch.randn(1, 41, 16))
    with pytest.raises(ValueError, match="not causal"):
        LinformerAttention(16, causal=True)
    with pytest.raises(ValueError, match="not causal"):
        build("linformer", 16)  # build's default is causal=True
    with pytest.raises(ValueError, match="causal=True"):
        layer.init_cache(1)
    with pytest.raises(ValueError, match="k must be a positive int"):
        LinformerAttention(16, k=0)
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        LinformerAttention(16, max_len=2.5)
    q, k, v = (t.float() for t in random_qkv(1, 2, 5, 4, seed=0))
    e, f = (t.float() for t in random_projections(3, 4, seed=0))
    with pytest.raises(ValueError, match="exceeds max_len=4"):
        linformer_attention(q, k, v, e, f)
    e, f = (t.float() for t in random_projections(3, 8, seed=0))
    with pytest.raises(ValueError, match="proj_v must have proj_k's shape"):
        linformer_attention(q, k, v, e, f[:2])
    with pytest.raises(ValueError, match="proj_k must be torch.float32"):
        linformer_attention(q, k, v, e.double(), f)
