"""Path B equals path A bit for bit wherever a tile passes the spread test (issue 73,
docs/design.md §19): the property test on random tiles below, just under and at the
threshold, with tiny, zero and subnormal-adjacent values; a tile above it takes A."""

import math

import pytest
import torch

from weirdnet.ops import levels_needed
from weirdnet.ops.weird_scan import tiles
from weirdnet.ops.weird_scan.pytorch import level_weights

pytestmark = pytest.mark.usefixtures("one_thread")

VALUES = ["normal", "tiny", "zeros", "subnormal-adjacent", "cancelling"]


def _values(kind: str, N: int, R: int, g: torch.Generator, dtype) -> torch.Tensor:
    v = torch.randn(N, R, generator=g, dtype=torch.float64)
    if kind == "tiny":  # |V| around 2^-30: within the range, far below 1
        v = v * 2.0 ** -30
    elif kind == "zeros":
        v = torch.where(torch.rand(N, R, generator=g) < 0.5, v * 0, v)
    elif kind == "cancelling":  # pairs of equal and opposite values: h cancels exactly
        v[:, 1::2] = -v[:, : R // 2 * 2 : 2][:, : v[:, 1::2].shape[1]]
    return v.to(dtype)


def _tiles(N: int, R: int, kind: str, target: int | None, seed: int, dtype):
    """(a, v, weights): N random tiles of R rows; with ``target``, the first row moved
    so that every tile's spread is exactly ``target`` binades: its logit moved down, or,
    for "subnormal-adjacent", its |V| (then B's smallest values lie within the margins of
    the smallest normal number)."""
    g = torch.Generator().manual_seed(seed)
    nlev = max(1, levels_needed(R))
    a = (torch.randn(N, R, generator=g, dtype=torch.float64) * 2).to(dtype)
    log_w = torch.randn(nlev, N, 1, generator=g, dtype=torch.float64).to(dtype)
    v = _values(kind, N, R, g, dtype)
    weights = level_weights(log_w)
    if target is None and kind == "subnormal-adjacent":
        target = tiles.limit(dtype) - 16
    if target is not None:
        a[:, 0], v[:, 0] = a[:, 1], v[:, 1]  # row 0 then sets the minimum alone
        current = tiles.spread(a, v, weights[0])
        assert (target >= current).all(), "pick a target above the random tiles' spread"
        if kind == "subnormal-adjacent":
            smallest = torch.where(v != 0, v.abs(), torch.inf).amin(1).clamp(max=1)
            exponent = torch.frexp(smallest).exponent - 1 - (target - current)
            v[:, 0] = (torch.sign(v[:, 1]) * 2.0 ** exponent.to(torch.float64)).to(dtype)
        else:
            na, _ = tiles.split_log(a)
            lowest = na.amin(1) - (target - current)  # the new minimum exponent per tile
            a[:, 0] = ((lowest + 0.5) * math.log(2.0)).to(dtype)
        assert torch.equal(tiles.spread(a, v, weights[0]), torch.full_like(current, target))
    return a, v, weights


def _same(x, y) -> bool:
    return all(torch.equal(p, q) for p, q in zip(x, y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", VALUES)
@pytest.mark.parametrize("R", [1, 2, 3, 7, 64, 256])
@pytest.mark.parametrize("where", ["below", "just-under", "at"])
def test_path_b_equals_path_a_bit_for_bit(dtype, kind, R, where):
    if R == 1 and (where != "below" or kind == "subnormal-adjacent"):
        pytest.skip("one row: no second row to set the spread with")
    N, top = 48, tiles.limit(dtype)
    target = {"below": None, "just-under": top - 1, "at": top}[where]
    a, v, weights = _tiles(N, R, kind, target, seed=R * 7 + len(kind), dtype=dtype)
    width = tiles.spread(a, v, weights[0])
    assert (width <= top).all()
    E = tiles.tile_exponent(a, weights[0])
    h, u, clean = tiles.path_b(a, v, weights, E)
    want = tiles.boundary(*tiles.path_a(a, v, weights))
    got_b = tiles.boundary(E.expand_as(h), h, u)
    # the spread test's margins leave every product normal here: B runs on every tile
    assert clean.all(), f"{int((~clean).sum())} of {N} tiles left the normal range"
    assert _same(got_b, want)
    chosen, took_a = tiles.scan_tiles(a, v, weights)
    assert not took_a.any() and _same(chosen, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["normal", "zeros"])
@pytest.mark.parametrize("R", [2, 7, 256])
def test_a_tile_above_the_threshold_takes_path_a(dtype, kind, R):
    a, v, weights = _tiles(16, R, kind, tiles.limit(dtype) + 1, seed=R, dtype=dtype)
    chosen, took_a = tiles.scan_tiles(a, v, weights)
    assert took_a.all()
    assert _same(chosen, tiles.boundary(*tiles.path_a(a, v, weights)))


def test_path_a_tiles_are_the_torch_backends_scan():
    """path_a on one tile is the PyTorch backend's causal scan of those rows, bit for bit
    (the specification and the backend share their merge)."""
    from weirdnet.ops import weird_scan

    g = torch.Generator().manual_seed(5)
    N, R = 6, 100
    a, v = torch.randn(N, R, generator=g) * 4, torch.randn(N, R, generator=g)
    log_w = torch.randn(levels_needed(R), N, generator=g).cumsum(0)
    m, h, u = tiles.path_a(a, v, level_weights(log_w.unsqueeze(-1)))
    out = weird_scan(a.T.unsqueeze(0), v.T.unsqueeze(0), log_w, backend="torch")
    assert torch.equal(h / u, out[0].T)


def test_a_product_that_leaves_the_normal_range_sends_the_tile_to_a():
    """Below the threshold B still checks its products: a tile whose values sit at the
    smallest normal number (outside what the spread test allows) is not clean."""
    a = torch.zeros(2, 4)
    v = torch.full((2, 4), torch.finfo(torch.float32).tiny)
    n, f = level_weights(torch.full((2, 2, 1), -3.0))
    h, u, clean = tiles.path_b(a, v, (n, f), tiles.tile_exponent(a, n))
    assert not clean.any()
    chosen, took_a = tiles.scan_tiles(a, v, (n, f))
    assert took_a.all() and _same(chosen, tiles.boundary(*tiles.path_a(a, v, (n, f))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pow2_is_exact_and_split_log_is_a_mantissa_and_an_integer(dtype):
    """Path A's rescale factors are exact powers of two down to the smallest normal
    number (0 below it and for NaN); e^x = f 2^n with f in [1, 2], n an integer, to
    float rounding."""
    from weirdnet.ops.weird_scan.pytorch import pow2, split_log

    bias = tiles.limit(dtype) + 1
    e = torch.arange(-bias - 3, 1, dtype=dtype)
    want = torch.tensor([2.0 ** k if k > -bias else 0.0 for k in range(-bias - 3, 1)],
                        dtype=dtype)
    assert torch.equal(pow2(e), want)
    assert pow2(torch.tensor([float("nan")], dtype=dtype)).item() == 0.0
    x = torch.randn(1000, dtype=torch.float64) * 300
    n, f = split_log(x.to(dtype))
    assert torch.equal(n, n.floor()) and (f >= 1).all() and (f <= 2).all()
    got = n.double() * math.log(2.0) + f.double().log()
    ref = x.to(dtype).double()
    assert ((got - ref).abs() <= 4 * torch.finfo(dtype).eps * ref.abs().clamp(min=1)).all()
