"""Backend "chunk" (the chunked factorization in PyTorch) against the float64 reference.

Every backend test of test_scan, test_scan_packed and test_scan_nonfinite runs here on
"chunk" (imported, with this module's ``backend`` fixture), except decoding, which is the
PyTorch backend's ring-buffer step and so equals this pass to rounding, not bit for bit
(tested below).  Short sequences take small chunks (C = 2 up to L = 8, C = 4 up to
L = 100), so that they cross many chunk boundaries, as long ones do with C = 64.  Then
what only this backend has: the exact path for wide spreads, bitwise causality when a
future chunk takes it, documents starting inside chunks, and the opt-in dispatch.
"""

import pytest
import torch
from test_scan import (  # noqa: F401  (collected here, on backend "chunk")
    test_backends_agree_and_noncontiguous_inputs,
    test_bidirectional_is_forward_then_backward_halves,
    test_exact_causality_float32,
    test_extra_levels_are_ignored,
    test_float32_gradients_at_4096_match_float64,
    test_forward_matches_reference,
    test_fully_padded_rows_are_finite_and_get_zero_gradient,
    test_gradcheck_float64,
    test_gradients_match_reference,
    test_gradients_of_padding_far_from_real_tokens,
    test_gradients_with_wide_spread_log_w,
    test_gradients_with_widely_spread_logits,
    test_long_sequence_stability_64k,
    test_ps_attention_is_softmax_weighted_prefix_mean,
)
from test_scan_nonfinite import (  # noqa: F401
    test_log_w_rows_beyond_the_levels_used_are_not_read,
    test_minus_inf_and_padding_windows,
    test_minus_inf_is_bitwise_padding,
    test_nonfinite_log_w_is_refused_like_the_reference,
    test_nonfinite_padding_changes_nothing,
    test_values_and_gradients_match_reference,
)
from test_scan_packed import (  # noqa: F401
    test_each_document_as_alone,
    test_one_document_changes_nothing,
    test_packed_matches_reference,
)

from helpers.numerics import rel_err
from helpers.scan import make_inputs
from weirdnet.ops import WeirdScanCache, levels_needed, weird_scan, weird_scan_reference
from weirdnet.ops.weird_scan import chunk, dispatch
from weirdnet.ops.weird_scan.reference import log_kernel

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]


def chunk_levels_for(L: int) -> int:
    """Levels per chunk for a test at length L: small chunks for short sequences."""
    if L <= 8:
        return 1
    if L <= 100:
        return 2
    return chunk.LEVELS_PER_CHUNK


