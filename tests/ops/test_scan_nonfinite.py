"""Non-finite inputs of weird_scan are never hidden: every backend against the reference.

The float64 reference is the specification (``weirdnet.ops.weird_scan.reference``):
  * NaN or +inf in A, NaN or +-inf in V at a real position j: NaN at every output with j
    in its window (causal i >= j, reverse i <= j), in that channel only;
  * -inf in A: a zero weight, exactly as if j were padding, except that an output whose
    real tokens are all -inf is NaN (0/0);
  * gradients: NaN for every real input in the window of a NaN output and for d log_w of
    its channel, 0 for padding, finite and exact everywhere else.
The fast backends return 0 where only padding is in reach (the reference: NaN); that
behaviour is unchanged and checked here too.  One call covers every kind of value: each
channel holds one kind, each batch row puts it at the start, the middle or the end.
"""

import functools
import importlib
import os

import pytest
import torch

from helpers.numerics import random_log_w, rel_err
from helpers.scan import reach_mask
from weirdnet.ops import (
    WeirdScanCache,
    levels_needed,
    weird_scan,
    weird_scan_bidirectional,
    weird_scan_reference,
)
from weirdnet.ops.weird_scan import cpu as _cpu_kernel
from weirdnet.ops.weird_scan import dispatch

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # the Triton interpreter computes with numpy, which warns about NaN and 0/0: expected
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
]

NAN, INF = float("nan"), float("inf")
LENGTHS = [1, 2, 3, 7, 33, 1000]
DIRECTIONS = [False, True, None]  # causal, reverse, bidirectional
# One channel per kind (in each half of the channels, for the bidirectional form).
KINDS = [("a", NAN), ("a", INF), ("a", -INF), ("v", NAN), ("v", INF), ("v", -INF)]
EVERY_THIRD, ALL_MINUS_INF, CLEAN = len(KINDS), len(KINDS) + 1, len(KINDS) + 2
HALF = len(KINDS) + 3
TOL = {torch.float64: (1e-11, 1e-10), torch.float32: (2e-5, 1e-4)}  # (output, gradients)
CUDA = torch.cuda.is_available()


# ---------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------


def _triton_kernels():
    """``weirdnet.ops.weird_scan.triton``, built for the interpreter when there is no GPU (as in
    test_scan_triton); None when triton does not import or was built for a missing GPU."""
    try:
        importlib.import_module("triton")
    except Exception:
        return None
    old = os.environ.get("TRITON_INTERPRET")
    if not CUDA:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.import_module("weirdnet.ops.weird_scan.triton")
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old
    return module if CUDA or module.INTERPRETED else None


@pytest.fixture(params=["cpu", "torch", pytest.param("triton", marks=pytest.mark.slow)])
def backend(request, monkeypatch):
    """A backend name.  Triton takes 2 levels per pass up to L = 8 and 3 up to L = 64, so
    that short sequences take the multi-pass path (pass boundaries, halos) that long ones
    take with the default (8: two passes at L = 1000; smaller passes are too slow in the
    interpreter there)."""
    name = request.param
    if name == "cpu" and not _cpu_kernel.available():
        pytest.skip("no C compiler: the fused CPU kernel is unavailable")
    if name == "triton":
        # the kernels themselves: no self-check that could swap in the PyTorch backend
        monkeypatch.setenv(dispatch.ENV_SELFCHECK, "0")
        kernels = _triton_kernels()
        if kernels is None:
            pytest.skip("triton is not importable (or was built for a GPU this host lacks)")
        callspec = getattr(request.node, "callspec", None)
        L = 0 if callspec is None else callspec.params.get("L", 0)
        if L <= 64:
            monkeypatch.setattr(kernels, "LEVELS_PER_PASS", 2 if L <= 8 else 3)
    return name


def device_of(backend):
    return "cuda" if backend == "triton" and CUDA else "cpu"


def scan(backend, a, v, log_w, mask, direction):
    """weird_scan in ``direction`` (None: bidirectional, split D // 2) on the backend's
    device; returns the output there."""
    dev = device_of(backend)
    a, v, log_w = (x.to(dev) for x in (a, v, log_w))
    mask = None if mask is None else mask.to(dev)
    if direction is None:
        return weird_scan_bidirectional(a, v, log_w, mask=mask, backend=backend)
    return weird_scan(a, v, log_w, reverse=direction, mask=mask, backend=backend)


