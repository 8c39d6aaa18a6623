"""Backend "triton-e2" (issue 73): path B gives path A's bits, the default pass structure is
exact across its boundaries, outputs do not depend on the length, decoding crosses form
points bit for bit.  Under the Triton interpreter without a GPU (as test_scan_triton.py,
which also runs every "triton" test on this backend)."""

import math

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'weirdnet[triton]')")

from test_scan_triton import CUDA, e2, on_device  # noqa: E402

from helpers.numerics import rel_err  # noqa: E402
from helpers.scan import make_inputs, reach_mask  # noqa: E402
from weirdnet.ops import WeirdScanCache, weird_scan, weird_scan_reference  # noqa: E402

pytestmark = pytest.mark.slow  # the Triton interpreter

if not CUDA and not e2.INTERPRETED:
    pytest.skip("the kernels were imported for a GPU and there is no GPU",
                allow_module_level=True)


@pytest.fixture(autouse=True)
def no_selfcheck(monkeypatch):
    monkeypatch.setenv("WEIRDNET_SCAN_SELFCHECK", "0")


def both_paths(monkeypatch, a, v, log_w, mask=None, doc=None, n_causal=None):
    """(O with path B allowed, O with path A forced, B's counts {pass lo: (B, all)})."""
    out_b, counts = e2.path_counts(a, v, log_w, mask, doc, n_causal)
    with monkeypatch.context() as patch:
        patch.setattr(e2, "PATH_B", False)
        out_a, counts_a = e2.path_counts(a, v, log_w, mask, doc, n_causal)
    assert all(took == 0 for took, _ in counts_a.values())
    return out_b, out_a, counts


def spread_logits(L: int, bits: int, gen) -> torch.Tensor:
    """(1, L, 1) logits whose power-of-two exponents span exactly ``bits`` (0 .. bits), in a
    random order, each with a random fraction."""
    m = torch.linspace(0, bits, L).floor()
    m[0], m[-1] = 0, bits
    m = m[torch.randperm(L, generator=gen)]
    frac = torch.rand(L, generator=gen) * 0.9 + 0.05
    return ((m + frac) * math.log(2)).reshape(1, L, 1)


def awkward_values(L: int, gen) -> torch.Tensor:
    """(1, L, 1) values: normal ones, zeros, exact cancelling pairs, tiny powers of two down
    to the subnormal edge."""
    v = torch.randn(L, generator=gen)
    kind = torch.randint(0, 5, (L,), generator=gen)
    v = torch.where(kind == 1, torch.zeros(()), v)
    v = torch.where(kind == 2, v * 2.0 ** -torch.randint(20, 126, (L,), generator=gen).float(), v)
    v[1::7] = -v[0::7][: v[1::7].numel()]
    return v.reshape(1, L, 1)


# Spreads of the exponents in one column (bits): well below, just under, at and above the
# bound B takes (min m >= E - 99 with W = 1).
@pytest.mark.parametrize("bits,takes_b", [(10, True), (98, True), (99, True), (100, False),
                                          (130, False)])
@pytest.mark.parametrize("values", ["unit", "awkward"])
def test_path_b_gives_path_a_bits(monkeypatch, bits, takes_b, values):
    """torch.equal of the outputs with path B allowed and with path A forced, on one
    column (one program) with unit weights, so the spread is exactly ``bits``.  With
    values of magnitude in [1, 2) a column within the bound takes B and one above it A;
    zeros, cancelling pairs and tiny values may send it to A (the cancellation check)."""
    gen = torch.Generator().manual_seed(bits)
    L = 32  # one pass, one segment: levels 0-4 on the inputs themselves
    a = spread_logits(L, bits, gen)
    if values == "unit":
        v = (torch.rand(1, L, 1, generator=gen) + 1) * torch.randn(1, L, 1, generator=gen).sign()
    else:
        v = awkward_values(L, gen)
    log_w = torch.zeros(5, 1)
    out_b, out_a, counts = both_paths(monkeypatch, *on_device(a, v, log_w))
    assert torch.equal(out_b, out_a)
    took, segments = counts[0]
    assert segments == 1
    if values == "unit":
        assert (took > 0) == takes_b, counts
    else:
        assert took <= segments


