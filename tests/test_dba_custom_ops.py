"""DBA's fused compressions as PyTorch custom ops: opcheck, references, and compile."""

import pytest
import torch

from helpers.numerics import rel_err
from weirdnet.ops.dba import (
    compress_positions,
    dba_attention,
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
    torch.library.opcheck(self_compress_backward_op, (grad, x.detach(), z.detach(),
                                                      w.detach()))
    # against the float64 reference, forward and gradients
    leaves = [t.detach().double().requires_grad_() for t in (x, z)]
    got = dba_compress(leaves[0], leaves[0], leaves[1], mask)
    ref_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    want = dba_compress_reference(ref_leaves[0], ref_leaves[0], ref_leaves[1], mask)
    assert rel_err(got, want) <= 1e-10
    g64 = grad.double()
    torch.autograd.backward(got, g64)
    torch.autograd.backward(want, g64)
    for a, b in zip(leaves, ref_leaves):
        assert rel_err(a.grad, b.grad) <= 1e-10


# (B, n, c, s, l, r, per-sample w_soft, masked)
POSITION_CASES = [
    (1, 1, 4, 2, 0, 3, False, False),
    (3, 7, 5, 3, 2, 0, False, True),
    (3, 33, 4, 2, 1, 2, True, True),
]


@pytest.mark.parametrize("B,n,c,s,rows_lin,r,per_sample,masked", POSITION_CASES)
def test_compress_positions_op(B, n, c, s, rows_lin, r, per_sample, masked):
    g = torch.Generator().manual_seed(n + s)
    x = torch.randn(B, n, c, generator=g, dtype=torch.float64)
    w_soft = torch.randn(*((B,) if per_sample else ()), s, c, generator=g, dtype=torch.float64)
    w_lin = torch.randn(rows_lin, c, generator=g, dtype=torch.float64)
    w_out = torch.randn(r, c, generator=g, dtype=torch.float64)
    mask = padding(B, n) if masked else None
    args = [t.requires_grad_() for t in (x, w_soft, w_lin, w_out)]
    torch.library.opcheck(compress_positions_op, (*args, mask))
    x_l, out, soft, lin = compress_positions_op(*args, mask)
    d_xl, d_out = torch.randn_like(x_l), torch.randn_like(out)
    torch.library.opcheck(compress_positions_backward_op,
                          (d_xl, d_out, *(t.detach() for t in args), soft.detach(),
                           lin.detach(), mask))
    # against plain autograd through the same formula
    leaves = [t.detach().clone().requires_grad_() for t in args]
    got = compress_positions(*leaves, mask)
    plain = [t.detach().clone().requires_grad_() for t in args]
    logits = plain[0] @ plain[1].transpose(-1, -2)
    if mask is not None:
        empty = ~mask.any(1)[:, None, None]
        logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf")).masked_fill(empty, 0)
        soft_w = torch.softmax(logits, 1).masked_fill(empty, 0)
        lin_w = (plain[0] @ plain[2].T).masked_fill(~mask.unsqueeze(-1), 0)
    else:
        soft_w, lin_w = torch.softmax(logits, 1), plain[0] @ plain[2].T
    want = (torch.cat([soft_w.transpose(1, 2) @ plain[0], lin_w.transpose(1, 2) @ plain[0]],
                      1), plain[0] @ plain[3].T)
    for a, b in zip(got, want):
        assert rel_err(a, b) <= 1e-12 or (a.numel() == 0 and b.numel() == 0)
    torch.autograd.backward(got, (d_xl, d_out))
    torch.autograd.backward(want, (d_xl, d_out))
    for a, b in zip(leaves, plain):
        assert a.grad.shape == b.grad.shape
        if b.grad.numel():
            assert rel_err(a.grad, b.grad) <= 1e-12


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
