"""The short causal depthwise convolution: the fused C kernel and the conv1d path against
the float64 specification (forward and every gradient, at awkward lengths), bitwise
decoding, thread-count independence, the custom ops under opcheck, compile and export,
and clear errors."""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.ops.short_conv import cpu, op, short_conv, short_conv_reference

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"),
]

LENGTHS = [1, 2, 3, 7, 1000]
BACKENDS = ["cpu", "torch"]


def inputs(L, k, *, B=3, D=5, dtype=torch.float64, state=False, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, D, generator=g, dtype=dtype)
    weight = torch.randn(D, k, generator=g, dtype=dtype)
    b = torch.randn(D, generator=g, dtype=dtype) if bias else None
    s = torch.randn(B, k - 1, D, generator=g, dtype=dtype) if state else None
    return x, weight, b, s


def output_and_grads(fn, x, weight, bias, state, grad):
    leaves = [t.clone().requires_grad_() for t in (x, weight) + ((bias,) if bias is not None
                                                               else ())]
    y = fn(*leaves[:2], leaves[2] if bias is not None else None, state)
    return [y.detach(), *torch.autograd.grad(y, leaves, grad)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("k, state, bias", [(4, False, True), (4, True, False), (1, False, True),
                                            (2, True, True), (7, False, False)])
def test_matches_the_float64_specification(backend, dtype, L, k, state, bias):
    x, weight, b, s = inputs(L, k, dtype=dtype, state=state, bias=bias, seed=L + k)
    grad = torch.randn(x.shape, dtype=dtype)
    got = output_and_grads(lambda *a: short_conv(*a, backend=backend), x, weight, b, s, grad)
    want = output_and_grads(short_conv_reference, *(t if t is None else t.double()
                                                    for t in (x, weight, b, s)), grad.double())
    tol = 1e-13 if dtype == torch.float64 else 2e-6
    for name, g, w in zip(("y", "dx", "dweight", "dbias"), got, want):
        assert g.dtype == dtype and g.shape == w.shape, name
        assert not torch.isnan(g).any(), name
        assert rel_err(g, w) <= tol, (name, rel_err(g, w))


def packed_docs(B, L):
    """Document ids (B, L): up to three documents in the first row (the last of 1 token),
    two in the second, one in the others; not canonical (the op makes them so)."""
    doc = torch.full((B, L), 7, dtype=torch.int64)
    doc[0, L // 2:] = 3
    if L > 2:
        doc[0, L - 1] = 9
    if B > 1:
        doc[1, L // 3:] = 5
    return doc


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("k, bias", [(4, True), (1, False), (3, True)])
def test_packed_documents_each_get_what_they_get_alone(backend, dtype, L, k, bias):
    x, weight, b, _ = inputs(L, k, dtype=dtype, bias=bias, seed=L + 2 * k)
    doc = packed_docs(x.shape[0], L)
    grad = torch.randn(x.shape, dtype=dtype)
    got = output_and_grads(lambda *a: short_conv(*a[:3], doc_ids=doc, backend=backend),
                           x, weight, b, None, grad)
    want = output_and_grads(lambda *a: short_conv_reference(*a[:3], doc_ids=doc),
                            *(t if t is None else t.double() for t in (x, weight, b)), None,
                            grad.double())
    tol = 1e-13 if dtype == torch.float64 else 2e-6
    for name, g, w in zip(("y", "dx", "dweight", "dbias"), got, want):
        assert rel_err(g, w) <= tol, (name, rel_err(g, w))


def test_packed_documents_do_not_take_a_state():
    x, weight, b, s = inputs(5, 3, state=True)
    with pytest.raises(ValueError, match="doc_ids and a decoding state"):
        short_conv(x, weight, b, s, doc_ids=packed_docs(3, 5))
    with pytest.raises(ValueError, match="doc_ids"):
        short_conv(x, weight, b, doc_ids=packed_docs(3, 4))


def test_the_weight_gradient_is_summed_in_float64():
    """dweight and dbias add B x L products: the kernel keeps them in float64, so a
    float32 gradient is the float64 one rounded once, even over a million positions."""
    x, weight, b, _ = inputs(1 << 20, 4, B=1, D=3, dtype=torch.float32, seed=1)
    grad = torch.randn(x.shape)
    got = output_and_grads(lambda *a: short_conv(*a, backend="cpu"), x, weight, b, None, grad)
    want = output_and_grads(short_conv_reference, x.double(), weight.double(), b.double(),
                            None, grad.double())
    for g, w in zip(got[2:], want[2:]):
        assert rel_err(g, w) <= 1e-7


@pytest.mark.parametrize("k", [1, 3, 4])
def test_decoding_step_by_step_is_bitwise_the_full_pass(k):
    """Each position fed alone with the last k - 1 inputs as the state gives the full
    pass's output exactly (the C kernel sums every output in one fixed order)."""
    x, weight, b, _ = inputs(11, k, dtype=torch.float32, seed=k)
    full = short_conv(x, weight, b, backend="cpu")
    state = x.new_zeros(x.shape[0], k - 1, x.shape[2])
    for t in range(x.shape[1]):
        step = short_conv(x[:, t:t + 1], weight, b, state, backend="cpu")
        assert torch.equal(step[:, 0], full[:, t]), t
        state = torch.cat((state, x[:, t:t + 1]), 1)[:, 1:]


def test_outputs_do_not_depend_on_the_thread_count():
    x, weight, b, _ = inputs(3000, 4, B=4, D=64, dtype=torch.float32, seed=2)
    grad = torch.randn(x.shape)
    threads = torch.get_num_threads()
    try:
        runs = []
        for n in (1, 3):
            torch.set_num_threads(n)
            runs.append(output_and_grads(lambda *a: short_conv(*a, backend="cpu"), x, weight,
                                         b, None, grad))
    finally:
        torch.set_num_threads(threads)
    for one, three in zip(*runs):
        assert torch.equal(one, three)


def test_a_strided_input_and_gradient_give_the_contiguous_results():
    x, weight, b, _ = inputs(9, 4, D=6, dtype=torch.float32, seed=3)
    wide = torch.randn(3, 9, 12)
    wide[..., ::2] = x
    strided = wide[..., ::2]
    assert not strided.is_contiguous()
    grad = torch.randn(3, 9, 6)
    want = output_and_grads(lambda *a: short_conv(*a, backend="cpu"), x, weight, b, None, grad)
    got = output_and_grads(lambda *a: short_conv(*a, backend="cpu"), strided, weight, b, None,
                           grad.transpose(0, 1).contiguous().transpose(0, 1))
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_non_finite_weights_propagate_as_in_a_zero_padded_convolution():
    x, weight, b, _ = inputs(6, 3, dtype=torch.float64, seed=4)
    weight[1, 0] = float("inf")  # the oldest tap of channel 1 reads zeros at t < 2
    got = short_conv(x, weight, b, backend="cpu")
    want = short_conv(x, weight, b, backend="torch")
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.isnan(got[:, :2, 1]).all()  # inf x 0
    finite = ~torch.isnan(want) & torch.isfinite(want)
    assert torch.allclose(got[finite], want[finite])


def test_a_state_that_needs_a_gradient_takes_the_differentiable_path():
    x, weight, b, s = inputs(5, 4, dtype=torch.float64, state=True, seed=5)
    s.requires_grad_()
    y = short_conv(x, weight, b, s)
    (ds,) = torch.autograd.grad(y.square().sum(), s)
    ref_s = s.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(short_conv_reference(x, weight, b, ref_s).square().sum(),
                                  ref_s)
    assert rel_err(ds, want) <= 1e-13


@pytest.mark.parametrize("L, k, state, bias, dtype, packed", [
    (1, 4, False, True, torch.float64, False), (3, 2, True, False, torch.float32, False),
    (7, 4, True, True, torch.float64, False), (40, 1, False, True, torch.float32, False),
    (9, 4, False, True, torch.float32, True), (17, 3, False, False, torch.float64, True)])
def test_opcheck(L, k, state, bias, dtype, packed):
    from weirdnet.ops.packing import segment_ids

    x, weight, b, s = inputs(L, k, dtype=dtype, state=state, bias=bias, seed=6)
    doc = segment_ids(packed_docs(x.shape[0], L)) if packed else None
    for t in (x, weight) + ((b,) if bias else ()):
        t.requires_grad_()
    torch.library.opcheck(op.conv_op, (x, weight, b, s, doc))
    grad = torch.randn(x.shape, dtype=dtype)
    torch.library.opcheck(op.conv_backward_op, (grad, x.detach(), weight.detach(), s, doc))


@pytest.mark.slow  # torch.compile with inductor
def test_compile_fullgraph_matches_eager():
    x, weight, b, _ = inputs(37, 4, D=6, dtype=torch.float32, seed=7)
    grad = torch.randn(x.shape)

    def loss(x, weight, b):
        return (short_conv(x, weight, b) * grad).square().sum()

    results = []
    for fn in (loss, torch.compile(loss, fullgraph=True, backend="inductor")):
        leaves = [t.clone().requires_grad_() for t in (x, weight, b)]
        value = fn(*leaves)
        value.backward()
        results.append([value.detach()] + [t.grad for t in leaves])
    for got, want in zip(results[1], results[0]):
        assert rel_err(got, want) <= 1e-5


class Conv(torch.nn.Module):
    def __init__(self, D=4, k=4):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(D, k))
        self.bias = torch.nn.Parameter(torch.randn(D))

    def forward(self, x):
        return short_conv(x, self.weight, self.bias)


def test_export_records_the_op_and_gives_the_same_output():
    module = Conv()
    program = torch.export.export(module, (torch.randn(2, 9, 4),))
    assert "weirdnet.short_conv" in str(program.graph)
    x = torch.randn(2, 9, 4)
    assert torch.equal(program.module()(x), module(x))


@pytest.mark.parametrize("args, message", [
    ((torch.randn(2, 5), torch.randn(5, 4)), "x must be a floating \\(B, L, D\\)"),
    ((torch.randn(2, 5, 3), torch.randn(4, 4)), "weight must be \\(D=3"),
    ((torch.randn(2, 5, 3), torch.randn(3, 0)), "weight must be \\(D=3, k >= 1\\)"),
    ((torch.randn(2, 5, 3), torch.randn(3, 4), torch.randn(4)), "bias must be"),
    ((torch.randn(2, 5, 3), torch.randn(3, 4), None, torch.randn(2, 4, 3)), "state must be"),
    ((torch.randn(2, 5, 3), torch.randn(3, 4, dtype=torch.float64)), "weight must be"),
])
def test_bad_inputs_get_clear_errors(args, message):
    with pytest.raises(ValueError, match=message):
        short_conv(*args)


def test_bad_backends_get_clear_errors():
    x, weight, _, _ = inputs(4, 2, dtype=torch.float32)
    with pytest.raises(ValueError, match="backend must be None or one of"):
        short_conv(x, weight, backend="cuda")
    with pytest.raises(ValueError, match="backend 'cpu' takes float32/float64 CPU"):
        short_conv(x.bfloat16(), weight.bfloat16(), backend="cpu")


def test_half_precision_runs_the_conv1d_path():
    x, weight, b, _ = inputs(6, 4, dtype=torch.float32)
    got = short_conv(x.bfloat16(), weight.bfloat16(), b.bfloat16())
    assert got.dtype == torch.bfloat16
    assert rel_err(got.double(), short_conv_reference(x, weight, b).double()) <= 2e-2
    assert cpu.takes(x) == (cpu.load() is not None)


def test_the_timing_script_runs_and_checks_agreement(tmp_path):
    """lab/benchmarks/short_conv_ab.py at a tiny size: both paths agree, a record is written."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "lab" / "benchmarks" / "short_conv_ab.py"
    done = subprocess.run([sys.executable, str(script), "--shapes", "2x5x3", "--rounds", "1",
                           "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| 2 x 5 x 3 |" in done.stdout and "| yes |" in done.stdout
    assert (tmp_path / "short_conv_ab_cpu.md").read_text() == done.stdout
    packed = subprocess.run([sys.executable, str(script), "--shapes", "2x9x3", "--rounds", "1",
                             "--documents", "3"], capture_output=True, text=True, timeout=300)
    assert packed.returncode == 0 and "| fwd shifted ms |" in packed.stdout
    assert "| yes |" in packed.stdout
    bad = subprocess.run([sys.executable, str(script), "--shapes", "2x5"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "a shape is BxLxD" in bad.stderr
