"""DBA self- and cross-attention: ops and layers against float64 references with explicit
full matrices, padding, fully padded rows, memory growth, errors."""

import copy
import math

import pytest
import torch

from helpers.mixers import check_linear_memory
from helpers.numerics import random_padding_mask, rel_err
from weirdnet.layers import build
from weirdnet.layers.dba import DBACrossAttention, DBAttention, default_heads
from weirdnet.ops.dba import (
    compress_positions,
    dba_attention,
    dba_compress,
    dba_compress_reference,
    dba_cross_attention,
    dba_cross_reference,
    dba_reference,
)

LENGTHS = [1, 7, 37, 1000]


pytestmark = pytest.mark.usefixtures("one_thread")


def op_inputs(B, H, n, d, d_p, d_in, seed):
    """Float64 (q, k, v, z, wr, wc, r) and a mask, scaled like a trained layer's."""
    g = torch.Generator().manual_seed(seed)
    rn = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g)  # noqa: E731
    q, k, v = rn(B, H, n, d), rn(B, H, n, d), rn(B, H, n, d)
    z, r = rn(H, d_p, d) / math.sqrt(d), rn(H, d, d_in) / math.sqrt(d_in)
    wr, wc = rn(B, H, n, d_p), rn(B, H, n, d_p)
    return (q, k, v, z, wr, wc, r), random_padding_mask(B, n, g)


def assert_grads_close(got, want, tol, names):
    """Each gradient within ``tol`` relative error; one that is exactly 0 in exact
    arithmetic (e.g. dq at n = 1, where P' ignores Q) only has to be rounding noise, small
    next to the largest gradient."""
    scale = max(w.norm().item() for w in want)
    for name, g, w in zip(names, got, want):
        if w.norm().item() <= 1e-8 * scale:
            assert g.double().norm().item() <= tol * scale, name
        else:
            assert rel_err(g, w) <= tol, name


