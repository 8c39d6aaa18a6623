"""The Triton backends of weird_scan ("triton" and issue 73's "triton-e2"): exact against
the float64 reference.  Every test runs on both backends (the autouse ``backend`` fixture)
except the few that test the "triton" module itself (``OLD_ONLY``).

Without a GPU the kernels run on CPU tensors through the Triton interpreter: this module
imports ``weirdnet.ops.weird_scan.triton`` with ``TRITON_INTERPRET=1`` (and restores the
variable), so the interpreter serves these tests and nothing else in the process.  Small
``LEVELS_PER_PASS`` values make short sequences take the multi-pass path with halos that a
GPU takes from L = 257 on.  With CUDA the same tests run compiled, plus the full sizes.
"""

import importlib
import math
import os

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'weirdnet[triton]')")

from helpers.numerics import rel_err  # noqa: E402
from helpers.scan import make_inputs, reach_mask  # noqa: E402
from weirdnet.ops import (  # noqa: E402
    WeirdScanCache,
    weird_scan,
    weird_scan_bidirectional,
    weird_scan_reference,  # noqa: E402
)
from weirdnet.ops.weird_scan import cpu as cpu_kernel  # noqa: E402
from weirdnet.ops.weird_scan import dispatch  # noqa: E402

pytestmark = pytest.mark.slow  # the Triton interpreter

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"


def _import_kernels(name="weirdnet.ops.weird_scan.triton"):
    """Kernel module ``name``, built for the interpreter when there is no GPU."""
    if CUDA:
        return importlib.import_module(name)
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        return importlib.import_module(name)
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


st = _import_kernels()
e2 = _import_kernels("weirdnet.ops.weird_scan.triton_e2")
if not CUDA and not st.INTERPRETED:
    pytest.skip("weirdnet.ops.weird_scan.triton was imported for a GPU before this module, and "
                "there is no GPU", allow_module_level=True)

cuda_only = pytest.mark.skipif(not CUDA, reason="full sizes need a GPU (interpreter too slow)")

# (L, levels per pass): the default (one pass up to L = 256, two beyond) and small passes,
# which give 2 to 9 passes with halos at these lengths.
CASES = [(1, 8), (2, 8), (3, 8), (7, 8), (37, 8), (100, 8), (300, 8),
         (2, 1), (7, 1), (37, 2), (100, 3)]


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    """The Triton kernels themselves, never the PyTorch backend in their place: with the
    self-check on, a kernel that fails to compile on a GPU is replaced (with a warning) by
    the PyTorch backend, and every test here would pass on that one instead."""
    monkeypatch.setenv(dispatch.ENV_SELFCHECK, "0")


BACKEND = "triton"  # the backend under test (set by the ``backend`` fixture)
# tests of the "triton" module itself, its dispatch entry and its backward's buffers
OLD_ONLY = {"test_dispatch_auto_and_forced",
            "test_forcing_triton_on_cpu_without_the_interpreter_is_an_error",
            "test_without_triton_cuda_falls_back_and_forcing_names_the_cause",
            "test_the_compile_time_script_compiles_every_kernel_for_a_gpu",
            "test_backward_holds_dA_and_dV_only_for_the_first_pass",
            "test_channel_chunks_at_the_gpu_benchmark_sizes"}


@pytest.fixture(autouse=True, params=["triton", "triton-e2"])
def backend(request, monkeypatch):
    """Run the test on each Triton backend."""
    if request.param != "triton" and request.node.originalname in OLD_ONLY:
        pytest.skip("tests the 'triton' module itself")
    monkeypatch.setitem(globals(), "BACKEND", request.param)
    return request.param


@pytest.fixture
def passes(monkeypatch):
    """Set the kernels' levels per pass (and tile size) for one test.  For "triton-e2":
    a form point every ``levels`` levels, at most ``levels`` levels in one pass, and
    windows of twice the halo (many tiles)."""

    def configure(levels: int, tile_elements: int | None = None):
        monkeypatch.setattr(st, "LEVELS_PER_PASS", levels)
        for name in ("FORM_STEP", "ONE_PASS_LEVELS", "COARSE_LEVELS", "FINE_LEVELS"):
            monkeypatch.setattr(e2, name, levels)
        monkeypatch.setattr(e2, "FORM_LEVELS", (levels,))
        monkeypatch.setattr(e2, "FINE_WINDOW", 1)
        if tile_elements is not None:
            monkeypatch.setattr(st, "TILE_ELEMENTS", tile_elements)
            monkeypatch.setattr(e2, "TILE_ELEMENTS", tile_elements)

    return configure


