"""Softmax attention (op, mixer, KV cache, cross-attention) against its float64 reference.

The helpers at the top are shared by the other baseline-mixer tests
(test_mixer_linear/linformer/local), which import them from here.
"""

import copy
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch.func import functional_call

from weirdnet.bench.memory import measure_cpu_in_child
from weirdnet.layers import (
    CrossAttentionContext,
    SoftmaxAttention,
    SoftmaxCrossAttention,
    SoftmaxKVCache,
    available,
    build,
)
from weirdnet.ops import softmax_attention, softmax_attention_reference

from conftest import rel_err

LENGTHS = [1, 7, 37, 1000]
# (output, gradient) relative-error bounds per dtype
TOLERANCES = {torch.float64: (1e-10, 1e-10), torch.float32: (1e-5, 1e-4)}


# ---------------------------------------------------------------- shared helpers


def random_mask(B: int, L: int, seed: int, drop: float = 0.25) -> torch.Tensor:
    """(B, L) bool with ~``drop`` of the tokens padded at random."""
    return torch.rand(B, L, generator=torch.Generator().manual_seed(seed)) > drop


def random_qkv(B: int, H: int, L: int, d: int, seed: int, scale: float = 1.0):
    """Three float64 (B, H, L, d) tensors."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, d, dtype=torch.float64, generator=g) * scale for _ in "qkv"]


def grad_err(got: torch.Tensor, want: torch.Tensor, scale: float) -> float:
    """rel_err, except for a gradient that is negligible next to the largest one (norm
    ``scale``), such as the key bias's under softmax (zero in exact arithmetic) or the
    query's of linear attention at L = 1 (of order eps): its error relative to ``scale``."""
    if torch.isnan(got).any() or want.norm().item() > 1e-6 * scale:
        return rel_err(got, want)
    return (got.double() - want).norm().item() / scale


def check_against_reference(fn, ref_fn, tensors, tolerances=TOLERANCES, seed: int = 0):
    """``fn(*tensors)`` in each dtype of ``tolerances`` against ``ref_fn`` on the float64
    tensors: the output, and the gradients of every tensor for one random output grad."""
    leaves = [t.detach().double().requires_grad_() for t in tensors]
    want = ref_fn(*leaves)
    grad_out = torch.randn(want.shape, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(seed))
    want_grads = torch.autograd.grad(want, leaves, grad_out)
    scale = max(g.norm().item() for g in want_grads)
    for dtype, (tol_out, tol_grad) in tolerances.items():
        xs = [t.detach().to(dtype).requires_grad_() for t in tensors]
        out = fn(*xs)
        assert out.dtype == dtype and out.shape == want.shape
        assert rel_err(out, want) <= tol_out, (dtype, rel_err(out, want))
        grads = torch.autograd.grad(out, xs, grad_out.to(dtype))
        for i, (got, exp) in enumerate(zip(grads, want_grads)):
            assert grad_err(got, exp, scale) <= tol_grad, (dtype, i, grad_err(got, exp, scale))


def check_layer_against_reference(layer, reference_mix, x, mask, tolerances=TOLERANCES):
    """The layer's output and gradients (x and every parameter) against the same layer
    with its mixing replaced by ``reference_mix(module, q, k, v, mask)``, in float64."""
    names = [n for n, _ in layer.named_parameters()]
    ref_layer = copy.deepcopy(layer)
    ref_layer._mix = lambda q, k, v, m: reference_mix(ref_layer, q, k, v, m)

    def run(module):
        return lambda x, *params: functional_call(module, dict(zip(names, params)), (x, mask))

    check_against_reference(run(layer), run(ref_layer), [x, *layer.parameters()], tolerances)