@pytest.mark.parametrize("seed", range(6))
def test_path_b_gives_path_a_bits_on_random_tiles(monkeypatch, seed):
    """Random logits, weights and values at several scales, tiny and zero values among
    them, multi-pass tiling with halos: the two paths agree bit for bit, and B is taken."""
    gen = torch.Generator().manual_seed(seed)
    B, L, D = 1, 100, 2
    scale = [0.5, 4.0, 20.0, 40.0, 60.0, 2.0][seed]
    a = torch.randn(B, L, D, generator=gen) * scale
    v = torch.randn(B, L, D, generator=gen)
    v[..., 1] *= 2.0 ** -torch.randint(0, 100, (B, L), generator=gen).float()
    v[:, ::5] = 0
    log_w = torch.randn(7, D, generator=gen).cumsum(0) * (scale / 4)
    with monkeypatch.context() as patch:
        small_passes(patch)
        out_b, out_a, counts = both_paths(monkeypatch, *on_device(a, v, log_w))
    assert torch.equal(out_b, out_a)
    if seed in (0, 5):
        assert sum(took for took, _ in counts.values()) > 0, counts


def small_passes(patch):
    """A form point every 3 levels, at most 3 levels a pass, windows of twice the halo."""
    for name, value in (("FORM_LEVELS", (3,)), ("FORM_STEP", 3), ("ONE_PASS_LEVELS", 3),
                        ("COARSE_LEVELS", 3), ("FINE_LEVELS", 3), ("FINE_WINDOW", 1)):
        patch.setattr(e2, name, value)


@pytest.mark.parametrize("n_causal", [2, 0, 1])
def test_path_b_gives_path_a_bits_with_documents_and_both_directions(monkeypatch, n_causal):
    """Packed documents (the gate is the same select in both paths), causal, anti-causal
    and split channels, multi-pass tiling: bit for bit, and B is taken."""
    gen = torch.Generator().manual_seed(n_causal)
    B, L, D = 2, 100, 2
    a = torch.randn(B, L, D, generator=gen) * 4
    v = torch.randn(B, L, D, generator=gen)
    log_w = torch.randn(7, D, generator=gen).cumsum(0)
    doc = torch.zeros(B, L, dtype=torch.int64)
    doc[0, 30:] += 1
    doc[0, 64:] += 1
    doc[1, 50:] += 1
    with monkeypatch.context() as patch:
        small_passes(patch)
        out_b, out_a, counts = both_paths(monkeypatch, *on_device(a, v, log_w), None,
                                          *on_device(doc), n_causal)
    assert torch.equal(out_b, out_a)
    assert sum(took for took, _ in counts.values()) > 0, counts


@pytest.mark.parametrize("L", [1000, 1500])
@pytest.mark.parametrize("wide", [False, True])
def test_default_passes_match_reference(L, wide):
    """The default structure: one pass at L = 1000 (form points 5, 7, 9 in registers), two
    at L = 1500 (levels 0-4 on tiles with a halo, 5-10 on whole columns); typical and
    wide-spread logits (40 N(0, 1), log-weights x 10), fp32 and bf16."""
    B, D = 1, 3
    a, v, log_w, mask = make_inputs(B, L, D, seed=L, scale=40.0 if wide else 1.0)
    if wide:
        log_w = log_w * 10
    ref = weird_scan_reference(a, v, log_w, mask=mask)
    keep = reach_mask(mask, B, L, False).expand_as(ref)
    assert len(e2.plan(L, max(0, L - 1).bit_length())) == (1 if L <= 1024 else 2)
    for dtype, tol in [(torch.float32, 2e-6), (torch.bfloat16, 1e-2)]:
        xs = on_device(a.to(dtype), v.to(dtype), log_w.float(), mask)
        out = weird_scan(*xs[:3], mask=xs[3], backend="triton-e2").cpu()
        assert out.dtype == dtype and torch.isfinite(out).all()
        if dtype == torch.bfloat16:
            ref = weird_scan_reference(a.to(dtype).double(), v.to(dtype).double(), log_w,
                                       mask=mask)
        assert rel_err(out.double()[keep], ref[keep]) <= tol