def on_device(*xs):
    return [None if x is None else x.to(DEVICE) for x in xs]


def reference(a, v, log_w, mask, reverse):
    """Float64 reference; reverse=None is the bidirectional form (split D // 2)."""
    if reverse is not None:
        return weird_scan_reference(a, v, log_w, reverse=reverse, mask=mask)
    h = a.shape[-1] // 2
    halves = [weird_scan_reference(a[..., s], v[..., s], log_w[:, s], reverse=r, mask=mask)
              for s, r in ((slice(0, h), False), (slice(h, None), True))]
    return torch.cat(halves, -1)


def run(a, v, log_w, mask, reverse):
    if reverse is None:
        return weird_scan_bidirectional(a, v, log_w, mask=mask, backend=BACKEND)
    return weird_scan(a, v, log_w, reverse=reverse, mask=mask, backend=BACKEND)


def keep_mask(mask, B, L, reverse):
    """(B, L, D-broadcastable) outputs with a real token in reach (reference finite)."""
    if reverse is not None:
        return reach_mask(mask, B, L, reverse)
    return reach_mask(mask, B, L, False) & reach_mask(mask, B, L, True)


@pytest.mark.parametrize("L,levels", CASES)
@pytest.mark.parametrize("reverse", [False, True])
def test_forward_matches_reference(passes, L, levels, reverse):
    passes(levels)
    B, D = 2, 5 if L < 300 else 3
    a, v, log_w, mask = make_inputs(B, L, D, seed=L + levels)
    ref = weird_scan_reference(a, v, log_w, reverse=reverse, mask=mask)
    keep = reach_mask(mask, B, L, reverse).expand_as(ref)
    for dtype, tol in [(torch.float64, 1e-12), (torch.float32, 2e-6)]:
        xs = on_device(a.to(dtype), v.to(dtype), log_w.to(dtype), mask)
        out = weird_scan(*xs[:3], reverse=reverse, mask=xs[3], backend=BACKEND).cpu()
        assert out.dtype == dtype and out.shape == (B, L, D)
        assert torch.isfinite(out).all(), "padded or unreachable outputs must be finite"
        assert rel_err(out[keep], ref[keep]) <= tol


def test_many_channel_blocks_and_batch_rows(passes):
    """D = 37: three channel blocks, the last one partial; residue blocks in later passes."""
    passes(2)
    B, L, D = 3, 45, 37
    a, v, log_w, mask = make_inputs(B, L, D, seed=37)
    ref = weird_scan_reference(a, v, log_w, mask=mask)
    keep = reach_mask(mask, B, L, False).expand_as(ref)
    out = weird_scan(*on_device(a.float(), v.float(), log_w.float()), mask=mask.to(DEVICE),
                     backend=BACKEND).cpu()
    assert rel_err(out[keep], ref[keep]) <= 2e-6


# (L, levels, reverse, dtype): every length and pass structure in float64 (exactness), and
# float32 where it adds a path; reverse=None is the bidirectional form.
GRAD_CASES = [
    (1, 8, False, torch.float32), (2, 8, True, torch.float32), (3, 8, None, torch.float64),
    (7, 8, False, torch.float64), (37, 8, True, torch.float32), (100, 8, None, torch.float32),
    (100, 8, False, torch.float64), (300, 8, True, torch.float64),
    (300, 8, None, torch.float32), (7, 1, True, torch.float64), (7, 1, None, torch.float32),
    (37, 2, False, torch.float64), (37, 2, True, torch.float32), (100, 3, None, torch.float64),
]


@pytest.mark.parametrize("L,levels,reverse,dtype", GRAD_CASES)
def test_gradients_match_reference(passes, L, levels, reverse, dtype):
    passes(levels)
    B, D = 2, 5 if L < 300 else 3
    a, v, log_w, mask = make_inputs(B, L, D, seed=10 + L + levels)
    keep = keep_mask(mask, B, L, reverse)
    grad = torch.randn(B, L, D, dtype=torch.float64) * keep
    leaves = [x.clone().requires_grad_() for x in (a, v, log_w)]
    ref = reference(*leaves, mask, reverse)
    ref_grads = torch.autograd.grad(ref.nan_to_num(), leaves, grad)

    xs = [x.detach().to(dtype).to(DEVICE).requires_grad_() for x in (a, v, log_w)]
    mask_d, = on_device(mask)
    out = run(*xs, mask_d, reverse)
    assert rel_err(out.cpu()[keep.expand_as(ref)], ref[keep.expand_as(ref)]) <= 2e-6
    grads = torch.autograd.grad(out, xs, grad.to(dtype).to(DEVICE))
    tol = 1e-11 if dtype == torch.float64 else 2e-6
    for name, got, want in zip(("a", "v", "log_w"), grads, ref_grads):
        assert got.dtype == dtype and torch.isfinite(got).all()
        assert rel_err(got.cpu(), want) <= tol, name


