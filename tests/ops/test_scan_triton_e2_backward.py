"""The backward of backend "triton-e2" (issue 73, part 4; ``weird_scan.triton_e2_backward``):
forward and all three gradients against the float64 reference on typical and wide-spread
inputs, both paths taken and agreeing, d log_w deterministic.  Under the Triton
interpreter without a GPU (as test_scan_triton.py)."""

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'weirdnet[triton]')")

from test_scan_triton import CUDA, DEVICE, e2, on_device, st  # noqa: E402

from helpers.numerics import rel_err  # noqa: E402
from helpers.scan import make_inputs, reach_mask  # noqa: E402
from weirdnet.ops import weird_scan, weird_scan_reference  # noqa: E402

if not CUDA and not e2.INTERPRETED:
    pytest.skip("the kernels were imported for a GPU and there is no GPU",
                allow_module_level=True)

kb = e2._backward


@pytest.fixture(autouse=True)
def no_selfcheck(monkeypatch):
    monkeypatch.setenv("WEIRDNET_SCAN_SELFCHECK", "0")


def inputs(B, L, D, kind, seed):
    """(a, v, log_w, mask, grad) in float64: "typical" (logits N(0, 4), log_w the cumsum of
    N(0, 1)) or "wide" (logits N(0, 40^2), log_w ten times that: spreads far beyond path
    B's 60 bits, so programs take path A)."""
    scale = 40.0 if kind == "wide" else 2.0
    a, v, log_w, mask = make_inputs(B, L, D, seed=seed, scale=scale)
    if kind == "wide":
        log_w = log_w * 10
    keep = reach_mask(mask, B, L, False)
    grad = torch.randn(B, L, D, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(seed + 1)) * keep
    return a, v, log_w, mask, grad


def check_against_reference(B, L, D, kind, seed, tol=2e-6, gtol=1e-5):
    a, v, log_w, mask, grad = inputs(B, L, D, kind, seed)
    leaves = [x.clone().requires_grad_() for x in (a, v, log_w)]
    ref = weird_scan_reference(*leaves, mask=mask)
    want = torch.autograd.grad(ref.nan_to_num(), leaves, grad)
    xs = [x.detach().float().to(DEVICE).requires_grad_() for x in (a, v, log_w)]
    out = weird_scan(*xs, mask=on_device(mask)[0], backend="triton-e2")
    keep = reach_mask(mask, B, L, False).expand_as(ref)
    assert rel_err(out.cpu()[keep], ref[keep]) <= tol
    got = torch.autograd.grad(out, xs, grad.float().to(DEVICE))
    for name, g, w in zip(("a", "v", "log_w"), got, want):
        assert torch.isfinite(g).all(), name
        assert rel_err(g.cpu(), w) <= gtol, (name, rel_err(g.cpu(), w))


@pytest.mark.parametrize("kind", ["typical", "wide"])
@pytest.mark.parametrize("L", [1, 2, 3, 7])
def test_short_sequences_match_reference(L, kind):
    """The fast case: one pass on whole columns."""
    check_against_reference(2, L, 5, kind, seed=L)


@pytest.mark.slow  # the interpreter at L = 1000 and two passes
@pytest.mark.parametrize("kind", ["typical", "wide"])
@pytest.mark.parametrize("L", [1000, 1500])
def test_long_sequences_match_reference(L, kind):
    """L = 1000: one pass of 10 levels; L = 1500: two passes (a fine pass with halos on
    both sides, then the coarse pass), at the default settings."""
    assert len(kb.plan(L, (L - 1).bit_length())) == (1 if L <= 1024 else 2)
    check_against_reference(1, L, 3, kind, seed=L)


@pytest.mark.slow
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_many_passes_and_tiles_match_reference(monkeypatch, levels):
    """Small passes and windows of four halos: 3 to 7 passes, many tiles each."""
    for name in ("ONE_PASS_LEVELS", "COARSE_LEVELS", "FINE_LEVELS", "FORM_STEP"):
        monkeypatch.setattr(e2, name, levels)
    monkeypatch.setattr(e2, "FORM_LEVELS", (levels,))
    monkeypatch.setattr(kb, "WINDOW", 1)
    assert len(kb.plan(100, 7)) >= 3 and kb.plan(100, 7)[0].nq > 1
    for kind in ("typical", "wide"):
        check_against_reference(2, 100, 4, kind, seed=levels)


