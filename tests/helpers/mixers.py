"""The checks every baseline mixer's tests run: against a float64 reference, padding,
causality, decoding, errors, and linear memory (measured in a child process)."""

import copy
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch.func import functional_call

from .numerics import rel_err

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
# benchmark's heap setting (weirdnet_lab.harness.alloc) keeps freed blocks in the heap instead,
# where the peak also counts holes and varies by +-15% with allocation order.
_MEMORY_CHILD = """
import ctypes, json, sys
mallopt = ctypes.CDLL(None).mallopt
mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
assert mallopt(-3, 1 << 16) == 1  # M_MMAP_THRESHOLD = 64 KiB, no dynamic adjustment
import torch
from weirdnet_lab.harness.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss
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
    memory = pytest.importorskip(  # the lab's harness measures memory (pip install -e ./lab)
        "weirdnet_lab.harness.memory", reason="the memory checks use weirdnet-lab's harness")
    args = json.dumps([name, B, L, D, causal, options])
    result = memory.measure_cpu_in_child([sys.executable, "-c", _MEMORY_CHILD, args], timeout_s=120)
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