def scan_with_grads(backend, a, v, log_w, mask, direction, grad, dtype):
    """(O, dA, dV, dlog_w) in ``dtype``, on the CPU, for the loss sum(grad * O)."""
    dev = device_of(backend)
    leaves = [x.detach().to(dtype).to(dev).requires_grad_() for x in (a, v, log_w)]
    out = scan(backend, *leaves, mask, direction)
    grads = torch.autograd.grad(out, leaves, grad.to(dtype).to(dev))
    return [x.detach().cpu() for x in (out, *grads)]


# ---------------------------------------------------------------------------------------
# Inputs and the reference
# ---------------------------------------------------------------------------------------


def positions(L):
    """Where batch row r puts its non-finite values: the start, the middle, the end."""
    return (0, L // 2, L - 1)


def make_case(L, seed=0):
    """Float64 (a, v, log_w, grad), a and v (3, L, 2 * HALF) with one kind of value per
    channel (both halves alike) at position positions(L)[r] of batch row r."""
    g = torch.Generator().manual_seed(seed + L)
    D = 2 * HALF
    a = torch.randn(3, L, D, dtype=torch.float64, generator=g) * 2
    v = torch.randn(3, L, D, dtype=torch.float64, generator=g)
    log_w = random_log_w(max(1, levels_needed(L)), D, generator=g)
    grad = torch.randn(3, L, D, dtype=torch.float64, generator=g)
    for r, p in enumerate(positions(L)):
        for half in (0, HALF):
            for c, (name, value) in enumerate(KINDS):
                (a if name == "a" else v)[r, p, half + c] = value
            a[r, p % 3 :: 3, half + EVERY_THIRD] = -INF  # -inf meets -inf in the scan
            a[r, :, half + ALL_MINUS_INF] = -INF
    return a, v, log_w, grad


def case_mask(L, seed=0):
    """(3, L) padding mask, ~30% padded at random."""
    g = torch.Generator().manual_seed(100 + seed + L)
    return torch.rand(3, L, generator=g) > 0.3


def reference_with_grads(a, v, log_w, mask, direction, grad):
    """Float64 (O, dA, dV, dlog_w) of the reference, one (batch row, channel) at a time
    (the scan is separable, and this keeps the O(L^2) temporaries small)."""
    B, L, D = a.shape
    out, da, dv = (torch.empty(B, L, D, dtype=torch.float64) for _ in range(3))
    dlogw = torch.zeros_like(log_w)
    for d in range(D):
        rev = direction if direction is not None else d >= D // 2
        for b in range(B):
            leaves = [x[b : b + 1, :, d : d + 1].clone().requires_grad_() for x in (a, v)]
            lw = log_w[:, d : d + 1].clone().requires_grad_()
            msk = None if mask is None else mask[b : b + 1]
            o = weird_scan_reference(*leaves, lw, reverse=rev, mask=msk)
            ga, gv, gw = torch.autograd.grad(o, [*leaves, lw], grad[b : b + 1, :, d : d + 1])
            out[b, :, d], da[b, :, d], dv[b, :, d] = o[0, :, 0], ga[0, :, 0], gv[0, :, 0]
            dlogw[:, d] += gw[:, 0]
    return out.detach(), da, dv, dlogw


@functools.cache
def reference_case(L, direction, masked):
    """(inputs, reference results, padding-only outputs) of one case, computed once."""
    a, v, log_w, grad = make_case(L)
    mask = case_mask(L) if masked else None
    ref = reference_with_grads(a, v, log_w, mask, direction, grad)
    return (a, v, log_w, grad, mask), ref, padding_only(mask, L, direction, a.shape[-1])


def padding_only(mask, L, direction, D):
    """(3, L, D) True where only padding is in reach (reference NaN, backends 0)."""
    if mask is None:
        return torch.zeros(3, L, D, dtype=torch.bool)
    if direction is None:
        half = D // 2
        return torch.cat([~reach_mask(mask, 3, L, False).expand(3, L, half),
                          ~reach_mask(mask, 3, L, True).expand(3, L, D - half)], -1)
    return ~reach_mask(mask, 3, L, direction).expand(3, L, D)


def assert_matches(got, want, tol, name, skip=None):
    """Same NaN pattern (no inf anywhere), finite values within ``tol`` (relative)."""
    if skip is not None:
        got, want = got[~skip], want[~skip]
    assert not torch.isinf(got).any(), f"{name}: inf where the reference has NaN or a value"
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    assert torch.equal(nan_got, nan_want), (
        f"{name}: {int((nan_got & ~nan_want).sum())} unexpected NaN, "
        f"{int((~nan_got & nan_want).sum())} NaN hidden")
    assert rel_err(got[~nan_got], want[~nan_want]) <= tol, name


# ---------------------------------------------------------------------------------------
# Every kind of value, every backend, form and length, forward and backward
# ---------------------------------------------------------------------------------------


def test_the_reference_is_the_specification():
    """The semantics on one small causal case, written out by hand."""
    L = 5
    a, v, log_w, _ = make_case(L)
    out = weird_scan_reference(a, v, log_w)
    zero = KINDS.index(("a", -INF))
    for r, p in enumerate(positions(L)):
        for c in range(len(KINDS)):
            if c != zero:  # NaN from p on, finite before
                assert torch.isnan(out[r, p:, c]).all()
                assert torch.isfinite(out[r, :p, c]).all()
        assert torch.isnan(out[r, 0, zero]).item() == (p == 0)  # -inf alone: 0/0
        assert torch.isfinite(out[r, 1:, zero]).all()
        assert torch.isnan(out[r, :, ALL_MINUS_INF]).all()
        assert torch.isfinite(out[r, :, CLEAN]).all()
    left_out = torch.ones(3, L, dtype=torch.bool)
    left_out[1, 2] = False  # row 1 has its -inf at position 2: the same as padding there
    want = weird_scan_reference(a.nan_to_num(0, 0, 0), v.nan_to_num(0, 0, 0), log_w,
                                mask=left_out)
    assert torch.allclose(out[1, :, zero], want[1, :, zero], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("direction", DIRECTIONS, ids=["causal", "reverse", "bidir"])
@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_values_and_gradients_match_reference(backend, L, direction, masked, dtype):
    if backend == "triton" and not CUDA and L > 7 and (dtype == torch.float64 or
                                                     (L == 1000 and not masked)):
        pytest.skip("interpreter time: float32 covers the longer sequences, the masked "
                    "forms L = 1000")
    (a, v, log_w, grad, mask), ref, pad_only = reference_case(L, direction, masked)
    got = scan_with_grads(backend, a, v, log_w, mask, direction, grad, dtype)
    out_tol, grad_tol = TOL[dtype]
    assert got[0].dtype == dtype
    assert_matches(got[0], ref[0], out_tol, "output", skip=pad_only)
    assert torch.equal(got[0][pad_only], torch.zeros_like(got[0][pad_only]))  # as before
    for name, g, want in zip(("dA", "dV", "dlog_w"), got[1:], ref[1:]):
        assert_matches(g, want, grad_tol, name)
    if mask is not None:  # padded inputs get exactly 0, even next to a NaN
        pad = ~mask.unsqueeze(-1).expand_as(a)
        assert not got[1][pad].any() and not got[2][pad].any()


# ---------------------------------------------------------------------------------------
# -inf is a zero weight, exactly like padding
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", DIRECTIONS, ids=["causal", "reverse", "bidir"])
@pytest.mark.parametrize("L", [7, 33, 1000])
def test_minus_inf_is_bitwise_padding(backend, direction, L):
    """A -inf logit gives the outputs and gradients of the same token padded, bit for bit,
    wherever a finite logit is in reach (here: everywhere; both ends are finite)."""
    if backend == "triton" and not CUDA and L == 1000:
        pytest.skip("interpreter time; L = 33 takes two passes already")
    g = torch.Generator().manual_seed(L)
    B, D = 2, 6
    a = torch.randn(B, L, D, generator=g)
    v = torch.randn(B, L, D, generator=g)
    log_w = random_log_w(levels_needed(L), D, dtype=torch.float32, generator=g)
    grad = torch.randn(B, L, D, generator=g)
    mask = torch.rand(B, L, generator=g) > 0.2
    mask[:, 0] = mask[:, -1] = True
    drop = (torch.rand(B, L, generator=g) < 0.3) & mask
    drop[:, 0] = drop[:, -1] = False
    a_inf = a.masked_fill(drop.unsqueeze(-1), -INF)  # every channel of a dropped token
    with_inf = scan_with_grads(backend, a_inf, v, log_w, mask, direction, grad, torch.float32)
    padded = scan_with_grads(backend, a, v, log_w, mask & ~drop, direction, grad,
                             torch.float32)
    for name, x, y in zip(("output", "dA", "dV", "dlog_w"), with_inf, padded):
        assert torch.isfinite(x).all(), name
        assert torch.equal(x, y), name


def test_minus_inf_and_padding_windows(backend):
    """Padding-only windows stay 0 (as before); a window whose real tokens are all -inf is
    NaN, padded positions in it included; its gradients are NaN, padding's 0."""
    L, D = 12, 4
    g = torch.Generator().manual_seed(12)
    a, v = torch.randn(2, L, D, generator=g), torch.randn(2, L, D, generator=g)
    log_w = random_log_w(levels_needed(L), D, dtype=torch.float32, generator=g)
    mask = torch.ones(2, L, dtype=torch.bool)
    mask[:, :3] = False  # positions 0-2: padding only
    mask[:, 4] = False
    a[:, 3] = -INF  # position 3: the first real token, with a -inf logit
    a[0, 5:] = -INF  # row 0: no finite logit at all
    out, da, dv, dlogw = scan_with_grads(backend, a, v, log_w, mask, False,
                                         torch.randn(2, L, D, generator=g), torch.float32)
    assert torch.equal(out[:, :3], torch.zeros_like(out[:, :3]))
    assert torch.isnan(out[0, 3:]).all()
    assert torch.isnan(out[1, 3:5]).all() and torch.isfinite(out[1, 5:]).all()
    assert torch.isnan(da[0, mask[0]]).all() and torch.isnan(dv[0, mask[0]]).all()
    assert torch.isnan(da[1, 3]).all() and torch.isfinite(da[1, 5:]).all()
    for grad in (da, dv):
        assert torch.equal(grad[~mask], torch.zeros_like(grad[~mask]))
    assert torch.isnan(dlogw).all()


# ---------------------------------------------------------------------------------------
# Padding and log_w rows out of use hide what they hold, as before
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", DIRECTIONS, ids=["causal", "reverse", "bidir"])
def test_nonfinite_padding_changes_nothing(backend, direction):
    L, D = 33, 6
    g = torch.Generator().manual_seed(33)
    a, v = torch.randn(2, L, D, generator=g), torch.randn(2, L, D, generator=g)
    log_w = random_log_w(levels_needed(L), D, dtype=torch.float32, generator=g)
    grad = torch.randn(2, L, D, generator=g)
    mask = torch.rand(2, L, generator=g) > 0.3
    mask[:, 0] = mask[:, -1] = True
    pad = ~mask.unsqueeze(-1).expand_as(a)
    junk = torch.tensor([NAN, INF, -INF]).repeat(a.numel() // 3 + 1)[: a.numel()]
    a2 = torch.where(pad, junk.view_as(a), a)
    v2 = torch.where(pad, junk.view_as(a).roll(1), v)
    clean = scan_with_grads(backend, a, v, log_w, mask, direction, grad, torch.float32)
    dirty = scan_with_grads(backend, a2, v2, log_w, mask, direction, grad, torch.float32)
    for name, x, y in zip(("output", "dA", "dV", "dlog_w"), dirty, clean):
        assert torch.isfinite(x).all(), name
        assert torch.equal(x, y), name
    assert not dirty[1][pad].any() and not dirty[2][pad].any()


def test_log_w_rows_beyond_the_levels_used_are_not_read(backend):
    a, v, log_w, _ = make_case(7)
    a, v = a[..., CLEAN :: HALF].float(), v[..., CLEAN :: HALF].float()
    log_w = log_w[:, :2].float()
    extra = torch.cat([log_w, torch.full((2, 2), NAN)])
    base = scan(backend, a, v, log_w, None, False).cpu()
    assert torch.isfinite(base).all()
    assert torch.equal(scan(backend, a, v, extra, None, False).cpu(), base)


# ---------------------------------------------------------------------------------------
# Non-finite log_w: refused (issue 65, item 8), unlike a and v, whose NaN is propagated
# ---------------------------------------------------------------------------------------

LOG_W_REFUSED = r"^log_w must be finite, got (inf|-inf|nan) at level 1, channel 2 "


def _log_w_with(value, L=9, D=4, dtype=torch.float32):
    """(a, v, log_w) with ``value`` at log_w[1, 2], a level that a scan of L uses."""
    g = torch.Generator().manual_seed(65)
    a, v = (torch.randn(2, L, D, generator=g, dtype=dtype) for _ in range(2))
    log_w = random_log_w(levels_needed(L), D, generator=g).to(dtype)
    log_w[1, 2] = value
    return a, v, log_w


NONFINITE = pytest.mark.parametrize("value", [INF, -INF, NAN], ids=["inf", "-inf", "nan"])


@pytest.mark.parametrize("direction", DIRECTIONS, ids=["causal", "reverse", "bidir"])
@NONFINITE
def test_nonfinite_log_w_is_refused_like_the_reference(backend, value, direction):
    """One ValueError line naming log_w, from every backend and from the reference (which
    used to disagree: NaN over the whole channel against NaN at some positions or none)."""
    if backend == "triton" and CUDA:
        pytest.skip("on CUDA the values of log_w are not read")
    a, v, log_w = _log_w_with(value)
    with pytest.raises(ValueError, match=LOG_W_REFUSED) as err:
        scan(backend, a, v, log_w, None, direction)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=LOG_W_REFUSED):
        weird_scan_reference(a, v, log_w, reverse=bool(direction))


@pytest.mark.slow  # torch.compile with inductor
@NONFINITE
def test_nonfinite_log_w_is_refused_by_the_custom_op_compiled_and_the_cache(value):
    """The custom op itself (called directly, or inside a compiled graph) and the
    decoding cache refuse it too, so no path computes with it."""
    a, v, log_w = _log_w_with(value)
    with pytest.raises(ValueError, match=LOG_W_REFUSED):
        torch.ops.weirdnet.weird_scan(a, v, log_w, None, None, a.shape[-1], "torch")

    compiled = torch.compile(lambda a, v, w: weird_scan(a, v, w, backend="torch"),
                             fullgraph=True, backend="eager")
    assert torch.isfinite(compiled(a, v, log_w.nan_to_num(posinf=1.0, neginf=-1.0))).all()
    with pytest.raises(ValueError, match=LOG_W_REFUSED):
        compiled(a, v, log_w)
    with pytest.raises(ValueError, match=LOG_W_REFUSED):
        WeirdScanCache(log_w, 2)


# ---------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------


def assert_same_bits(x, y):
    assert torch.equal(torch.isnan(x), torch.isnan(y))
    assert torch.equal(x.nan_to_num(), y.nan_to_num())


@pytest.mark.parametrize("L", [1, 2, 3, 7, 33])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_decoding_is_bitwise_the_full_pass(backend, L, dtype):
    """step / extend with non-finite tokens: the full causal pass's values and NaN, and
    so the reference's NaN pattern."""
    (a, v, log_w, _, mask), ref, _ = reference_case(L, False, True)
    dev = device_of(backend)
    a, v, log_w, mask = a.to(dtype).to(dev), v.to(dtype).to(dev), log_w.to(dtype).to(dev), \
        mask.to(dev)
    full = weird_scan(a, v, log_w, mask=mask, backend=backend)
    cache = WeirdScanCache(log_w, 3, backend=backend)
    cut = L // 2
    prefix = cache.extend(a[:, :cut], v[:, :cut], mask[:, :cut])
    steps = [cache.step(a[:, t], v[:, t], mask[:, t]) for t in range(cut, L)]
    decoded = torch.cat([prefix, *[s.unsqueeze(1) for s in steps]], 1)
    assert_same_bits(decoded.cpu(), full.cpu())
    pad_only = padding_only(mask.cpu(), L, False, a.shape[-1])
    assert_matches(decoded.cpu(), ref[0], TOL[dtype][0], "decoded", skip=pad_only)
