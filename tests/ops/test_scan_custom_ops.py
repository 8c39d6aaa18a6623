"""weird_scan as PyTorch custom ops: opcheck, torch.compile(fullgraph=True), torch.export,
the backend table and the self-check that guards a backend's first use on a device."""

import types
import warnings

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.ops import WeirdScanCache, weird_scan, weird_scan_bidirectional
from weirdnet.ops.weird_scan import dispatch, op
from weirdnet.ops.weird_scan import pytorch as torch_backend

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # opcheck traces the op with torch.jit internally, which warns about its deprecation
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"),
]


def scan_inputs(L, D=4, B=2, dtype=torch.float64, masked=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(B, L, D, generator=g, dtype=dtype) * 2
    v = torch.randn(B, L, D, generator=g, dtype=dtype)
    log_w = -(torch.rand(max(1, (L - 1).bit_length()) + 1, D, generator=g, dtype=dtype))
    mask = None
    if masked:
        mask = torch.ones(B, L, dtype=torch.bool)
        mask[-1, (L + 1) // 2:] = False
    return a, v, log_w, mask


def packed_docs(B, L):
    """Canonical document ids (B, L): up to three documents in the first row (the last of
    1 token), one in the others."""
    doc = torch.zeros(B, L, dtype=torch.int64)
    doc[0, L // 2:] = 1
    if L > 2:
        doc[0, L - 1] = 2
    return doc


# (L, masked, direction: "causal", "reverse" or "both" (split D // 2), dtype, packed)
OPCHECK_CASES = [
    (1, False, "causal", torch.float64, False),
    (2, True, "reverse", torch.float64, False),
    (3, False, "both", torch.float32, True),
    (7, True, "both", torch.float64, False),
    (33, True, "causal", torch.float32, False),
    (9, True, "causal", torch.float64, True),
    (17, False, "reverse", torch.float32, True),
]


def directions(kind: str, D: int) -> int:
    """The ops' direction argument ``n_causal`` (channels [0, n_causal) causal)."""
    return {"causal": D, "reverse": 0, "both": D // 2}[kind]


@pytest.mark.parametrize("L,masked,kind,dtype,packed", OPCHECK_CASES)
def test_opcheck_forward_and_backward(backend, L, masked, kind, dtype, packed):
    a, v, log_w, mask = scan_inputs(L, dtype=dtype, masked=masked)
    doc = packed_docs(a.shape[0], L) if packed else None
    n_causal = directions(kind, a.shape[-1])
    leaves = [t.requires_grad_() for t in (a, v, log_w)]
    torch.library.opcheck(op.scan_op, (*leaves, mask, doc, n_causal, backend))
    grad = torch.randn_like(a)
    torch.library.opcheck(op.scan_backward_op, (grad, a.detach(), v.detach(), log_w.detach(),
                                                mask, doc, n_causal, backend))


@pytest.mark.parametrize("masked", [False, True])
def test_opcheck_decode_step(backend, masked):
    a, v, log_w, mask = scan_inputs(5, masked=masked)
    cache = WeirdScanCache(log_w, batch_size=2, max_len=8, backend=backend)
    cache.extend(a[:, :3], v[:, :3], None if mask is None else mask[:, :3])
    rings = [r.clone() for r in cache._ring]
    torch.library.opcheck(op.extend_op,
                          (a[:, 3:], v[:, 3:], cache.log_w, None if mask is None else mask[:, 3:],
                           *rings, 3, backend))


def scan_loss(a, v, log_w, mask, g):
    """Both forms in one function, so one compiled graph holds causal, reverse and
    bidirectional calls."""
    out = (weird_scan(a, v, log_w, mask=mask) + weird_scan(a, v, log_w, reverse=True, mask=mask)
           + weird_scan_bidirectional(a, v, log_w, mask=mask))
    return (out * g).square().sum()  # no cancellation: a relative error means something


@pytest.mark.slow  # torch.compile with inductor (C++ code generation)
@pytest.mark.parametrize("masked", [False, True])
def test_compile_fullgraph_matches_eager(backend, masked, monkeypatch):
    monkeypatch.setenv("WEIRDNET_SCAN_BACKEND", backend)
    a, v, log_w, mask = scan_inputs(37, D=6, dtype=torch.float32, masked=masked, seed=3)
    g = torch.randn_like(a)
    results = []
    for fn in (scan_loss, torch.compile(scan_loss, fullgraph=True, backend="inductor")):
        leaves = [t.clone().requires_grad_() for t in (a, v, log_w)]
        loss = fn(*leaves, mask, g)
        loss.backward()
        results.append([loss.detach()] + [t.grad for t in leaves])
    for got, want in zip(results[1], results[0]):
        assert rel_err(got, want) <= 1e-5


class ScanModule(torch.nn.Module):
    def __init__(self, D=4, levels=6):
        super().__init__()
        self.log_w = torch.nn.Parameter(-torch.rand(levels, D))

    def forward(self, a, v, mask):
        return weird_scan_bidirectional(a, v, self.log_w, mask=mask)


def test_export_records_the_op_and_gives_the_same_output():
    module = ScanModule()
    a, v, _, mask = scan_inputs(9, dtype=torch.float32, masked=True)
    program = torch.export.export(module, (a, v, mask))
    assert "weirdnet.weird_scan" in str(program.graph)
    a2, v2, _, mask2 = scan_inputs(9, dtype=torch.float32, masked=True, seed=5)
    assert torch.equal(program.module()(a2, v2, mask2), module(a2, v2, mask2))


@pytest.mark.slow  # torch.compile with inductor
def test_bad_input_errors_under_compile():
    a, v, log_w, _ = scan_inputs(9, dtype=torch.float32)
    plain = torch.compile(lambda a, v, w: weird_scan(a, v, w))
    with pytest.raises(ValueError, match="v must have the shape of a"):
        plain(a[..., :3], v, log_w)
    strict = torch.compile(lambda a, v, w: weird_scan(a, v, w), fullgraph=True)
    with pytest.raises(Exception, match="v must have the shape of a"):  # dynamo reports it
        strict(a[..., :3], v, log_w)
    with pytest.raises(ValueError, match="exceeds the 4 positions"):
        plain(a, v, log_w[:2])


# ---------------------------------------------------------------------------------------
# The backend table
# ---------------------------------------------------------------------------------------


def test_table_and_choice_rule(monkeypatch):
    monkeypatch.delenv("WEIRDNET_SCAN_BACKEND", raising=False)
    assert set(dispatch.BACKENDS) == {"cpu", "torch", "triton", "triton-e2"}
    assert dispatch.BACKENDS["triton-e2"].auto_on == ()  # opt-in until a GPU record
    cpu = torch.device("cpu")
    auto = dispatch.resolve(cpu).name
    assert auto == ("cpu" if dispatch.BACKENDS["cpu"].available(cpu) else "torch")
    assert dispatch.resolve(cpu, "torch").name == "torch"
    monkeypatch.setenv("WEIRDNET_SCAN_BACKEND", "torch")
    assert dispatch.resolve(cpu).name == "torch"
    with pytest.raises(ValueError, match="backend must be one of"):
        dispatch.resolve(cpu, "fast")
    with pytest.raises(ValueError, match="backend must be one of"):
        weird_scan(*scan_inputs(3)[:3], backend="fast")
    with pytest.raises(ValueError, match="takes CPU tensors"):
        dispatch.resolve(torch.device("meta"), "cpu")


def _wrong_kernels(scale=1.01, fail=False):
    """The PyTorch backend's functions with outputs off by ``scale`` (or raising)."""

    def fwd(*args):
        if fail:
            raise RuntimeError("PTX compilation failed")
        return torch_backend.fwd(*args) * scale

    def bwd(*args):
        da, dv, dlogw = torch_backend.bwd(*args)
        return da * scale, dv, dlogw

    return types.SimpleNamespace(fwd=fwd, bwd=bwd, extend=torch_backend.extend)


@pytest.fixture
def wrong_backend(monkeypatch):
    """Register a backend "wrong" that is checked on CPU (as Triton is on CUDA)."""

    def register(kernels):
        backend = dispatch.Backend("wrong", lambda: kernels, lambda device: None, auto_on=(),
                                   selfcheck_on=("cpu",))
        monkeypatch.setitem(dispatch.BACKENDS, "wrong", backend)
        monkeypatch.setattr(dispatch, "_verdicts", {})
        return backend

    return register


def _scan_with(backend):
    a, v, log_w, mask = scan_inputs(40, D=6, dtype=torch.float32, masked=True, seed=9)
    return (weird_scan_bidirectional(a, v, log_w, mask=mask, backend=backend),
            weird_scan_bidirectional(a, v, log_w, mask=mask, backend="torch"))


@pytest.mark.parametrize("fail", [False, True])
def test_selfcheck_falls_back_to_torch_with_one_warning(wrong_backend, fail):
    wrong_backend(_wrong_kernels(fail=fail))
    with pytest.warns(RuntimeWarning, match="'wrong' scan backend failed its self-check"
                      + (".*PTX compilation failed" if fail else ".*O relative error")):
        got, want = _scan_with("wrong")
    assert torch.equal(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the verdict is kept: no second warning
        got, want = _scan_with("wrong")
        assert torch.equal(got, want)
        assert dispatch.resolve(torch.device("cpu"), "wrong").name == "torch"


def test_selfcheck_passes_a_correct_kernel(wrong_backend):
    wrong_backend(_wrong_kernels(scale=1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, want = _scan_with("wrong")
    assert torch.equal(got, want)
    assert dispatch.resolve(torch.device("cpu"), "wrong").name == "wrong"


def test_selfcheck_can_be_turned_off(wrong_backend, monkeypatch):
    monkeypatch.setenv("WEIRDNET_SCAN_SELFCHECK", "0")
    wrong_backend(_wrong_kernels())
    got, want = _scan_with("wrong")
    assert rel_err(got, want) > 1e-3  # the wrong kernel ran: the check is what catches it


def test_selfcheck_catches_a_wrong_gradient_only():
    """A backend whose forward is right and whose dA is off is still caught."""
    kernels = _wrong_kernels()
    right_fwd = types.SimpleNamespace(fwd=torch_backend.fwd, bwd=kernels.bwd,
                                      extend=torch_backend.extend)
    backend = dispatch.Backend("wrong", lambda: right_fwd, lambda d: None, auto_on=())
    error = dispatch.selfcheck_error(backend, torch.device("cpu"))
    assert error is not None and "dA relative error" in error and "O relative" not in error


@pytest.mark.slow  # torch.compile with inductor
def test_compiled_decoding_equals_the_full_pass(backend):
    """The cache's step under torch.compile(fullgraph=True) runs the extend op and stays
    bitwise equal to the full causal pass; the position does not recompile every token."""
    a, v, log_w, mask = scan_inputs(12, dtype=torch.float32, masked=True, seed=4)
    full = weird_scan(a, v, log_w, mask=mask, backend=backend)
    cache = WeirdScanCache(log_w, batch_size=2, max_len=16, backend=backend)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    step = torch.compile(lambda c, x, y, m: c.step(x, y, m), fullgraph=True)
    outs = [step(cache, a[:, t], v[:, t], mask[:, t]) for t in range(12)]
    assert torch.equal(torch.stack(outs, 1), full)
    assert cache.position == 12
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 2