def test_outputs_do_not_depend_on_the_length():
    """O of a prefix is the prefix of O, bit for bit, whatever pass structure either length
    takes (the form points are fixed levels)."""
    B, L, D = 1, 1500, 2
    a, v, log_w, mask = on_device(*make_inputs(B, L, D, seed=4, masked=False))
    a, v = a.float(), v.float()
    full = weird_scan(a, v, log_w.float(), backend="triton-e2")
    for t in (7, 33, 200, 1025):
        part = weird_scan(a[:, :t], v[:, :t], log_w.float(), backend="triton-e2")
        assert torch.equal(part, full[:, :t]), t


def test_decoding_crosses_form_points_bitwise():
    """A cache of 8 levels decodes 150 tokens (form points 5 and 7 crossed) to the full
    pass's bits."""
    B, L, D = 2, 150, 3
    a, v, log_w, mask = make_inputs(B, L, D, seed=150)
    a, v, log_w, mask = on_device(a.float(), v.float(), log_w.float(), mask)
    full = weird_scan(a, v, log_w, mask=mask, backend="triton-e2")
    cache = WeirdScanCache(log_w, B, backend="triton-e2")
    prefix = cache.extend(a[:, :40], v[:, :40], mask[:, :40])
    rest = cache.extend(a[:, 40:], v[:, 40:], mask[:, 40:])
    assert torch.equal(torch.cat([prefix, rest], 1), full)


def test_a_cache_of_it_refuses_the_pytorch_ring_step():
    """Its rings change form at its own form points, which ``pytorch.extend_at`` (the
    CUDA-graph step of ``WeirdScanCache.follow``) does not: a followed cache would decode
    other bits, so ``follow`` refuses it in one line, and ``follow(None)`` is a no-op."""
    log_w = torch.randn(8, 3).cumsum(0).float()
    cache = WeirdScanCache(on_device(log_w)[0], 2, backend="triton-e2")
    with pytest.raises(ValueError, match="decodes in its own kernel"):
        cache.follow(torch.tensor(0, device=cache.device))
    cache.follow(None)


def test_bench_passes_runs_each_pass_of_the_forward(monkeypatch):
    """The measuring hook of ``weirdnet bench gpu``: one entry per pass of :func:`plan`, the
    passes run in order give :func:`fwd`'s output bit for bit, and the launch without
    levels runs on the same tiles."""
    monkeypatch.setattr(e2, "ONE_PASS_LEVELS", 4)  # L = 128: two passes
    monkeypatch.setattr(e2, "FORM_LEVELS", (4,))
    monkeypatch.setattr(e2, "COARSE_LEVELS", 3)
    monkeypatch.setattr(e2, "FINE_LEVELS", 4)
    L, D = 128, 3
    a, v, log_w, _ = make_inputs(1, L, D, seed=7, masked=False)
    a, v, log_w = on_device(a.float(), v.float(), log_w.float())
    nlev = (L - 1).bit_length()
    want = e2.fwd(a, v, log_w, None, None, D, nlev)
    out = torch.full_like(a, float("nan"))
    runs = e2.bench_passes(a, v, log_w, nlev, out)
    assert torch.equal(out, want)  # the hook ran the forward once
    assert [label for label, _, _ in runs] == [
        f"pass {i + 1} of {len(e2.plan(L, nlev))}: levels {p.lo}-{p.lo + p.nl - 1}"
        for i, p in enumerate(e2.plan(L, nlev))]
    assert len(runs) == 2
    for _, _, run_empty in runs:
        run_empty()
    out.fill_(float("nan"))
    for _, run, _ in runs:
        run()
    assert torch.equal(out, want)
