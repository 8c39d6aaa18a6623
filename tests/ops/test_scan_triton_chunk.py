"""Backend "triton-chunk" (the chunked scan's Toeplitz products in a Triton kernel).

Without a GPU the kernel runs on CPU tensors through the Triton interpreter: this module
imports ``weirdnet.ops.weird_scan.triton_chunk`` with ``TRITON_INTERPRET=1`` (and restores
the variable), as test_scan_triton does.  The tests of backend "chunk" that hold the
kernel to the reference (every length, gradient, mask, document layout, direction,
non-finite value, wide spread and bitwise causality) run here on "triton-chunk", with
the same small chunks for short sequences; with CUDA they run compiled.
"""

import importlib
import os
from unittest import mock

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'weirdnet[triton]')")

import test_scan  # noqa: E402
import test_scan_chunk as base  # noqa: E402
import test_scan_nonfinite  # noqa: E402
import test_scan_packed  # noqa: E402
from test_scan_chunk import exact_calls, seeded  # noqa: E402, F401  (fixtures)

from helpers.numerics import rel_err  # noqa: E402
from helpers.scan import make_inputs  # noqa: E402
from weirdnet.ops import levels_needed, weird_scan  # noqa: E402
from weirdnet.ops.weird_scan import chunk, dispatch  # noqa: E402

pytestmark = [
    pytest.mark.slow,  # the Triton interpreter
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
]

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
MODULE = "weirdnet.ops.weird_scan.triton_chunk"


def _import_kernel():
    """``weird_scan.triton_chunk``, built for the interpreter when there is no GPU."""
    interpret = {} if CUDA else {"TRITON_INTERPRET": "1"}
    with mock.patch.dict(os.environ, interpret):  # put back as it was afterwards
        return importlib.import_module(MODULE)


tc = _import_kernel()
if not CUDA and not tc.INTERPRETED:
    pytest.skip(f"{MODULE} was imported for a GPU before this module, and there is no GPU",
                allow_module_level=True)


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the kernel's launches: the tests below must go through it."""
    calls = []
    original = tc.product

    def counted(t, rhs):
        calls.append(tuple(t.shape))
        return original(t, rhs)

    monkeypatch.setattr(tc, "product", counted)
    return calls


@pytest.fixture
def backend(request, monkeypatch, kernel_calls):
    """"triton-chunk", with base's chunk sizes; afterwards, a sequence longer than one
    chunk must have launched the kernel."""
    if CUDA:  # these tests build CPU tensors; on a GPU the device tests below run
        pytest.skip("CPU tensors: the interpreter's test")
    callspec = getattr(request.node, "callspec", None)
    L = None if callspec is None else callspec.params.get("L")
    if L is not None:
        monkeypatch.setattr(chunk, "LEVELS_PER_CHUNK", base.chunk_levels_for(L))
    yield "triton-chunk"
    if L is not None and L > (1 << chunk.chunk_levels(levels_needed(L))):
        assert kernel_calls, "the Triton kernel was not launched"


# The tests of every backend, on this one (CPU tensors: the interpreter; CUDA: compiled).
test_forward_matches_reference = test_scan.test_forward_matches_reference
test_gradients_match_reference = test_scan.test_gradients_match_reference
test_gradients_with_wide_spread_log_w = test_scan.test_gradients_with_wide_spread_log_w
test_gradients_with_widely_spread_logits = test_scan.test_gradients_with_widely_spread_logits
test_gradients_of_padding_far_from_real_tokens = \
    test_scan.test_gradients_of_padding_far_from_real_tokens
test_gradcheck_float64 = test_scan.test_gradcheck_float64
test_bidirectional_is_forward_then_backward_halves = \
    test_scan.test_bidirectional_is_forward_then_backward_halves
test_exact_causality_float32 = test_scan.test_exact_causality_float32
test_fully_padded_rows_are_finite_and_get_zero_gradient = \
    test_scan.test_fully_padded_rows_are_finite_and_get_zero_gradient
test_extra_levels_are_ignored = test_scan.test_extra_levels_are_ignored
test_packed_matches_reference = test_scan_packed.test_packed_matches_reference
test_each_document_as_alone = test_scan_packed.test_each_document_as_alone
test_values_and_gradients_match_reference = \
    test_scan_nonfinite.test_values_and_gradients_match_reference
test_minus_inf_is_bitwise_padding = test_scan_nonfinite.test_minus_inf_is_bitwise_padding
test_nonfinite_padding_changes_nothing = test_scan_nonfinite.test_nonfinite_padding_changes_nothing
test_wide_spread_takes_the_exact_path_and_matches = \
    base.test_wide_spread_takes_the_exact_path_and_matches