@pytest.mark.parametrize("levels", [2, 8])
def test_bidirectional_is_forward_then_backward_halves(passes, levels):
    passes(levels)
    a, v, log_w, mask = on_device(*make_inputs(2, 45, 9, seed=3))
    out = weird_scan_bidirectional(a, v, log_w, mask=mask, backend=BACKEND)
    fwd = weird_scan(a[..., :4], v[..., :4], log_w[:, :4], mask=mask, backend=BACKEND)
    bwd = weird_scan(a[..., 4:], v[..., 4:], log_w[:, 4:], mask=mask, reverse=True,
                     backend=BACKEND)
    assert torch.equal(out, torch.cat([fwd, bwd], -1))


@pytest.mark.parametrize("dtype,tol,gtol", [(torch.bfloat16, 1e-2, 2e-2),
                                            (torch.float16, 2e-3, 4e-3)])
@pytest.mark.parametrize("levels", [3, 8])
def test_half_precision_inputs_float32_state(passes, dtype, tol, gtol, levels):
    """bf16/fp16 in and out, float32 state: errors are the output's own rounding."""
    passes(levels)
    B, L, D = 2, 100, 6
    a, v, log_w, mask = make_inputs(B, L, D, seed=16)
    a, v = a.to(dtype), v.to(dtype)  # the reference sees the rounded inputs
    keep = reach_mask(mask, B, L, False)
    grad = (torch.randn(B, L, D, dtype=torch.float64) * keep).to(dtype)
    leaves = [x.double().requires_grad_() for x in (a, v, log_w)]
    ref = weird_scan_reference(*leaves, mask=mask)
    ref_grads = torch.autograd.grad(ref.nan_to_num(), leaves, grad.double())

    xs = [x.detach().to(DEVICE).requires_grad_() for x in (a, v, log_w.float())]
    out = weird_scan(*xs, mask=mask.to(DEVICE), backend=BACKEND)
    assert out.dtype == dtype and torch.isfinite(out).all()
    k = keep.expand_as(ref)
    assert rel_err(out.cpu()[k], ref[k]) <= tol
    grads = torch.autograd.grad(out, xs, grad.to(DEVICE))
    assert [g.dtype for g in grads] == [dtype, dtype, torch.float32]
    for name, got, want in zip(("a", "v", "log_w"), grads, ref_grads):
        assert rel_err(got.cpu(), want) <= gtol, name


def test_nan_fails_the_error_measure_and_extremes_stay_finite(passes):
    """rel_err turns any NaN into inf; logits of +-120 and log-weights of +-60 stay exact."""
    assert rel_err(torch.tensor([float("nan"), 1.0]), torch.ones(2)) == math.inf
    passes(3)
    a, v, log_w, mask = make_inputs(2, 100, 4, seed=5, scale=40.0)
    log_w = log_w * 10
    ref = weird_scan_reference(a, v, log_w, mask=mask)
    keep = reach_mask(mask, 2, 100, False).expand_as(ref)
    xs = [x.float().to(DEVICE).requires_grad_() for x in (a, v, log_w)]
    out = weird_scan(*xs, mask=mask.to(DEVICE), backend=BACKEND)
    assert torch.isfinite(out).all()
    assert rel_err(out.cpu()[keep], ref[keep]) <= 2e-6
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in xs)


def test_fully_padded_rows_are_finite_and_get_zero_gradient(passes):
    passes(2)
    a, v, log_w, _ = make_inputs(2, 20, 5, seed=1)
    mask = torch.zeros(2, 20, dtype=torch.bool)
    mask[1, 10:] = True
    xs = [x.float().to(DEVICE).requires_grad_() for x in (a, v, log_w)]
    out = weird_scan(*xs, mask=mask.to(DEVICE), backend=BACKEND)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0], torch.zeros_like(out[0]))  # no real token: O = 0
    out.sum().backward()
    pad = ~mask.to(DEVICE)
    assert torch.equal(xs[0].grad[pad], torch.zeros_like(xs[0].grad[pad]))
    assert torch.equal(xs[1].grad[pad], torch.zeros_like(xs[1].grad[pad]))
    assert all(torch.isfinite(x.grad).all() for x in xs)


