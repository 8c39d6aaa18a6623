"""DBA's fused compressions as PyTorch custom ops: opcheck, references, and compile; the
authors' form (issue 29), which reuses them, under compile and export."""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.ops.dba import (
    AuthorsWeights,
    compress_positions,
    dba_attention,
    dba_authors_attention,
    dba_authors_reference,
    dba_compress,
    dba_compress_reference,
    dba_cross_attention,
    dba_cross_reference,
    dba_reference,
)
from weirdnet.ops.dba.compress import (
    compress_positions_backward_op,
    compress_positions_op,
    self_compress_backward_op,
    self_compress_op,
)

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"),
]


def padding(B: int, n: int):
    """Row 0 full, row 1 half padded, row 2 all padded (its outputs are 0)."""
    mask = torch.ones(B, n, dtype=torch.bool)
    if B > 1:
        mask[1, (n + 1) // 2:] = False
    if B > 2:
        mask[2] = False
    return mask


# (B, H, n, d, d_p, per-sample z, masked, dtype)
SELF_CASES = [
    (1, 1, 1, 4, 1, False, False, torch.float64),
    (3, 2, 7, 4, 5, False, True, torch.float64),
    (3, 2, 33, 3, 2, True, True, torch.float32),
    (2, 1, 2, 5, 3, True, False, torch.float64),
]


@pytest.mark.parametrize("B,H,n,d,d_p,per_sample,masked,dtype", SELF_CASES)
def test_self_compress_op(B, H, n, d, d_p, per_sample, masked, dtype):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(B, H, n, d, generator=g, dtype=dtype)
    z = torch.randn(*((B,) if per_sample else ()), H, d_p, d, generator=g, dtype=dtype)
    mask = padding(B, n) if masked else None
    torch.library.opcheck(self_compress_op, (x.requires_grad_(), z.requires_grad_(), mask))
    out, w = self_compress_op(x, z, mask)
    grad = torch.randn_like(out)
    for needs in ((True, True), (per_sample, not per_sample)):
        torch.library.opcheck(self_compress_backward_op, (grad, x.detach(), z.detach(),
                                                          w.detach(), *needs))
    # in the case's dtype against the float64 reference, forward and gradients
    leaves = [t.detach().clone().requires_grad_() for t in (x, z)]
    got = dba_compress(leaves[0], leaves[0], leaves[1], mask)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    want = dba_compress_reference(ref_leaves[0], ref_leaves[0], ref_leaves[1], mask)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    assert got.dtype == dtype and rel_err(got, want) <= tol
    torch.autograd.backward(got, grad)
    torch.autograd.backward(want, grad.double())
    for a, b in zip(leaves, ref_leaves):
        assert a.grad.dtype == dtype and rel_err(a.grad, b.grad) <= tol


# (B, n, c, s, l, r, per-sample w_soft, masked, dtype); l = 0 or r = 0: no W'_c or W'_r
POSITION_CASES = [
    (1, 1, 4, 1, 0, 3, False, False, torch.float64),
    (3, 7, 5, 5, 2, 0, False, True, torch.float64),
    (3, 33, 4, 2, 1, 2, True, True, torch.float64),
    (3, 3, 3, 3, 0, 0, True, True, torch.float32),
]


def position_inputs(B, n, c, s, rows_lin, r, per_sample, dtype, seed):
    """x (B, n, c), w_soft ((B,) s, c), w_lin (l, c), w_out (r, c), standard normal."""
    g = torch.Generator().manual_seed(seed)
    shapes = ((B, n, c), ((B,) if per_sample else ()) + (s, c), (rows_lin, c), (r, c))
    return [torch.randn(*shape, generator=g, dtype=dtype) for shape in shapes]


def plain_positions(x, w_soft, w_lin, w_out, mask):
    """compress_positions by plain autograd ops (the formula of its docstring)."""
    logits = x @ w_soft.transpose(-1, -2)
    lin = x @ w_lin.T
    if mask is not None:
        empty = ~mask.any(1)[:, None, None]
        logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf")).masked_fill(empty, 0)
        lin = lin.masked_fill(~mask.unsqueeze(-1), 0)
    soft = torch.softmax(logits, 1)
    if mask is not None:
        soft = soft.masked_fill(empty, 0)
    return torch.cat([soft.transpose(1, 2) @ x, lin.transpose(1, 2) @ x], 1), x @ w_out.T


@pytest.mark.parametrize("B,n,c,s,rows_lin,r,per_sample,masked,dtype", POSITION_CASES)
def test_compress_positions_op(B, n, c, s, rows_lin, r, per_sample, masked, dtype):
    args = [t.requires_grad_()
            for t in position_inputs(B, n, c, s, rows_lin, r, per_sample, dtype, n + s)]
    mask = padding(B, n) if masked else None
    torch.library.opcheck(compress_positions_op, (*args, mask))
    x_l, out, soft, lin = compress_positions_op(*args, mask)
    d_xl, d_out = torch.randn_like(x_l), torch.randn_like(out)
    saved = (d_xl, d_out, *(t.detach() for t in args), soft.detach(), lin.detach(), mask)
    for needs in ([True] * 4, [not per_sample, per_sample, True, False]):
        torch.library.opcheck(compress_positions_backward_op, (*saved, needs))
    # against plain autograd through the same formula in float64
    leaves = [t.detach().clone().requires_grad_() for t in args]
    got = compress_positions(*leaves, mask)
    plain = [t.detach().double().requires_grad_() for t in args]
    want = plain_positions(*plain, mask)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == dtype
        assert rel_err(a, b) <= tol
    torch.autograd.backward(got, (d_xl, d_out))
    torch.autograd.backward(want, (d_xl.double(), d_out.double()))
    for a, b in zip(leaves, plain):
        assert a.grad.shape == b.grad.shape
        assert rel_err(a.grad, b.grad) <= tol


def test_backwards_compute_only_the_gradients_asked_for():
    """An input without requires_grad gets None from the ops, the others the full values."""
    B, H, n, d, d_p = 3, 2, 7, 4, 3
    mask = padding(B, n)
    g = torch.Generator().manual_seed(1)
    x, z = torch.randn(B, H, n, d, generator=g), torch.randn(H, d_p, d, generator=g)
    grad = torch.randn(B, H, d_p, d, generator=g)
    full = [t.clone().requires_grad_() for t in (x, z)]
    dba_compress(full[0], full[0], full[1], mask).backward(grad)
    for i in range(2):
        part = [t.clone().requires_grad_(j == i) for j, t in enumerate((x, z))]
        dba_compress(part[0], part[0], part[1], mask).backward(grad)
        assert part[1 - i].grad is None and torch.equal(part[i].grad, full[i].grad)
    args = position_inputs(B, n, 5, 2, 3, 4, True, torch.float32, 2)
    full = [t.clone().requires_grad_() for t in args]
    out = compress_positions(*full, mask)
    grads = [torch.randn_like(o) for o in out]
    torch.autograd.backward(out, grads)
    for i in range(4):
        part = [t.clone().requires_grad_(j == i) for j, t in enumerate(args)]
        torch.autograd.backward(compress_positions(*part, mask), grads)
        assert all(t.grad is None for j, t in enumerate(part) if j != i)
        assert torch.equal(part[i].grad, full[i].grad)


def test_attention_compiles_fullgraph_and_matches_eager():
    g = torch.Generator().manual_seed(5)
    B, H, n, d, d_p, d_in = 3, 2, 13, 4, 3, 5
    q, k, v = (torch.randn(B, H, n, d, generator=g) for _ in range(3))
    z = torch.randn(H, d_p, d, generator=g)
    wr, wc = (torch.randn(B, H, n, d_p, generator=g) for _ in range(2))
    r = torch.randn(H, d, d_in, generator=g)
    k_c, v_c = (torch.randn(B, H, d_p, d, generator=g) for _ in range(2))
    z_q = torch.randn(B, H, d_p, d, generator=g)
    mask = padding(B, n)

    def loss(q, k, v, z, wr, wc, r, k_c, v_c, z_q):
        return (dba_attention(q, k, v, z, wr, wc, r, mask).square().sum()
                + dba_cross_attention(q, k_c, v_c, z_q, wr, r, mask).square().sum())

    inputs = (q, k, v, z, wr, wc, r, k_c, v_c, z_q)
    results = []
    for fn in (loss, torch.compile(loss, fullgraph=True, backend="aot_eager")):
        leaves = [t.clone().requires_grad_() for t in inputs]
        value = fn(*leaves)
        value.backward()
        results.append([value.detach()] + [t.grad for t in leaves])
    for got, want in zip(*results[::-1]):
        assert rel_err(got, want) <= 1e-5
    # and the reference agrees with the fused ops
    leaves = [t.double() for t in inputs]
    assert rel_err(dba_attention(*leaves[:7], mask), dba_reference(*leaves[:7], mask)) <= 1e-10
    assert rel_err(dba_cross_attention(leaves[0], *leaves[7:9], leaves[9], leaves[4],
                                       leaves[6], mask),
                   dba_cross_reference(leaves[0], *leaves[7:9], leaves[9], leaves[4],
                                       leaves[6], mask)) <= 1e-10


@pytest.mark.parametrize("frozen", [(), (0, 2)])
def test_compress_positions_compiles_fullgraph_and_matches_eager(frozen):
    """Shared and per-sample w_soft, a 0-row w_lin, masks; with ``frozen`` inputs (no
    requires_grad) the traced backward asks the backward op for fewer gradients."""
    B, n, c = 3, 11, 6
    mask = padding(B, n)
    shared = position_inputs(B, n, c, 4, 2, 3, False, torch.float32, 7)
    w_z = position_inputs(B, n, c, 2, 0, 0, True, torch.float32, 8)[1]  # (B, 2, c)

    def loss(x, w_soft, w_lin, w_out, w_z):
        x_l, out = compress_positions(x, w_soft, w_lin, w_out, mask)
        c_l, _ = compress_positions(x, w_z, w_lin[:0], w_out[:0], mask)
        return x_l.square().sum() + out.sin().sum() + (c_l * x_l[:, :2]).sum()

    inputs = (*shared, w_z)
    results = []
    for fn in (loss, torch.compile(loss, fullgraph=True, backend="aot_eager")):
        leaves = [t.clone().requires_grad_(i not in frozen) for i, t in enumerate(inputs)]
        value = fn(*leaves)
        value.backward()
        results.append([value.detach()] + [t.grad for t in leaves if t.requires_grad])
    assert len(results[0]) == len(results[1]) == 1 + len(inputs) - len(frozen)
    for got, want in zip(*results[::-1]):
        assert rel_err(got, want) <= 1e-5


def authors_case(B=3, n=13, D=8, H=2, d_p=3, d_in=4, per_sample=True, seed=6):
    """x, z and AuthorsWeights (float32, standard normal / √D) for the authors' form."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(d_in, D), (d_in,), (d_in, D), (D, D), (D,), (d_in, D), (d_in,), (d_in, D),
              (d_in,), (D, D), (D,), (D,), (D,), (H * d_p, D), (H * d_p,), (D, D), (D,)]
    weights = [torch.randn(*s, generator=g) / D ** 0.5 for s in shapes]
    z = torch.randn(*((B,) if per_sample else ()), d_p, D, generator=g)
    return torch.randn(B, n, D, generator=g), z, weights


@pytest.mark.parametrize("per_sample", [False, True])
def test_authors_form_compiles_fullgraph_and_matches_eager(per_sample):
    """The authors' form runs on the compress_positions custom op (opchecked above) and
    plain ops: one graph under torch.compile, the eager values and gradients, and the
    float64 reference."""
    x, z, weights = authors_case(per_sample=per_sample)
    mask = padding(3, x.shape[1])

    def loss(x, z, *weights):
        y, c = dba_authors_attention(x, z, AuthorsWeights(*weights), 2, mask)
        return y.square().sum() + c.sin().sum()

    results = []
    for fn in (loss, torch.compile(loss, fullgraph=True, backend="aot_eager")):
        leaves = [t.clone().requires_grad_() for t in (x, z, *weights)]
        value = fn(*leaves)
        value.backward()
        results.append([value.detach()] + [t.grad for t in leaves])
    for got, want in zip(*results[::-1]):
        assert rel_err(got, want) <= 1e-5
    leaves = [t.double() for t in (x, z, *weights)]
    got = dba_authors_attention(leaves[0], leaves[1], AuthorsWeights(*leaves[2:]), 2, mask)
    want = dba_authors_reference(leaves[0], leaves[1], AuthorsWeights(*leaves[2:]), 2, mask)
    assert all(rel_err(a, b) <= 1e-10 for a, b in zip(got, want))


def test_authors_layer_exports_and_runs_like_eager():
    from weirdnet.layers import build

    torch.manual_seed(3)
    layer = build("dba", 16, causal=False, form="authors", heads=2, d_p=4, d_in=6).eval()
    x = torch.randn(2, 11, 16)
    mask = padding(2, 11)

    class Both(torch.nn.Module):
        def __init__(self, mixer):
            super().__init__()
            self.mixer = mixer

        def forward(self, x, mask):
            return self.mixer(x, mask, return_z=True)

    program = torch.export.export(Both(layer), (x, mask))
    got, want = program.module()(x, mask), layer(x, mask, return_z=True)
    assert all(rel_err(a, b) <= 1e-6 for a, b in zip(got, want))
    ops = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert any("dba_compress_positions" in op for op in ops)
