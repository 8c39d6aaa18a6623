"""Packed documents in weird_scan: each document of a packed row gets the outputs and
gradients it gets alone, on every backend, against the float64 reference."""

import pytest
import torch

from helpers.numerics import rel_err
from helpers.scan import make_inputs, reach_mask
from weirdnet.ops import weird_scan, weird_scan_bidirectional, weird_scan_reference
from weirdnet.ops.packing import segment_ids

pytestmark = pytest.mark.usefixtures("one_thread")


def doc_layout(B, L, seed):
    """(B, L) int64 ids with several documents per row: a 1-token document, a start at a
    power-of-two distance from the previous one, ids that repeat after another document
    (a new document all the same) and arbitrary (not canonical) values."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(B, L, dtype=torch.int64)
    for b in range(B):
        cuts = sorted(set(torch.randint(1, max(2, L), (max(1, L // 40) + b,), generator=g)
                          .tolist()) | ({min(8, L - 1), min(9, L - 1)} - {0}))
        value, start = 0, 0
        for cut in cuts + [L]:
            ids[b, start:cut] = 7 * (value % 2) + 3  # alternate 3, 10, 3, ...: repeats
            value, start = value + 1, cut
    return ids


LENGTHS = [1, 2, 3, 7, 9, 100, 1000]


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("wide", [False, True])
def test_packed_matches_reference(backend, L, reverse, wide):
    """Forward and all gradients, float64 and float32, with padding beside the documents;
    ``wide`` logits (x40) take the C kernel's running-max backward, narrow ones its
    linear-domain one."""
    B, D = 2, 5
    a, v, log_w, mask = make_inputs(B, L, D, "cumexp", seed=L + 31 * wide,
                                    scale=80.0 if wide else 2.0)
    docs = doc_layout(B, L, seed=L)
    keep = _reach(mask, docs, reverse)
    grad = torch.randn(B, L, D, dtype=torch.float64) * keep
    leaves = [x.clone().requires_grad_() for x in (a, v, log_w)]
    ref = weird_scan_reference(*leaves, reverse=reverse, mask=mask, doc_ids=docs)
    ref_grads = torch.autograd.grad(ref.nan_to_num(), leaves, grad)
    for dtype, tol in [(torch.float64, 1e-10), (torch.float32, 1e-4)]:
        xs = [x.detach().to(dtype).requires_grad_() for x in (a, v, log_w)]
        out = weird_scan(*xs, reverse=reverse, mask=mask, doc_ids=docs, backend=backend)
        assert torch.isfinite(out).all()
        assert rel_err(out[keep.expand_as(out)], ref[keep.expand_as(ref)]) <= tol / 10
        grads = torch.autograd.grad(out, xs, grad.to(dtype))
        for name, got, want in zip(("a", "v", "log_w"), grads, ref_grads):
            assert torch.isfinite(got).all(), name
            assert rel_err(got, want) <= tol, name


def _reach(mask, docs, reverse):
    """(B, L, 1): outputs whose window (within their document) holds a real token."""
    B, L = docs.shape
    if mask is None:
        return torch.ones(B, L, 1, dtype=torch.bool)
    seg = segment_ids(docs)
    keep = torch.zeros(B, L, dtype=torch.bool)
    for b in range(B):
        for s in seg[b].unique():
            where = seg[b] == s
            keep[b, where] = reach_mask(mask[b, where].unsqueeze(0), 1, int(where.sum()),
                                        reverse)[0, :, 0]
    return keep.unsqueeze(-1)


@pytest.mark.parametrize("L", [3, 64, 300])
def test_each_document_as_alone(backend, L):
    """Document by document, the packed outputs and gradients are the document's own."""
    B, D = 2, 4
    a, v, log_w, _ = make_inputs(B, L, D, "cumexp", seed=5, masked=False)
    docs = doc_layout(B, L, seed=2)
    leaves = [x.clone().requires_grad_() for x in (a, v, log_w)]
    out = weird_scan_bidirectional(*leaves, doc_ids=docs, split=2, backend=backend)
    grad = torch.randn_like(out)
    d_packed = torch.autograd.grad(out, leaves, grad)
    seg = segment_ids(docs)
    d_log_w = torch.zeros_like(log_w)
    for b in range(B):
        for s in seg[b].unique():
            where = seg[b] == s
            parts = [x[b, where].unsqueeze(0).detach().requires_grad_() for x in (a, v)]
            w = log_w.detach().requires_grad_()
            alone = weird_scan_bidirectional(*parts, w, split=2, backend=backend)
            assert rel_err(out[b, where], alone[0]) <= 1e-12
            da, dv, dw = torch.autograd.grad(alone, [*parts, w], grad[b, where].unsqueeze(0))
            assert rel_err(d_packed[0][b, where], da[0]) <= 1e-12
            assert rel_err(d_packed[1][b, where], dv[0]) <= 1e-12
            d_log_w += dw
    assert rel_err(d_packed[2], d_log_w) <= 1e-12


def test_doc_ids_are_checked():
    a, v, log_w, _ = make_inputs(2, 5, 3, masked=False)
    with pytest.raises(ValueError, match="doc_ids must be an integer tensor"):
        weird_scan(a, v, log_w, doc_ids=torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"doc_ids must have shape \(batch, length\)"):
        weird_scan(a, v, log_w, doc_ids=torch.zeros(2, 4, dtype=torch.int64))


def test_one_document_changes_nothing(backend):
    a, v, log_w, mask = make_inputs(2, 37, 4)
    same = torch.full((2, 37), 5)
    for reverse in (False, True):
        plain = weird_scan(a, v, log_w, reverse=reverse, mask=mask, backend=backend)
        packed = weird_scan(a, v, log_w, reverse=reverse, mask=mask, doc_ids=same,
                            backend=backend)
        assert torch.equal(plain, packed)