@pytest.mark.parametrize("reverse", [False, True])
def test_exact_causality_float32(passes, reverse):
    """Changing tokens from position t on leaves every earlier output bitwise unchanged,
    across tiles, halos and passes."""
    passes(2)
    B, L, D, t = 2, 70, 6, 29
    a, v, log_w, mask = make_inputs(B, L, D, seed=7, scale=4.0)
    a, v, log_w = a.float(), v.float(), log_w.float()
    a2, v2, mask2 = a.clone(), v.clone(), mask.clone()
    later = slice(t, None) if not reverse else slice(None, t + 1)
    a2[:, later] = torch.randn_like(a2[:, later]) * 30
    v2[:, later] += 100.0
    mask2[:, later] = ~mask2[:, later]
    out1 = weird_scan(*on_device(a, v, log_w), reverse=reverse, mask=mask.to(DEVICE),
                      backend=BACKEND)
    out2 = weird_scan(*on_device(a2, v2, log_w), reverse=reverse, mask=mask2.to(DEVICE),
                      backend=BACKEND)
    earlier = slice(None, t) if not reverse else slice(t + 1, None)
    assert torch.equal(out1[:, earlier], out2[:, earlier])


@pytest.mark.parametrize("levels", [2, 8])
def test_decoding_is_bitwise_the_full_pass(passes, levels):
    passes(levels)
    B, L, D = 3, 29, 6
    a, v, log_w, mask = make_inputs(B, L, D, seed=29)
    a, v, log_w, mask = on_device(a.float(), v.float(), log_w.float(), mask)
    full = weird_scan(a, v, log_w, mask=mask, backend=BACKEND)
    cache = WeirdScanCache(log_w, B, backend=BACKEND)  # 5 levels: up to 32 tokens
    cut = 11
    prefix = cache.extend(a[:, :cut], v[:, :cut], mask[:, :cut])
    steps = [cache.step(a[:, t], v[:, t], mask[:, t]) for t in range(cut, L)]
    assert torch.equal(torch.cat([prefix, torch.stack(steps, 1)], 1), full)


def test_noncontiguous_inputs_extra_levels_and_empty(passes):
    passes(2)
    a, v, log_w, mask = make_inputs(2, 30, 8, seed=5)
    a, v, log_w, mask = on_device(a.float(), v.float(), log_w.float(), mask)
    base = weird_scan(a, v, log_w, mask=mask, backend=BACKEND)
    wide = torch.cat([a, a], -1)[..., 8:]
    vt = v.transpose(0, 1).contiguous().transpose(0, 1)
    extra = torch.cat([log_w, torch.randn(3, 8, device=DEVICE)])
    assert torch.equal(weird_scan(wide, vt, extra, mask=mask, backend=BACKEND), base)
    empty = weird_scan(a[:, :0].requires_grad_(), v[:, :0], log_w, backend=BACKEND)
    assert empty.shape == (2, 0, 8)


def test_autograd_saves_only_the_inputs():
    B, L, D = 2, 64, 8
    a, v, log_w, mask = make_inputs(B, L, D, seed=11)
    a, v, log_w = (x.float().to(DEVICE).requires_grad_() for x in (a, v, log_w))
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        weird_scan(a, v, log_w, mask=mask.to(DEVICE), backend=BACKEND)
    assert sum(saved) <= 2 * B * L * D + log_w.numel() + mask.numel()


# ---------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------


def resolved(device, backend=None) -> str:
    return dispatch.resolve(torch.device(device), backend).name


def test_dispatch_auto_and_forced(monkeypatch):
    monkeypatch.setenv("WEIRDNET_SCAN_SELFCHECK", "0")  # "cuda" without a GPU: no check
    assert "triton" in dispatch.BACKENDS
    assert resolved("cpu") in ("cpu", "torch")  # CPU tensors never pick Triton by themselves
    assert resolved("cuda") == "triton"  # triton imports here
    assert resolved(DEVICE, "triton") == "triton"
    monkeypatch.setenv("WEIRDNET_SCAN_BACKEND", "triton")
    assert resolved(DEVICE) == "triton"