@pytest.fixture(autouse=True)
def seeded():
    """The imported tests draw some inputs from the global generator (test_scan_packed's
    output gradient): seeded here, so that a test does not pass or fail by the ones
    before it (at 80 x N(0, 1) logits float32 dA cancels past 1e-4 for some draws, in
    the "torch" backend too).  The generator is put back afterwards."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        yield


@pytest.fixture
def backend(request, monkeypatch):
    callspec = getattr(request.node, "callspec", None)
    L = None if callspec is None else callspec.params.get("L")
    if L is not None:
        monkeypatch.setattr(chunk, "LEVELS_PER_CHUNK", chunk_levels_for(L))
    return "chunk"


@pytest.fixture
def exact_calls(monkeypatch):
    """Counts the columns that take the exact path (forward products)."""
    seen = []
    original = chunk.exact_columns

    def counted(rhs, logs, cols):
        seen.append(cols.numel())
        return original(rhs, logs, cols)

    monkeypatch.setattr(chunk, "exact_columns", counted)
    return seen


def _grads(a, v, log_w, mask, doc_ids, reverse, grad, backend=None):
    leaves = [x.detach().clone().requires_grad_() for x in (a, v, log_w)]
    if backend is None:
        out = weird_scan_reference(*leaves, reverse=reverse, mask=mask, doc_ids=doc_ids)
        return out.detach(), torch.autograd.grad(out.nan_to_num(), leaves, grad)
    out = weird_scan(*leaves, reverse=reverse, mask=mask, doc_ids=doc_ids, backend=backend)
    return out.detach(), torch.autograd.grad(out, leaves, grad.to(out.dtype))


@pytest.mark.parametrize("L", [7, 300, 1000])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("docs", [False, True], ids=["nodocs", "docs"])
def test_wide_spread_takes_the_exact_path_and_matches(backend, exact_calls, L, reverse,
                                                      docs):
    """log_w = cumsum(randn) over the levels and logits of 40 x N(0, 1) (spread far
    over 60): in float32 the product's columns take the exact path, and the output and
    every gradient still match the float64 reference (float64: its safe range is 600,
    so mostly the product, which must match too)."""
    B, D = 2, 6
    g = torch.Generator().manual_seed(L)
    a = torch.randn(B, L, D, dtype=torch.float64, generator=g) * 40
    v = torch.randn(B, L, D, dtype=torch.float64, generator=g)
    log_w = torch.randn(levels_needed(L), D, dtype=torch.float64, generator=g).cumsum(0)
    doc_ids = (torch.arange(L) // 50).expand(B, L) if docs else None
    grad = torch.randn(B, L, D, dtype=torch.float64, generator=g)
    assert (a.amax() - a.amin()) > 60
    want, want_grads = _grads(a, v, log_w, None, doc_ids, reverse, grad)
    for dtype, tol in ((torch.float64, 1e-8), (torch.float32, 1e-4)):
        exact_calls.clear()
        out, grads = _grads(a.to(dtype), v.to(dtype), log_w.to(dtype), None, doc_ids,
                            reverse, grad, backend)
        if dtype == torch.float32:
            assert sum(exact_calls) > 0, "no column took the exact path"
        assert rel_err(out, want) <= tol / 10
        for name, got, ref in zip(("dA", "dV", "dlog_w"), grads, want_grads):
            assert torch.isfinite(got).all(), name
            assert rel_err(got, ref) <= tol, name


def test_narrow_inputs_take_the_product(exact_calls):
    a, v, log_w, mask = make_inputs(2, 1000, 8, seed=2, scale=1.0)
    weird_scan(a.float(), v.float(), log_w.float(), mask=mask, backend="chunk")
    assert exact_calls == []


@pytest.mark.parametrize("c", [2, 6])
@pytest.mark.parametrize("reverse", [False, True])
def test_bitwise_causal_with_an_exact_path_and_documents_in_the_future(monkeypatch, c,
                                                                       reverse):
    """Changing everything from t on (values x 30, so that later chunks take the exact
    path; the mask; new document starts) leaves every earlier output bitwise equal: no
    scale and no path decision of a chunk looks at a later one."""
    bitwise_causality_case(monkeypatch, c, reverse, "chunk")


def bitwise_causality_case(monkeypatch, c: int, reverse: bool, backend: str) -> None:
    monkeypatch.setattr(chunk, "LEVELS_PER_CHUNK", c)
    B, L, D, t = 2, 333, 24, 150
    a, v, log_w, mask = (x.float() if x.dtype != torch.bool else x
                         for x in make_inputs(B, L, D, seed=7, scale=2.0))
    doc = (torch.arange(L) // 70).expand(B, L).clone()
    a2, v2, mask2, doc2 = a.clone(), v.clone(), mask.clone(), doc.clone()
    later = slice(t, None) if not reverse else slice(None, t + 1)
    a2[:, later] = torch.randn_like(a2[:, later]) * 30
    v2[:, later] += 100.0
    mask2[:, later] = ~mask2[:, later]
    doc2[:, later] = torch.arange(doc2[:, later].shape[1]) // 3 + (0 if reverse else 10)
    outs = [weird_scan(x, y, log_w, reverse=reverse, mask=m, doc_ids=d, backend=backend)
            for x, y, m, d in ((a, v, mask, doc), (a2, v2, mask2, doc2))]
    earlier = slice(None, t) if not reverse else slice(t + 1, None)
    assert torch.equal(outs[0][:, earlier], outs[1][:, earlier])


@pytest.mark.parametrize("c", [1, 3])
@pytest.mark.parametrize("L", [5, 37, 100])
def test_documents_starting_inside_chunks(backend, monkeypatch, c, L):
    """Starts at every offset of a chunk (documents of 3 and 5 tokens), padding beside
    them: forward and all gradients in float64 against the reference."""
    monkeypatch.setattr(chunk, "LEVELS_PER_CHUNK", c)
    B, D = 2, 4
    a, v, log_w, mask = make_inputs(B, L, D, seed=L + c)
    doc_ids = torch.stack([torch.arange(L) // 3, torch.arange(L) // 5])
    grad = torch.randn(B, L, D, dtype=torch.float64)
    want, want_grads = _grads(a, v, log_w, mask, doc_ids, False, grad)
    keep = torch.isfinite(want)
    grad = grad * keep
    want, want_grads = _grads(a, v, log_w, mask, doc_ids, False, grad)
    out, grads = _grads(a, v, log_w, mask, doc_ids, False, grad, backend)
    assert rel_err(out[keep], want[keep]) <= 1e-12
    for name, got, ref in zip(("dA", "dV", "dlog_w"), grads, want_grads):
        assert rel_err(got, ref) <= 1e-10, name


@pytest.mark.parametrize("L", [1, 2, 3, 7, 63, 64, 65, 1000])
def test_lengths_around_the_chunk_size(backend, L):
    """L a multiple of C, one off either way, and not at all (the last chunk padded)."""
    B, D = 2, 3
    a, v, log_w, mask = make_inputs(B, L, D, seed=L)
    grad = torch.randn(B, L, D, dtype=torch.float64)
    want, want_grads = _grads(a, v, log_w, None, None, False, grad)
    out, grads = _grads(a, v, log_w, None, None, False, grad, backend)
    assert rel_err(out, want) <= 1e-12
    for got, ref in zip(grads, want_grads):
        assert rel_err(got, ref) <= 1e-10


def test_empty_sequence():
    a = torch.randn(2, 0, 3, requires_grad=True)
    out = weird_scan(a, torch.randn(2, 0, 3), torch.zeros(2, 3), backend="chunk")
    assert out.shape == (2, 0, 3)
    out.sum().backward()
    assert a.grad.shape == (2, 0, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_decoding_is_the_torch_backends_step(monkeypatch, dtype):
    """The cache of backend "chunk" runs the PyTorch ring buffers: bitwise the "torch"
    backend's full pass, and this backend's to rounding."""
    monkeypatch.setattr(chunk, "LEVELS_PER_CHUNK", 2)
    B, L, D = 3, 45, 6
    a, v, log_w, mask = (x.to(dtype) if x.dtype != torch.bool else x
                         for x in make_inputs(B, L, D, seed=45))
    cache = WeirdScanCache(log_w, B, backend="chunk")
    cut = 20
    prefix = cache.extend(a[:, :cut], v[:, :cut], mask[:, :cut])
    steps = [cache.step(a[:, t], v[:, t], mask[:, t]) for t in range(cut, L)]
    decoded = torch.cat([prefix, torch.stack(steps, 1)], 1)
    assert torch.equal(decoded, weird_scan(a, v, log_w, mask=mask, backend="torch"))
    full = weird_scan(a, v, log_w, mask=mask, backend="chunk")
    assert rel_err(decoded, full) <= (1e-6 if dtype == torch.float32 else 1e-13)


def test_opt_in_only(monkeypatch):
    """Never the automatic choice; chosen by name or by the environment variable."""
    monkeypatch.delenv(dispatch.ENV_BACKEND, raising=False)
    for device in ("cpu", "cuda"):
        monkeypatch.setenv(dispatch.ENV_SELFCHECK, "0")
        assert dispatch.resolve(torch.device(device)).name not in ("chunk", "triton-chunk")
    assert dispatch.resolve(torch.device("cpu"), "chunk").name == "chunk"
    monkeypatch.setenv(dispatch.ENV_BACKEND, "chunk")
    assert dispatch.resolve(torch.device("cpu")).name == "chunk"


def test_toeplitz_halves_are_the_split_circulant():
    """[T_lo | T_up] of a_lo: row rho holds a_lo((rho - rho') mod C) exactly once per lag,
    T_lo on and below the diagonal, T_up above it."""
    c, D = 3, 2
    log_w = torch.randn(c, D, dtype=torch.float64)
    logs = chunk.toeplitz_logs(log_w, c)
    C = 1 << c
    la = log_kernel(log_w, C)
    for rho in range(C):
        for rp in range(C):
            lo, up = logs[rho, rp], logs[rho, C + rp]
            if rho >= rp:
                assert torch.equal(lo, la[rho - rp]) and torch.isinf(up).all()
            else:
                assert torch.equal(up, la[C + rho - rp]) and torch.isinf(lo).all()
