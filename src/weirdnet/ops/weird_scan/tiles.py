"""Exponent-aligned tiles: path A and path B of the GPU scan, specified in PyTorch.

The readable specification the Triton kernels follow (docs/design.md §19).  A *tile* is
R consecutive rows of one column (one batch row and channel); the levels k < ``nlev``
run inside it, position i merging with i - 2^k when that row lies in the tile (a kernel's
halo rows are simply the tile's first rows).  Shapes: ``a``, ``v`` (N, R), N tiles;
level weights ``(n, f)`` (nlev, N, 1), ``e^{log_w} = f 2^n`` (:func:`.pytorch.split_log`).

Path A (:func:`path_a`): the running max in powers of two of the PyTorch backend
(``pytorch.initial_state`` / ``pytorch.merge``): m an integer per element, every rescale
an exact power of two.

Path B (:func:`path_b`): one exponent E per tile, no m, no max, no exp inside the levels:

    u_0 = f_A 2^{n_A - E},  h_0 = V u_0,   then per level  h += W h_shift,  u += W u_shift

with ``W = f_k 2^{n_k}``: two multiply-adds per element and level.  Scaling by 2^j
commutes with rounding while nothing is subnormal or overflows, and A's merge rounds its
product and its sum once each, as B's level does; so where every product B forms is zero
or a normal number, B's (h, u) are A's times 2^{m - E}, bit for bit, and so are O = h/u
and the pass-boundary form :func:`boundary`.  :func:`spread` is the test that lets a tile
try B (a bound on the binades its values span, with a margin for cancellation in h);
B also reports whether all its products stayed normal, and a tile whose products did not
takes A (:func:`scan_tiles`).  Either way the tile's bits are A's: the choice cannot change
an output bit, so it may look at later rows or at other channels without breaking
causality.
"""

from __future__ import annotations

import torch

from .pytorch import _FLOAT_BITS, initial_state, merge_level, split_log

CANCEL_BITS = 24
"""Binades below its smallest term a nonzero sum of h may reach by cancellation (one
float32 mantissa); deeper cancellation is caught by B's product check."""


def limit(dtype: torch.dtype) -> int:
    """Largest spread (binades) that keeps every value of A and B normal: 126 in
    float32, 1022 in float64 (the exponent bias minus one)."""
    return _FLOAT_BITS[dtype][0] - 1


def pow2_signed(e: torch.Tensor) -> torch.Tensor:
    """2^e exactly for integer-valued e in [-bias + 1, bias] (float32 or float64)."""
    bias, mantissa, itype = _FLOAT_BITS[e.dtype]
    k = e.clamp(-bias, bias)
    return ((k + bias).to(itype) << mantissa).view(e.dtype)


def _binade(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 |x|) (x's frexp exponent - 1), integer-valued, x's dtype."""
    return (torch.frexp(x).exponent - 1).to(x.dtype)


def spread(a: torch.Tensor, v: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """(N,) the binades one tile's values may span; B may run where it is <= ``limit``.

    a, v (N, R) finite; n (nlev, N, 1) the levels' exponents.  With n_A the logits'
    exponents, the tile's terms lie in 2^[bottom, top) times |V|, where
    top = max n_A + sum max(n_k, 0) and bottom = min n_A + sum min(n_k, 0); sums of up to
    R terms, each carrying a mantissa factor below 2 per level, grow by at most
    2^(ceil log2 R + nlev + 1); cancellation in h may reach CANCEL_BITS lower.  The sum of
    these ranges and of V's (from its largest |V|, at least 1, down to its smallest
    nonzero |V|, at most 1) bounds every value of B (E = top) and of A relative to m."""
    na, _ = split_log(a)
    up = n.clamp(min=0).sum(0).squeeze(-1)
    down = n.clamp(max=0).sum(0).squeeze(-1)
    top, bottom = na.amax(1) + up, na.amin(1) + down
    mag = v.abs()
    one = torch.ones((), dtype=v.dtype, device=v.device)
    vhi = _binade(torch.maximum(mag.amax(1), one)) + 1
    nonzero = torch.where(mag > 0, mag, torch.full_like(mag, float("inf")))
    vlo = _binade(torch.minimum(nonzero.amin(1), one))
    rows = a.shape[1]
    growth = max(1, rows - 1).bit_length() + n.shape[0] + 1
    return (top - bottom) + (vhi - vlo) + growth + CANCEL_BITS


def tile_exponent(a: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """E (N, 1): ``top`` of :func:`spread`, at least every m path A reaches in the tile."""
    na, _ = split_log(a)
    return na.amax(1, keepdim=True) + n.clamp(min=0).sum(0)


def path_a(a, v, weights):
    """(m, h, u) (N, R) each: path A, the levels of ``weights = (n, f)`` in the tile."""
    state = initial_state(a, v, None)
    n, f = weights
    for k in range(n.shape[0]):
        s = 1 << k
        if s >= a.shape[1]:
            break
        new = merge_level(tuple(x[:, s:] for x in state), tuple(x[:, :-s] for x in state),
                          (n[k], f[k]))
        state = tuple(torch.cat([x[:, :s], y], 1) for x, y in zip(state, new))
    return state


def _normal_or_zero(x: torch.Tensor) -> torch.Tensor:
    """(N,) whether every entry of each row of x is 0 or a finite normal number."""
    tiny = torch.finfo(x.dtype).tiny
    mag = x.abs()
    return ((mag == 0) | ((mag >= tiny) & torch.isfinite(mag))).all(1)


def path_b(a, v, weights, E):
    """(h, u, clean): path B with tile exponent E (N, 1); clean (N,) False where a
    product left the normal range (then B's bits may differ from A's)."""
    n, f = weights
    na, fa = split_log(a)
    u = pow2_signed(na - E) * fa  # exact: a power of two times fa
    h = v * u
    clean = _normal_or_zero(h) & _normal_or_zero(u)
    for k in range(n.shape[0]):
        s = 1 << k
        if s >= a.shape[1]:
            break
        w = f[k] * pow2_signed(n[k])  # exact: W_k itself
        ph, pu = h[:, :-s] * w, u[:, :-s] * w
        clean &= _normal_or_zero(ph) & _normal_or_zero(pu)
        h = torch.cat([h[:, :s], h[:, s:] + ph], 1)
        u = torch.cat([u[:, :s], u[:, s:] + pu], 1)
    return h, u, clean


def boundary(m, h, u):
    """The pass-boundary form, independent of the representation: (O, log2 U's exponent,
    U's mantissa) with ``(mantissa, e) = frexp(u)`` and exponent ``m + e``."""
    mantissa, e = torch.frexp(u)
    return h / u, m + e.to(m.dtype), mantissa


def scan_tiles(a, v, weights):
    """(boundary form of every tile, took_a (N,) bool): B where the spread test passes and
    B's products stayed normal, else A.  Equal to :func:`path_a`'s boundary form bit for
    bit (the property test)."""
    n, _ = weights
    try_b = spread(a, v, n) <= limit(a.dtype)
    E = tile_exponent(a, n)
    h, u, clean = path_b(a, v, weights, E)
    took_a = ~(try_b & clean)
    out_b = boundary(E.expand_as(h), h, u)
    if not took_a.any():
        return out_b, took_a
    out_a = boundary(*path_a(a, v, weights))
    pick = took_a.unsqueeze(1)
    return tuple(torch.where(pick, x, y) for x, y in zip(out_a, out_b)), took_a