def check_padding_invariance(layer, B: int = 2, L: int = 50, seed: int = 0) -> None:
    """Changing padded tokens (to large values) leaves the outputs at real tokens alone."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, layer.dim, generator=g)
    mask = random_mask(B, L, seed)
    x2 = x.clone()
    x2[~mask] = 50 * torch.randn(int((~mask).sum()), layer.dim, generator=g)
    y1, y2 = layer(x, mask), layer(x2, mask)
    assert torch.isfinite(y1).all() and torch.isfinite(y2).all()
    assert torch.allclose(y1[mask], y2[mask], rtol=1e-5, atol=1e-5)


def check_causality(layer, B: int = 2, L: int = 90, t: int = 40, seed: int = 0) -> None:
    """Outputs before t do not change when the tokens (and mask) from t on change."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, layer.dim, generator=g)
    mask = random_mask(B, L, seed)
    x2, mask2 = x.clone(), mask.clone()
    x2[:, t:] = 20 * torch.randn(B, L - t, layer.dim, generator=g)
    mask2[:, t:] = ~mask2[:, t:]
    y1, y2 = layer(x, mask), layer(x2, mask2)
    assert torch.allclose(y1[:, :t], y2[:, :t], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(y1[:, t:], y2[:, t:])


def check_decoding(layer, B: int = 2, L: int = 60, pieces=(20, 25), seed: int = 0,
                   max_len=None, tol: float = 1e-5) -> None:
    """A prompt, a second multi-token chunk, then single steps equal the full pass."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, layer.dim, generator=g)
    mask = random_mask(B, L, seed)
    full = layer(x, mask)
    cache = layer.init_cache(B, max_len)
    outs, start = [], 0
    for end in pieces:
        outs.append(layer(x[:, start:end], mask[:, start:end], cache=cache))
        start = end
    outs += [layer.step(x[:, t], cache, mask[:, t]).unsqueeze(1) for t in range(start, L)]
    assert rel_err(torch.cat(outs, 1), full) <= tol
    if hasattr(cache, "position"):
        assert cache.position == L


def check_input_errors(layer) -> None:
    """Bad x and mask are ValueErrors naming the problem."""
    D = layer.dim
    with pytest.raises(ValueError, match=rf"x must have shape \(batch, length, {D}\)"):
        layer(torch.randn(1, 5, D + 1))
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        layer(torch.randn(5, D))
    with pytest.raises(ValueError, match="floating-point"):
        layer(torch.ones(1, 5, D, dtype=torch.long))
    with pytest.raises(ValueError, match="x must be a torch.Tensor"):
        layer([[0.0] * D])
    with pytest.raises(ValueError, match="mask must have shape"):
        layer(torch.randn(2, 5, D), torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        layer(torch.randn(2, 5, D), torch.ones(2, 5))
    with pytest.raises(ValueError, match="heads"):
        type(layer)(D, causal=layer.causal, heads=3 if D % 3 else 5)
    with pytest.raises(ValueError, match="dim must be a positive int"):
        type(layer)(0, causal=layer.causal)


def check_cache_errors(layer) -> None:
    """Decoding errors: wrong cache, wrong batch, bad step inputs."""
    D = layer.dim
    cache = layer.init_cache(2)
    with pytest.raises(ValueError, match="cache must come from"):
        layer(torch.randn(2, 3, D), cache=object())
    with pytest.raises(ValueError, match="batch_size=2"):
        layer(torch.randn(3, 1, D), cache=cache)
    with pytest.raises(ValueError, match="x_t must have 2 dimensions"):
        layer.step(torch.randn(2, 1, D), cache)
    with pytest.raises(ValueError, match=r"mask_t must be a bool tensor of shape \(batch,\)"):
        layer.step(torch.randn(2, D), cache, torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        layer.init_cache(0)


# The child gives every block >= 64 KiB its own mapping, returned to the system on free
# (a fixed glibc M_MMAP_THRESHOLD), so its peak RSS is the peak of live tensors.  The
# benchmark's heap setting (weirdnet.bench.alloc) keeps freed blocks in the heap instead,
# where the peak also counts holes and varies by +-15% with allocation order.
_MEMORY_CHILD = """
import ctypes, json, sys
mallopt = ctypes.CDLL(None).mallopt
mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
assert mallopt(-3, 1 << 16) == 1  # M_MMAP_THRESHOLD = 64 KiB, no dynamic adjustment
import torch
from weirdnet.bench.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss
from weirdnet.layers import build
name, B, L, D, causal, options = json.loads(sys.argv[1])
torch.set_num_threads(1)
torch.manual_seed(0)
layer = build(name, D, causal=causal, **options)
def inputs(length):
    return torch.randn(B, length, D, requires_grad=True), torch.randn(B, length, D)
x, g = inputs(64)
layer(x).backward(g)  # warm-up: one-off allocations and parameter gradients
x, g = inputs(L)
reset_peak_rss()
base = current_rss_bytes()
layer(x).backward(g)
print(json.dumps({"extra_bytes": peak_rss_bytes() - base}))
"""


def peak_extra_bytes(name: str, L: int, *, causal: bool, B: int = 4, D: int = 64,
                     **options) -> int:
    """Peak extra RSS of one forward+backward of mixer ``name`` on (B, L, D), measured
    in a fresh child process (peak reset right after the inputs are allocated)."""
    args = json.dumps([name, B, L, D, causal, options])
    result = measure_cpu_in_child([sys.executable, "-c", _MEMORY_CHILD, args], timeout_s=120)
    assert "error" not in result, result
    return result["extra_bytes"]


def check_linear_memory(name: str, *, causal: bool, **options) -> None:
    """Peak extra memory of forward+backward grows at most 2.2x from L = 4K to 8K (the two
    children run side by side: memory is per process)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS reset and glibc mallopt are Linux-only")
    with ThreadPoolExecutor(2) as pool:
        small, large = pool.map(lambda L: peak_extra_bytes(name, L, causal=causal, **options),
                                (4096, 8192))
    assert 0 < small and large <= 2.2 * small, (small, large)


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