def test_forcing_triton_on_cpu_without_the_interpreter_is_an_error(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(st, "INTERPRETED", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        weird_scan(torch.randn(1, 4, 2), torch.randn(1, 4, 2), torch.zeros(2, 2),
                   backend=BACKEND)
    with pytest.raises(ValueError, match="CUDA tensors"):
        resolved("meta", "triton")


def test_without_triton_cuda_falls_back_and_forcing_names_the_cause(monkeypatch):
    def no_triton():
        raise ImportError("ImportError: no triton")

    monkeypatch.setattr(dispatch, "_load_triton", no_triton)
    assert resolved("cuda") == "torch"
    with pytest.raises(ValueError, match="triton does not import.*no triton"):
        resolved("cpu", "triton")


# ---------------------------------------------------------------------------------------
# Long sequences
# ---------------------------------------------------------------------------------------


def paper_init_inputs(L, D, seed=64):
    """A = X W_A, V = X W_V with the papers' initialisation, log_w = cumsum(w)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, L, D, generator=g)
    w_a = torch.randn(D, D, generator=g) / math.sqrt(D)
    w_v = torch.randn(D, D, generator=g) / math.sqrt(D)
    return x @ w_a, x @ w_v, torch.randn(16, D, generator=g).cumsum(0)


STABILITY_DTYPES = [(torch.float32, 1e-5), (torch.bfloat16, 1e-2), (torch.float16, 2e-3)]


@pytest.mark.parametrize("dtype,tol", STABILITY_DTYPES)
def test_stability_64k_forward(passes, dtype, tol):
    """L = 65,536: finite and close to float64, in every input dtype.  In the interpreter
    one wide tiling (11 levels per pass) keeps it short: the running-max state that makes
    it stable is the same in every tiling, and the tilings are checked above."""
    D = 64 if CUDA else 8
    if not CUDA:
        passes(11, tile_elements=1 << 16)
    a, v, log_w = paper_init_inputs(65536, D)
    want = weird_scan(a.double(), v.double(), log_w.double(), backend="cpu" if
                      cpu_kernel.available() else "torch")
    out = weird_scan(*on_device(a.to(dtype), v.to(dtype), log_w), backend=BACKEND)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert rel_err(out.cpu(), want) <= tol


@cuda_only
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2),
                                       (torch.float16, 3e-2)])
def test_stability_64k_gradients_cuda(dtype, tol):
    a, v, log_w = on_device(*paper_init_inputs(65536, 64))
    ys = [x.double().requires_grad_() for x in (a, v, log_w)]
    # A sum, not a mean: a mean's gradients (about 1e-6 here) are float16 subnormals, which
    # hold 3 or 4 bits; with a sum they are O(1), as under a loss scaler.
    weird_scan(*ys, backend="torch").square().sum().backward()
    xs = [a.to(dtype).requires_grad_(), v.to(dtype).requires_grad_(),
          log_w.clone().requires_grad_()]
    weird_scan(*xs, backend=BACKEND).float().square().sum().backward()
    for x, y in zip(xs, ys):
        assert torch.isfinite(x.grad).all()
        assert rel_err(x.grad, y.grad) <= tol


@cuda_only
@pytest.mark.parametrize("L", [1000, 4097, 16384, 65536])
@pytest.mark.parametrize("reverse", [False, True])
def test_full_sizes_match_torch_backend_cuda(L, reverse):
    """Default tiling at full sizes against the PyTorch backend in float64."""
    B, D = 2, 64
    a, v, log_w, mask = on_device(*make_inputs(B, L, D, seed=L, scale=1.0))
    grad = torch.randn(B, L, D, dtype=torch.float64, device=DEVICE)
    keep = reach_mask(mask.cpu(), B, L, reverse).to(DEVICE).expand(B, L, D)
    results = {}
    for dtype, backend in ((torch.float64, "torch"), (torch.float32, BACKEND)):
        xs = [x.to(dtype).requires_grad_() for x in (a, v, log_w)]
        out = weird_scan(*xs, reverse=reverse, mask=mask, backend=backend)
        results[backend] = (out, torch.autograd.grad(out, xs, (grad * keep).to(dtype)))
    (out, grads), (want, want_grads) = results[BACKEND], results["torch"]
    assert torch.isfinite(out).all()
    assert rel_err(out[keep], want[keep]) <= 2e-5
    for got, ref in zip(grads, want_grads):
        assert rel_err(got, ref) <= 1e-4


# ---------------------------------------------------------------------------------------
# Packed documents
# ---------------------------------------------------------------------------------------


def packed_layout(L):
    """(doc_ids, mask) of B = 2 rows.  Row 0: 1-token documents at 0 and 3, documents
    starting at the powers of two 4, 8, 16, 64, 128 and 256 (so a level's partner lies
    exactly one document start away, and with small passes a start falls on a tile edge),
    no padding.  Row 1: starts at 2, 2L/3 and 7L/8, a padded tail from 3L/4 on (the last
    document all padding, the one before it half; at least the last token)."""
    ids = torch.zeros(2, L, dtype=torch.int64)
    rows = ([1, 3, 4, 8, 16, 64, 128, 256], [2, L - L // 3, L - L // 8])
    for b, starts in enumerate(rows):
        for s in starts:
            if 0 < s < L:
                ids[b, s:] += 1
    mask = torch.ones(2, L, dtype=torch.bool)
    mask[1, L - max(1, L // 4):] = False
    return ids, mask


def packed_reference(a, v, log_w, mask, doc_ids, reverse, split):
    """Float64 reference; reverse=None is the bidirectional form with ``split``."""
    if reverse is not None:
        return weird_scan_reference(a, v, log_w, reverse=reverse, mask=mask, doc_ids=doc_ids)
    halves = [weird_scan_reference(a[..., s], v[..., s], log_w[:, s], reverse=r, mask=mask,
                                   doc_ids=doc_ids)
              for s, r in ((slice(0, split), False), (slice(split, None), True))]
    return torch.cat(halves, -1)


def run_packed(a, v, log_w, mask, doc_ids, reverse, split, backend=BACKEND):
    if reverse is None:
        return weird_scan_bidirectional(a, v, log_w, mask=mask, doc_ids=doc_ids, split=split,
                                        backend=backend)
    return weird_scan(a, v, log_w, reverse=reverse, mask=mask, doc_ids=doc_ids,
                      backend=backend)


def output_and_grads(xs, mask, doc_ids, reverse, split, grad, backend=BACKEND):
    leaves = [x.detach().requires_grad_() for x in xs]
    out = run_packed(*leaves, mask, doc_ids, reverse, split, backend)
    return out, torch.autograd.grad(out, leaves, grad.to(out.dtype))


# (L, levels per pass): one pass (L <= 8), two passes of which the first has two tiles and
# a halo (300: its document start at 256 is a tile edge), and small passes: many windows.
PACKED_CASES = [(1, 8), (2, 8), (3, 8), (7, 8), (300, 8), (37, 2), (100, 3)]


@pytest.mark.parametrize("L,levels", PACKED_CASES)
@pytest.mark.parametrize("reverse", [False, True, None])
def test_packed_documents_match_reference_and_torch(passes, L, levels, reverse):
    """Forward and dA, dV, d log_w with packed documents: float64 against the reference
    (exact up to rounding), float32 against the PyTorch backend; everything finite."""
    passes(levels)
    B, D = 2, 5 if L < 300 else 3
    split = 2  # bidirectional: 2 causal channels, D - 2 anti-causal
    a, v, log_w, _ = make_inputs(B, L, D, seed=100 + L + levels, masked=False)
    doc_ids, mask = packed_layout(L)
    # Seeded: the global generator's state depends on which tests an xdist worker ran first.
    grad = torch.randn(B, L, D, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(L + levels))
    leaves = [x.clone().requires_grad_() for x in (a, v, log_w)]
    ref = packed_reference(*leaves, mask, doc_ids, reverse, split)
    keep = torch.isfinite(ref)  # the reference is 0/0 where no real token is in reach
    grad = grad * keep
    ref_grads = torch.autograd.grad(ref.nan_to_num(), leaves, grad)

    xs = on_device(a, v, log_w)
    out, grads = output_and_grads(xs, *on_device(mask, doc_ids), reverse, split,
                                  grad.to(DEVICE))
    assert out.dtype == torch.float64 and torch.isfinite(out).all()
    assert rel_err(out.cpu()[keep], ref[keep]) <= 1e-12
    for name, got, want in zip(("a", "v", "log_w"), grads, ref_grads):
        assert torch.isfinite(got).all(), name
        assert rel_err(got.cpu(), want) <= 1e-10, name

    xs = [x.float() for x in xs]
    results = [output_and_grads(xs, *on_device(mask, doc_ids), reverse, split,
                                grad.to(DEVICE), backend)
               for backend in (BACKEND, "torch")]
    (out, grads), (want, want_grads) = results
    assert torch.isfinite(out).all()
    assert rel_err(out, want) <= 1e-5
    # A gradient that is zero in exact arithmetic (dA of a position alone in its reach: at
    # L = 2 every one) is float32 rounding noise in both backends, so its relative error
    # means nothing; the error is measured against at least 1e-3 of the output gradient's
    # norm (found on an H100: 0.90 "relative" error between two noises of 1e-8) times the
    # values' largest magnitude: dA's and d log_w's terms are grad·p·(v - out), so their
    # rounding noise grows with |v| (CI, stop 78: 1.0001e-4 at L = 1 with the floor |grad|).
    floor = 1e-3 * grad.norm().item() * max(1.0, v.abs().max().item())
    for name, got, want in zip(("a", "v", "log_w"), grads, want_grads):
        assert torch.isfinite(got).all(), name
        err = (got.double() - want.double()).norm() / max(want.double().norm().item(), floor)
        assert err <= 1e-4, name


@pytest.mark.parametrize("levels", [2, 8])
def test_packed_edge_layouts_are_bitwise(passes, levels):
    """One document per row is the unpacked scan bit for bit (the gate never fires), ids
    that repeat after another document are their canonical form, and one document per
    token gives O = V (nothing to mix with)."""
    passes(levels)
    B, L, D = 2, 37, 4
    a, v, log_w, mask = on_device(*make_inputs(B, L, D, seed=8))
    ids, _ = packed_layout(L)
    repeats = ids % 2 * 7 + 3  # 3, 10, 3, 10, ...: a new document at every change
    for reverse in (False, True, None):
        plain = run_packed(a, v, log_w, mask, None, reverse, 2)
        single = run_packed(a, v, log_w, mask, torch.full((B, L), 4, device=DEVICE), reverse,
                            2)
        assert torch.equal(plain, single)
        canonical = run_packed(a, v, log_w, mask, ids.to(DEVICE), reverse, 2)
        assert torch.equal(run_packed(a, v, log_w, mask, repeats.to(DEVICE), reverse, 2),
                           canonical)
    alone = torch.arange(L, device=DEVICE).expand(B, L)
    out = run_packed(a, v, log_w, None, alone, None, 2)
    assert rel_err(out, v) <= 1e-15


def test_the_compile_time_script_compiles_every_kernel_for_a_gpu(tmp_path):
    """lab/benchmarks/triton_compile_time.py compiles the forward and backward kernels for
    sm_90 ahead of time (no GPU needed, only the ptxas that triton's wheel carries)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "lab" / "benchmarks" / "triton_compile_time.py"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "ptxas" in done.stderr.lower():
        pytest.skip("this triton cannot compile for a GPU here (no ptxas)")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| forward")
            or line.startswith("| backward")]
    assert len(rows) == 4  # forward and backward, two passes at L = 1024
    assert (tmp_path / "triton_compile_time_cpu.md").read_text() == done.stdout



@pytest.mark.parametrize("L,levels,n_passes,held", [(37, 3, 2, 5), (300, 3, 3, 8),
                                                    (100, 2, 4, 10)])
def test_backward_holds_dA_and_dV_only_for_the_first_pass(passes, monkeypatch, L, levels,
                                                          n_passes, held):
    """The (B, L, D) tensors the backward allocates, counted while alive, peak at
    ``held``: with n passes, the recomputed inputs of passes 2..n (2 each) and then, at
    middle pass i, its input and those below it (2i), the later pass's adjoint (3) and its
    own (3).  dA and dV (2) are allocated when the first pass starts, so they never join
    a middle pass's buffers (the peak that set the scan's extra memory at 16K on a GPU)."""
    import weakref

    passes(levels)
    nlev = max(1, math.ceil(math.log2(L)))
    assert len(st.plan(L, nlev)) == n_passes
    a, v, log_w, _ = make_inputs(2, L, 8, seed=1, masked=False)
    grad = torch.randn_like(a)
    a, v, log_w, grad = on_device(*(x.float() for x in (a, v, log_w, grad)))
    live, peak, empty = [0], [0], torch.empty

    def counted(*size, **kwargs):
        tensor = empty(*size, **kwargs)
        if tensor.shape == a.shape:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            weakref.finalize(tensor, lambda: live.__setitem__(0, live[0] - 1))
        return tensor

    monkeypatch.setattr(torch, "empty", counted)
    da, dv, dlogw = st.bwd(a, v, log_w.contiguous(), None, None, grad, 8, nlev)
    monkeypatch.undo()
    assert peak[0] == held
    inputs = [x.double().cpu().requires_grad_() for x in (a, v, log_w)]
    out = weird_scan_reference(*inputs, reverse=False)
    want = torch.autograd.grad((out * grad.double().cpu()).sum(), inputs)
    for got, ref in zip((da, dv, dlogw), want):
        assert rel_err(got.cpu().double(), ref) < 1e-4


@pytest.mark.parametrize("reverse,split", [(False, None), (None, 20), (None, 16),
                                           (None, 0), (None, 40)])
def test_channel_chunks_give_the_whole_scan_bit_for_bit(passes, monkeypatch, reverse,
                                                        split):
    """A large scan runs in channel chunks (each pass's state tensors within
    STATE_CHUNK_BYTES): forward, dA and dV are the unchunked scan's bit for bit, with
    packed documents, padding, and the causal/anti-causal split inside a chunk, on a
    chunk edge, and at either end.  d log_w is too in the interpreter; on CUDA torch's
    reduction of the blocks' partial sums orders its terms by the tensor's width, so
    there it agrees to float32 rounding (found on an H100 at 76daefc)."""
    passes(3)  # three passes at L = 100, halos included
    L, D = 100, 40
    doc_ids, mask = packed_layout(L)
    a, v, log_w, _ = make_inputs(2, L, D, seed=3, masked=False)
    grad = torch.randn(2, L, D, dtype=torch.float64)
    xs = on_device(*(x.float() for x in (a, v, log_w)))
    mask, doc_ids, grad = on_device(mask, doc_ids, grad.float())
    split = D // 2 if split is None else split

    def both():
        leaves = [x.detach().requires_grad_() for x in xs]
        if reverse is None:
            out = weird_scan_bidirectional(*leaves, mask=mask, doc_ids=doc_ids, split=split,
                                           backend=BACKEND)
        else:
            out = weird_scan(*leaves, reverse=reverse, mask=mask, doc_ids=doc_ids,
                             backend=BACKEND)
        return out, torch.autograd.grad(out, leaves, grad)

    def peak_bytes():  # of the scan's own (B, L, *) buffers, counted while alive
        import weakref

        live, peak, empty = [0], [0], torch.empty

        def counted(*size, **kwargs):
            tensor = empty(*size, **kwargs)
            if tensor.dim() == 3 and tensor.shape[:2] == (2, L):
                nbytes = tensor.numel() * tensor.element_size()
                live[0] += nbytes
                peak[0] = max(peak[0], live[0])
                weakref.finalize(tensor, lambda: live.__setitem__(0, live[0] - nbytes))
            return tensor

        with monkeypatch.context() as patch:
            patch.setattr(torch, "empty", counted)
            result = both()
        return result, peak[0]

    whole, whole_peak = peak_bytes()
    assert len(st.channel_chunks(2, L, D, torch.float32)) == 1
    monkeypatch.setattr(st, "CHUNK_ALIGN", 16)
    monkeypatch.setattr(st, "STATE_CHUNK_BYTES", 2 * L * 4 * 16)  # 16 channels a chunk
    assert [(c.start, c.stop) for c in st.channel_chunks(2, L, D, torch.float32)] == \
        [(0, 16), (16, 32), (32, 40)]
    chunked, chunked_peak = peak_bytes()
    # in channels of (B, L) float32: whole, a middle pass's 8 state tensors of 40 beside
    # the forward's output (40); chunked, 8 of 16 beside it and the whole dA and dV (80)
    assert chunked_peak <= whole_peak * (8 * 16 + 40 + 80) / (8 * 40 + 40)
    assert torch.equal(whole[0], chunked[0])
    d_a, d_v, d_log_w = chunked[1]
    assert torch.equal(d_a, whole[1][0]) and torch.equal(d_v, whole[1][1])
    if DEVICE == "cpu":
        assert torch.equal(d_log_w, whole[1][2])
    else:  # torch's CUDA sum over the blocks' partial sums orders by the chunk's width
        assert rel_err(d_log_w.double(), whole[1][2].double()) <= 1e-6


def test_channel_chunks_at_the_gpu_benchmark_sizes():
    """B = 8, D = 1024: one chunk through L = 4K in float32, four of 256 at 16K; float64
    state halves the chunk; never narrower than CHUNK_ALIGN."""
    sizes = lambda L, dtype=torch.float32: [c.stop - c.start for c in  # noqa: E731
                                           st.channel_chunks(8, L, 1024, dtype)]
    assert sizes(1024) == [1024] and sizes(4096) == [1024]
    assert sizes(16384) == [256] * 4 and sizes(16384, torch.float64) == [128] * 8
    assert set(sizes(1 << 24)) == {st.CHUNK_ALIGN}
    assert st.channel_chunks(0, 0, 8, torch.float32) == [slice(0, 8)]