def test_path_b_and_path_a_agree_and_both_are_taken(monkeypatch):
    """One batch row typical (its programs take B), one wide (A) in the same launch; the
    same gradients with path A forced everywhere, to float32 accuracy."""
    a, v, log_w, _, grad = inputs(2, 20, 4, "typical", seed=3)
    a[1] *= 30.0  # a spread of about 150 bits in row 1
    xs = [x.float().to(DEVICE) for x in (a, v, log_w, grad)]
    got, counts = kb.path_counts(*xs)
    took, programs = counts[0]
    assert 0 < took < programs  # both paths in one launch
    monkeypatch.setattr(kb, "PATH_B", False)
    forced, counts_a = kb.path_counts(*xs)
    assert all(t == 0 for t, _ in counts_a.values())
    for g, f in zip(got, forced):
        assert rel_err(g.cpu(), f.cpu()) <= 2e-6
    leaves = [x.clone().requires_grad_() for x in (a, v, log_w)]
    ref = weird_scan_reference(*leaves)
    want = torch.autograd.grad(ref, leaves, grad)
    for g, w in zip(got, want):
        assert rel_err(g.cpu(), w) <= 1e-5


def test_typical_inputs_take_path_b():
    a, v, log_w, _, grad = inputs(2, 50, 4, "typical", seed=4)
    _, counts = kb.path_counts(*(x.float().to(DEVICE) for x in (a, v, log_w, grad)))
    assert all(t == n for t, n in counts.values())


def test_d_log_w_is_deterministic():
    """Two runs, bit for bit (per-program partial sums, one float64 reduction, no atomics);
    with padding, so both paths run."""
    a, v, log_w, mask, grad = inputs(2, 40, 6, "typical", seed=5)
    xs = [x.float().to(DEVICE) for x in (a, v, log_w, grad)]
    runs = [kb.bwd(xs[0], xs[1], xs[2], on_device(mask)[0], None, xs[3], 6, 6)
            for _ in range(2)]
    assert runs[0][2].dtype == torch.float64
    for x, y in zip(*runs):
        assert torch.equal(x, y)


def test_nan_output_poisons_d_log_w_and_nan_never_passes():
    """A NaN logit gives NaN outputs from its position on: every level's d log_w of its
    channel is NaN (the reference's poisoning), other channels stay finite; and rel_err
    of a NaN is inf."""
    a, v, log_w, _, grad = inputs(1, 12, 3, "typical", seed=6)
    a[0, 5, 1] = float("nan")
    xs = [x.float().to(DEVICE) for x in (a, v, log_w, grad)]
    da, dv, dlw = kb.bwd(xs[0], xs[1], xs[2][:4].contiguous(), None, None, xs[3], 3, 4)
    assert torch.isnan(dlw[:, 1]).all()
    assert torch.isfinite(dlw[:, [0, 2]]).all()
    assert torch.isnan(dv[0, :6, 1]).all() and torch.isfinite(dv[0, :, [0, 2]]).all()
    assert rel_err(dlw, torch.zeros_like(dlw)) == float("inf")


def test_backward_launches_and_no_host_sync():
    """One kernel per pass and direction, one reduction, no host sync (host code on meta
    tensors through the scan-cost counter)."""
    pytest.importorskip("weirdnet_lab")
    from weirdnet_lab.scan_cost import count

    for L, kernels in ((1024, 1), (4096, 3), (16384, 3)):
        phase = count.count("triton-e2", 8, L, 1024, execute=False)["backward"]
        names = {x.kernel for x in phase.launches}
        assert names == {"_e2_bwd_kernel"}
        assert len(phase.launches) == kernels * len(st.channel_chunks(
            8, L, 1024, torch.float32))
        assert not phase.syncs
        assert [o.name for o in phase.ops] == ["aten.sum"]