def check_against(fn, ref_fn, inputs, mask, tols=((torch.float64, 1e-10),
                                                  (torch.float32, 1e-5))):
    """fn(*inputs, mask) vs ref_fn in float64: outputs and the gradients of every input."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    ref = ref_fn(*leaves, mask)
    grad = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, leaves, grad)
    for dtype, tol in tols:
        xs = [t.to(dtype).requires_grad_() for t in inputs]
        out = fn(*xs, mask)
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert rel_err(out, ref) <= tol
        grads = torch.autograd.grad(out, xs, grad.to(dtype))
        assert_grads_close(grads, ref_grads, tol, [f"input {i}" for i in range(len(xs))])


@pytest.mark.parametrize("L", LENGTHS)
def test_self_op_matches_full_matrix_reference(L):
    inputs, mask = op_inputs(3, 2, L, 8, 5, 6, seed=L)
    check_against(dba_attention, dba_reference, inputs, mask)


@pytest.mark.parametrize("L", LENGTHS)
def test_cross_op_matches_reference(L):
    g = torch.Generator().manual_seed(L)
    B, H, d, d_p, d_in = 3, 2, 8, 5, 6
    rn = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g)  # noqa: E731
    inputs = (rn(B, H, L, d), rn(B, H, d_p, d), rn(B, H, d_p, d), rn(B, H, d_p, d) / 3,
              rn(B, H, L, d_p), rn(H, d, d_in) / 3)
    check_against(dba_cross_attention, dba_cross_reference, inputs, random_padding_mask(B, L, g))


@pytest.mark.parametrize("per_sample_z", [False, True])
def test_compress_matches_reference(per_sample_z):
    g = torch.Generator().manual_seed(7)
    B, H, n, d, e, d_p = 3, 2, 37, 6, 9, 4
    keys = torch.randn(B, H, n, d, dtype=torch.float64, generator=g)
    values = torch.randn(B, 1, n, e, dtype=torch.float64, generator=g)
    z = torch.randn(*((B,) if per_sample_z else ()), H, d_p, d, dtype=torch.float64,
                    generator=g)
    mask = random_padding_mask(B, n, g)
    check_against(lambda k, v, zz, m: dba_compress(k, v, zz, m), dba_compress_reference,
                  (keys, values, z), mask)
    # keys as values: the fused backward
    check_against(lambda k, zz, m: dba_compress(k, k, zz, m),
                  lambda k, zz, m: dba_compress_reference(k, k, zz, m), (keys, z), mask)


def test_fused_functions_gradcheck():
    g = torch.Generator().manual_seed(8)
    rn = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g,  # noqa: E731
                                requires_grad=True)
    B, n, c = 3, 9, 5
    mask = random_padding_mask(B, n, g)
    for w_soft in (rn(3, c), rn(B, 3, c)):
        for w_lin, w_out in ((rn(2, c), rn(4, c)), (rn(0, c), rn(0, c))):
            args = (rn(B, n, c), w_soft, w_lin, w_out)
            assert torch.autograd.gradcheck(lambda *a: compress_positions(*a, mask), args,
                                            fast_mode=True)
    keys, z = rn(B, 2, n, 4), rn(2, 3, 4)
    assert torch.autograd.gradcheck(lambda k, zz: dba_compress(k, k, zz, mask), (keys, z),
                                    fast_mode=True)


# --- layers --------------------------------------------------------------------------------


def split_heads(t, heads):
    B, n, w = t.shape
    return t.view(B, n, heads, w // heads).transpose(1, 2)


def merge_heads(layer, o):
    B, _, n, _ = o.shape
    return layer.proj_o(o.transpose(1, 2).reshape(B, n, layer.dim))


def self_reference(layer, x, mask):
    """DBAttention written out: projections, dba_reference per head, W_O (float64)."""
    H = layer.heads
    q, k, v = (split_heads(t, H) for t in layer.proj_qkv(x).chunk(3, -1))
    wr, wc = (split_heads(t, H) for t in layer.proj_rec(x).chunk(2, -1))
    return merge_heads(layer, dba_reference(q, k, v, layer.z, wr, wc, layer.r, mask))


def cross_reference(layer, x, context, context_mask, mask):
    """DBACrossAttention written out with the reference ops (float64)."""
    H = layer.heads
    keys = split_heads(layer.proj_ctx(context), H)
    c = dba_compress_reference(keys, context.unsqueeze(1), layer.z_ctx, context_mask)

    def per_head(lin):  # head h's slice of lin on head h's compressed context
        w = lin.weight.view(H, layer.head_dim, -1)
        out = torch.einsum("bhpc,hec->bhpe", c, w)
        return out if lin.bias is None else out + lin.bias.view(H, 1, -1)

    k_c, v_c, z_q = per_head(layer.proj_k), per_head(layer.proj_v), per_head(layer.proj_z)
    q, wr = split_heads(layer.proj_q(x), H), split_heads(layer.proj_rec(x), H)
    return merge_heads(layer, dba_cross_reference(q, k_c, v_c, z_q, wr, layer.r, mask))


def twin64(layer):
    """A float64 copy of ``layer`` with the same parameters."""
    return copy.deepcopy(layer).double()


def check_layer(layer, call, ref_call, inputs, tols=((torch.float64, 1e-10),
                                                     (torch.float32, 1e-5))):
    """Layer output and gradients (inputs and parameters) vs ref_call on a float64 twin."""
    twin = twin64(layer)
    leaves = [t.clone().requires_grad_() for t in inputs]
    ref = ref_call(twin, *leaves)
    grad = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, [*leaves, *twin.parameters()], grad)
    for model, dtype, tol in [(twin, *tols[0]), (layer, *tols[1])]:
        xs = [t.to(dtype).requires_grad_() for t in inputs]
        out = call(model, *xs)
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert rel_err(out, ref) <= tol
        grads = torch.autograd.grad(out, [*xs, *model.parameters()], grad.to(dtype))
        names = [f"input {i}" for i in range(len(xs))] + [n for n, _ in
                                                          model.named_parameters()]
        assert_grads_close(grads, ref_grads, tol, names)


@pytest.mark.parametrize("L", LENGTHS)
def test_self_layer_matches_reference(L):
    torch.manual_seed(L)
    layer = DBAttention(24, heads=3, d_p=5, d_in=7)
    g = torch.Generator().manual_seed(L)
    x = torch.randn(3, L, 24, dtype=torch.float64, generator=g)
    mask = random_padding_mask(3, L, g)
    check_layer(layer, lambda m, x: m(x, mask), lambda m, x: self_reference(m, x, mask), [x])


@pytest.mark.parametrize("n,m", [(1, 1), (37, 7), (1000, 37), (7, 1000)])
def test_cross_layer_matches_reference(n, m):
    torch.manual_seed(n + m)
    layer = DBACrossAttention(24, context_dim=10, heads=3, d_p=5, d_in=7)
    torch.nn.init.normal_(layer.proj_z.bias)
    g = torch.Generator().manual_seed(n * m)
    x = torch.randn(3, n, 24, dtype=torch.float64, generator=g)
    context = torch.randn(3, m, 10, dtype=torch.float64, generator=g)
    mask, context_mask = random_padding_mask(3, n, g), random_padding_mask(3, m, g).roll(1, 0)
    check_layer(layer, lambda mod, x, c: mod(x, c, context_mask, mask),
                lambda mod, x, c: cross_reference(mod, x, c, context_mask, mask), [x, context])


def test_self_padding_never_changes_real_outputs():
    torch.manual_seed(9)
    layer = DBAttention(32, heads=2)
    g = torch.Generator().manual_seed(9)
    B, L, P = 3, 50, 17
    x = torch.randn(B, L, 32, generator=g)
    mask = torch.rand(B, L, generator=g) > 0.3
    y = layer(x, mask)
    x_pad = torch.cat([x, torch.randn(B, P, 32, generator=g) * 1e3], 1)
    mask_pad = torch.cat([mask, torch.zeros(B, P, dtype=torch.bool)], 1)
    y_pad = layer(x_pad, mask_pad)
    assert torch.isfinite(y_pad).all()
    assert rel_err(y_pad[:, :L][mask], y[mask]) <= 1e-5
    x_in = x.clone()
    x_in[~mask] = torch.randn(int((~mask).sum()), 32, generator=g) * 1e3
    assert rel_err(layer(x_in, mask)[mask], y[mask]) <= 1e-5


def test_cross_padding_never_changes_real_outputs():
    torch.manual_seed(10)
    layer = DBACrossAttention(32, context_dim=16, heads=2)
    g = torch.Generator().manual_seed(10)
    B, n, m, P = 3, 30, 20, 11
    x, c = torch.randn(B, n, 32, generator=g), torch.randn(B, m, 16, generator=g)
    mask, cmask = torch.rand(B, n, generator=g) > 0.3, torch.rand(B, m, generator=g) > 0.3
    y = layer(x, c, cmask, mask)
    pad = torch.zeros(B, P, dtype=torch.bool)
    x2 = torch.cat([x, torch.randn(B, P, 32, generator=g) * 1e3], 1)
    c2 = torch.cat([torch.randn(B, P, 16, generator=g) * 1e3, c], 1)  # context padded first
    y2 = layer(x2, c2, torch.cat([pad, cmask], 1), torch.cat([mask, pad], 1))
    assert torch.isfinite(y2).all()
    assert rel_err(y2[:, :n][mask], y[mask]) <= 1e-5
    # without masks every position counts: the output changes
    assert not torch.allclose(layer(x2, c2)[:, :n], y2[:, :n], atol=1e-3)


def test_fully_padded_rows_are_finite():
    torch.manual_seed(11)
    layer, cross = DBAttention(16), DBACrossAttention(16, context_dim=8)
    x = torch.randn(2, 9, 16, requires_grad=True)
    c = torch.randn(2, 5, 8, requires_grad=True)
    none = torch.zeros(2, 9, dtype=torch.bool)
    y = layer(x, none)
    assert torch.allclose(y, layer.proj_o.bias.expand_as(y))  # V_DBA = 0: output b_O
    y_c = cross(x, c, torch.zeros(2, 5, dtype=torch.bool), none)
    assert torch.allclose(y_c, cross.proj_o.bias.expand_as(y_c))  # K_2 = V_2 = 0
    gx, gc = torch.autograd.grad((y.sum() + y_c.sum()), [x, c])
    assert torch.isfinite(gx).all() and torch.isfinite(gc).all()
    for name, p in [*layer.named_parameters(), *cross.named_parameters()]:
        assert p.grad is None or torch.isfinite(p.grad).all(), name


def test_shapes_heads_options_and_registry():
    x = torch.randn(2, 13, 256)
    layer = build("dba", 256, causal=False)
    assert isinstance(layer, DBAttention) and layer.heads == 4
    assert (layer.d_p, layer.d_in) == (16, 24) and layer.z.shape == (4, 16, 64)
    assert layer.r.shape == (4, 64, 24) and layer(x).shape == x.shape
    assert [default_heads(D) for D in (8, 64, 100, 200, 256, 768)] == [1, 1, 1, 2, 4, 12]
    cross = DBACrossAttention(256, context_dim=48, d_p=8, d_in=12)
    out = cross(x, torch.randn(2, 1000, 48), torch.rand(2, 1000) > 0.5)
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert cross.compress_context(torch.randn(2, 1000, 48)).shape == (2, 4, 8, 48)


def test_dropout_only_in_training():
    torch.manual_seed(12)
    layer = DBAttention(32, dropout=0.5)
    plain = DBAttention(32)
    plain.load_state_dict(layer.state_dict())
    x = torch.randn(2, 40, 32)
    layer.eval()
    assert torch.equal(layer(x), plain(x))
    layer.train()
    assert not torch.allclose(layer(x), plain(x), atol=1e-4)


@pytest.mark.slow
def test_memory_grows_linearly_in_length():
    check_linear_memory("dba", causal=False, B=8, D=128)


# --- errors -------------------------------------------------------------------------------


def test_layer_errors():
    with pytest.raises(ValueError, match="DBA is not causal"):
        DBAttention(16, causal=True)
    with pytest.raises(ValueError, match="DBA is not causal"):
        build("dba", 16)  # the registry's default form is causal
    layer = DBAttention(16, heads=2)
    with pytest.raises(ValueError, match="DBA is not causal"):
        layer.init_cache(1)
    with pytest.raises(ValueError, match="DBA is not causal"):
        layer(torch.randn(1, 3, 16), cache=object())
    for kwargs, match in [({"d_p": 0}, "d_p must be a positive int"),
                          ({"d_in": 0}, "d_in must be a positive int"),
                          ({"heads": 3}, "heads=3 must divide dim=16"),
                          ({"heads": 0}, "heads must be a positive int"),
                          ({"dropout": 1.0}, "dropout must be a probability")]:
        with pytest.raises(ValueError, match=match):
            DBAttention(16, **kwargs)
        with pytest.raises(ValueError, match=match):
            DBACrossAttention(16, **kwargs)
    with pytest.raises(ValueError, match="context_dim must be a positive int"):
        DBACrossAttention(16, context_dim=0)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, length, 16\)"):
        layer(torch.randn(1, 5, 8))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        layer(torch.randn(5, 16))
    with pytest.raises(ValueError, match="mask must have shape"):
        layer(torch.randn(2, 5, 16), torch.ones(2, 4, dtype=torch.bool))
    cross = DBACrossAttention(16, context_dim=8)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"context must have shape \(batch, length, 8\)"):
        cross(x, torch.randn(2, 4, 16))
    with pytest.raises(ValueError, match="context_mask must have shape"):
        cross(x, torch.randn(2, 4, 8), torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="context must match x in batch size"):
        cross(x, torch.randn(3, 4, 8))


def test_op_errors():
    (q, k, v, z, wr, wc, r), mask = op_inputs(2, 2, 9, 4, 3, 5, seed=0)
    with pytest.raises(ValueError, match="k must have shape"):
        dba_attention(q, k[:, :, :5], v, z, wr, wc, r)
    with pytest.raises(ValueError, match="z must have shape"):
        dba_attention(q, k, v, z[:, :, :3], wr, wc, r)
    with pytest.raises(ValueError, match="d_p >= 1"):
        dba_attention(q, k, v, z[:, :0], wr[..., :0], wc[..., :0], r)
    with pytest.raises(ValueError, match="wc must have shape"):
        dba_attention(q, k, v, z, wr, wc[..., :2], r)
    with pytest.raises(ValueError, match="r must have shape"):
        dba_attention(q, k, v, z, wr, wc, r[:1])
    with pytest.raises(ValueError, match="v must have the dtype and device of q"):
        dba_attention(q, k, v.float(), z, wr, wc, r)
    with pytest.raises(ValueError, match="mask must have shape"):
        dba_attention(q, k, v, z, wr, wc, r, mask[:, :3])
    with pytest.raises(ValueError, match="q must have 4 dimensions"):
        dba_attention(q[0], k, v, z, wr, wc, r)
    with pytest.raises(ValueError, match="k_c must have shape"):
        dba_cross_attention(q, k[:, :, :2], v[:, :, :3], z.expand(2, -1, -1, -1), wr, r)
    with pytest.raises(ValueError, match="z_q must have shape"):
        dba_cross_attention(q, k[:, :, :3], v[:, :, :3], z[:1], wr, r)
    x = torch.randn(2, 9, 4)
    with pytest.raises(ValueError, match=r"w_soft must have shape \(rows, 4\)"):
        compress_positions(x, torch.randn(3, 5), torch.randn(0, 4), torch.randn(0, 4))
    with pytest.raises(ValueError, match=r"w_out must have shape \(rows, 4\)"):
        compress_positions(x, torch.randn(3, 4), torch.randn(0, 4), torch.randn(2, 2, 4))