test_documents_starting_inside_chunks = base.test_documents_starting_inside_chunks
test_lengths_around_the_chunk_size = base.test_lengths_around_the_chunk_size


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_stability_64k(kernel_calls, dtype, tol):
    """L = 65,536 with the papers' initialisation: finite and close to float64.  In the
    interpreter the forward at D = 8 (the gradients at 64K took minutes a test there);
    compiled, D = 64 with the gradients as well (test_scan's 64K test)."""
    if CUDA:
        test_scan.test_long_sequence_stability_64k("triton-chunk", dtype, 3e-2)
        return
    g = torch.Generator().manual_seed(64)
    L, D = 65536, 8
    x = torch.randn(1, L, D, generator=g)
    a, v = x @ torch.randn(D, D, generator=g) / D**0.5, x @ torch.randn(D, D, generator=g)
    log_w = torch.randn(16, D, generator=g).cumsum(0)
    want = weird_scan(a.double(), v.double(), log_w.double(), backend="torch")
    out = weird_scan(a.to(dtype), v.to(dtype), log_w, backend="triton-chunk")
    assert out.dtype == dtype and torch.isfinite(out).all() and kernel_calls
    assert rel_err(out, want) <= tol


@pytest.mark.parametrize("c", [2, 6])
@pytest.mark.parametrize("reverse", [False, True])
def test_bitwise_causal_with_an_exact_path_and_documents_in_the_future(monkeypatch,
                                                                       kernel_calls, c,
                                                                       reverse):
    """base's test on this backend (it names no backend fixture: run it with ours)."""
    if CUDA:
        pytest.skip("CPU tensors: the interpreter's test")
    base.bitwise_causality_case(monkeypatch, c, reverse, "triton-chunk")
    assert kernel_calls


# On the device (compiled with CUDA, else the interpreter): (L, levels per chunk, dtype).
DEVICE_CASES = [(37, 2, torch.float64), (300, 4, torch.float64), (300, 4, torch.float32)]
if CUDA:
    DEVICE_CASES += [(4097, 6, torch.float32), (16384, 6, torch.float32)]


@pytest.mark.parametrize("L,c,dtype", DEVICE_CASES)
def test_kernel_equals_the_einsum_product(monkeypatch, kernel_calls, L, c, dtype):
    """The kernel's products against chunk.product (``torch.einsum``), forward and
    transposed, through whole scans with padding and documents: the same outputs and
    gradients to rounding."""
    monkeypatch.setattr(chunk, "LEVELS_PER_CHUNK", c)
    a, v, log_w, mask = make_inputs(2, L, 7, seed=L)
    doc_ids = torch.arange(L).expand(2, L) // 97
    grad = torch.randn(2, L, 7, dtype=torch.float64)
    xs = [x.to(dtype).to(DEVICE) for x in (a, v, log_w, grad)] + [mask.to(DEVICE),
                                                                   doc_ids.to(DEVICE)]
    results = []
    for name in ("chunk", "triton-chunk"):
        leaves = [x.clone().requires_grad_() for x in xs[:3]]
        out = weird_scan(*leaves, mask=xs[4], doc_ids=xs[5], backend=name)
        results.append((out, *torch.autograd.grad(out, leaves, xs[3])))
    assert kernel_calls
    tol = 1e-13 if dtype == torch.float64 else 1e-5
    for got, want in zip(*results):
        assert torch.isfinite(got).all()
        assert rel_err(got.cpu(), want.cpu()) <= tol


def test_opt_in_and_the_interpreter_rule(monkeypatch):
    """Never chosen automatically; by name on CPU tensors only under the interpreter."""
    monkeypatch.setenv(dispatch.ENV_SELFCHECK, "0")
    monkeypatch.delenv(dispatch.ENV_BACKEND, raising=False)
    assert dispatch.resolve(torch.device("cuda")).name == "triton"
    assert dispatch.resolve(torch.device(DEVICE), "triton-chunk").name == "triton-chunk"
    monkeypatch.setattr(tc, "INTERPRETED", False)
    if not CUDA:
        with pytest.raises(ValueError, match="triton-chunk.*TRITON_INTERPRET=1"):
            dispatch.resolve(torch.device("cpu"), "triton-chunk")
    with pytest.raises(ValueError, match="CUDA tensors"):
        dispatch.resolve(torch.device("meta"), "triton-chunk")
