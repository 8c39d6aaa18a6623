"""Softmax attention (op, mixer, KV cache, cross-attention) against its float64 reference.

The checks it runs are shared with the other mixers' tests (``helpers.mixers``).
"""

import copy

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
    check_padding_invariance,
    random_mask,
    random_qkv,
)
from helpers.numerics import rel_err
from weirdnet.layers import (
    CrossAttentionContext,
    SoftmaxAttention,
    SoftmaxCrossAttention,
    SoftmaxKVCache,
    available,
    build,
)
from weirdnet.ops import softmax_attention, softmax_attention_reference

# ---------------------------------------------------------------- softmax attention


def softmax_reference_mix(layer, q, k, v, mask):
    return softmax_attention_reference(q, k, v, causal=layer.causal, mask=mask)


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_op_matches_reference(L, causal):
    q, k, v = random_qkv(2, 2, L, 8, seed=L)
    for mask in (None, random_mask(2, L, seed=L)):
        check_against_reference(
            lambda q, k, v, m=mask: softmax_attention(q, k, v, causal=causal, mask=m),
            lambda q, k, v, m=mask: softmax_attention_reference(q, k, v, causal=causal, mask=m),
            [q, k, v])


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_op_in_query_blocks_matches_reference(L, causal, monkeypatch):
    """With an explicit mask, long query ranges run in blocks of rows (each call within
    MASKED_SCORES_LIMIT score elements): forward and all gradients still match the float64
    reference, also for cached decoding's Lq < Lk."""
    import importlib

    op_module = importlib.import_module("weirdnet.ops.softmax_attention")  # the module
    monkeypatch.setattr(op_module, "MASKED_SCORES_LIMIT", 3 * 2 * 2 * L)  # 3 rows a call
    q, k, v = random_qkv(2, 2, L, 8, seed=L)
    mask = random_mask(2, L, seed=L)
    check_against_reference(
        lambda q, k, v: softmax_attention(q, k, v, causal=causal, mask=mask),
        lambda q, k, v: softmax_attention_reference(q, k, v, causal=causal, mask=mask),
        [q, k, v])
    if causal and L > 1:
        full = softmax_attention_reference(q, k, v, causal=True, mask=mask)
        tail = softmax_attention(q[:, :, 1:], k, v, causal=True, mask=mask)
        assert rel_err(tail, full[:, :, 1:]) <= 1e-12


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_packed_op_in_query_blocks_matches_reference(L, causal, monkeypatch):
    """Block-diagonal attention over packed documents, its mask built a block of 3 query
    rows at a time: forward and all gradients match the float64 reference with the whole
    (B, 1, L, L) mask; a bad ``segments`` is refused."""
    import importlib

    from weirdnet.ops.packing import segment_ids
    from weirdnet.ops.softmax_attention import packed_softmax_attention, reference_attention

    op_module = importlib.import_module("weirdnet.ops.softmax_attention")
    monkeypatch.setattr(op_module, "MASKED_SCORES_LIMIT", 3 * 2 * 2 * L)
    q, k, v = random_qkv(2, 2, L, 8, seed=L)
    mask = random_mask(2, L, seed=L)
    doc_ids = torch.zeros(2, L, dtype=torch.long)
    for b, starts in enumerate(([1, 3, L // 2], [L - L // 3])):
        for s in starts:
            if 0 < s < L:
                doc_ids[b, s:] += 1
    seg = segment_ids(doc_ids)
    allowed = (seg[:, :, None] == seg[:, None, :]).unsqueeze(1) & mask[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(L, L, dtype=torch.bool).tril()
    check_against_reference(
        lambda q, k, v: packed_softmax_attention(q, k, v, seg, causal=causal, mask=mask),
        lambda q, k, v: reference_attention(q, k, v, allowed), [q, k, v])
    with pytest.raises(ValueError, match="segments must be"):
        packed_softmax_attention(q, k, v, seg[:, :-1] if L > 1 else seg[:1], mask=mask)
    with pytest.raises(TypeError, match="integer .* document ids, got torch.float"):
        packed_softmax_attention(q, k, v, seg.float(), mask=mask)


@pytest.mark.parametrize("Lq,Lk", [(1, 9), (5, 9), (9, 9)])
def test_op_causal_queries_are_the_last_positions(Lq, Lk):
    q, k, v = random_qkv(2, 3, Lk, 4, seed=Lq)
    mask = random_mask(2, Lk, seed=1)
    full = softmax_attention_reference(q, k, v, causal=True, mask=mask)
    out = softmax_attention(q[:, :, -Lq:], k, v, causal=True, mask=mask)
    assert rel_err(out, full[:, :, -Lq:]) <= 1e-12


def test_op_rows_without_keys_are_zero_with_zero_gradient():
    q, k, v = (t.float().requires_grad_() for t in random_qkv(2, 2, 6, 4, seed=3))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0] = False
    mask[1, :3] = False  # causal rows 0..2 of sequence 1 see no real key
    for causal in (False, True):
        out = softmax_attention(q, k, v, causal=causal, mask=mask)
        assert torch.isfinite(out).all() and torch.equal(out[0], torch.zeros_like(out[0]))
        if causal:
            assert torch.equal(out[1, :, :3], torch.zeros_like(out[1, :, :3]))
        (gq,) = torch.autograd.grad(out.sum(), [q])
        assert torch.isfinite(gq).all() and torch.equal(gq[0], torch.zeros_like(gq[0]))


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("causal", [True, False])
def test_layer_matches_reference(L, causal):
    torch.manual_seed(L)
    layer = SoftmaxAttention(16, causal=causal, heads=2)
    x = torch.randn(2, L, 16)
    check_layer_against_reference(layer, softmax_reference_mix, x, random_mask(2, L, L))


@pytest.mark.parametrize("causal", [True, False])
def test_padding_never_changes_real_outputs(causal):
    torch.manual_seed(0)
    check_padding_invariance(SoftmaxAttention(16, causal=causal, heads=4))


def test_causal_layer_never_sees_the_future():
    torch.manual_seed(1)
    check_causality(SoftmaxAttention(16, causal=True, heads=2))


@pytest.mark.parametrize("max_len", [None, 60])
def test_decoding_matches_full_pass(max_len, monkeypatch):
    torch.manual_seed(2)
    layer = SoftmaxAttention(32, causal=True, heads=4)
    monkeypatch.setattr(SoftmaxAttention, "initial_capacity", 8)  # the cache grows 3 times
    check_decoding(layer, max_len=max_len)


def test_kv_cache_layout_and_capacity():
    layer = SoftmaxAttention(16, causal=True, heads=2)
    cache = layer.init_cache(3, max_len=4)
    assert isinstance(cache, SoftmaxKVCache)
    assert cache.k.shape == cache.v.shape == (3, 2, 4, 8) and cache.mask.shape == (3, 4)
    layer(torch.randn(3, 3, 16), cache=cache)
    layer.step(torch.randn(3, 16), cache)
    assert cache.position == 4
    with pytest.raises(ValueError, match="capacity max_len=4"):
        layer.step(torch.randn(3, 16), cache)


def test_registry_and_defaults():
    assert "softmax" in available()
    layer = build("softmax", 128, causal=False, dropout=0.1)
    assert isinstance(layer, SoftmaxAttention) and not layer.causal
    assert layer.heads == 2 and layer.head_dim == 64  # default: heads of width 64
    assert SoftmaxAttention(96).heads == 1  # 64 does not divide 96: one head
    for p in (layer.proj_q.bias, layer.proj_o.bias):
        assert torch.count_nonzero(p) == 0


def test_dropout_only_in_training():
    torch.manual_seed(3)
    layer = SoftmaxAttention(16, causal=False, heads=2, dropout=0.5)
    x = torch.randn(2, 30, 16)
    layer.eval()
    assert torch.equal(layer(x), layer(x))
    layer.train()
    assert not torch.equal(layer(x), layer(x))


def test_errors():
    layer = SoftmaxAttention(16, causal=True, heads=2)
    check_input_errors(layer)
    check_cache_errors(layer)
    with pytest.raises(ValueError, match="causal=True"):
        SoftmaxAttention(16, causal=False).init_cache(1)
    with pytest.raises(ValueError, match="dropout must be a float"):
        SoftmaxAttention(16, dropout=1.0)
    q, k, v = (t.float() for t in random_qkv(1, 2, 5, 4, seed=0))
    with pytest.raises(ValueError, match="at least as many keys as queries"):
        softmax_attention(q, k[:, :, :3], v[:, :, :3], causal=True)
    with pytest.raises(ValueError, match=r"k must have shape \(B, H, Lk, d\)"):
        softmax_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="one dtype"):
        softmax_attention(q, k.double(), v)


# ---------------------------------------------------------------- cross-attention


def test_cross_attention_matches_reference_and_precomputed_context():
    torch.manual_seed(4)
    layer = SoftmaxCrossAttention(16, heads=2, context_dim=12)
    x, context = torch.randn(2, 9, 16), torch.randn(2, 13, 12)
    context_mask = random_mask(2, 13, seed=4)
    context_mask[0] = False  # a sequence with no real context token: output 0 + bias
    y = layer(x, context, context_mask)
    ref = copy.deepcopy(layer).double()
    k, v = ref.project_kv(context.double())
    o = softmax_attention_reference(ref.project_q(x.double()), k, v, mask=context_mask)
    assert rel_err(y, ref.project_out(o)) <= 1e-5
    ctx = layer.precompute_context(context, context_mask)
    assert isinstance(ctx, CrossAttentionContext)
    assert torch.allclose(layer(x, ctx), y, atol=1e-6)
    # decoding a query at a time against the precomputed context equals the full pass
    steps = torch.cat([layer(x[:, t : t + 1], ctx) for t in range(9)], 1)
    assert torch.allclose(steps, y, atol=1e-6)


def test_cross_attention_errors():
    layer = SoftmaxCrossAttention(16, heads=2)
    x, context = torch.randn(2, 4, 16), torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"context must have shape \(batch, length, 16\)"):
        layer(x, torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="context_mask must have shape"):
        layer(x, context, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="context has batch 3"):
        layer(x, torch.randn(3, 5, 16))
    ctx = layer.precompute_context(context)
    with pytest.raises(ValueError, match="context_mask belongs in precompute_context"):
        layer(x, ctx, torch.ones(2, 5, dtype=torch.bool))
    for call in (lambda: layer.init_cache(2), lambda: layer.step(x[:, 0], None)):
        with pytest.raises(ValueError, match="precompute_context"):
            call()
