"""Bytes at a shape the interpreter cannot run, derived exactly from one it can.

The derivation.  A launch's grid is (tiles x column blocks, B) or the like: every program
runs the same code on its own block of (positions, channels), so a pointer argument's
distinct elements touched are a fixed fraction of that argument's elements, whatever B
and D are, as long as L (which fixes the passes, tiles and halos) and the block shapes
(fixed once D >= 16, the channel block) stay the same.  So at a large shape each launch
touches ``touched_small x numel_large / numel_small`` elements of each argument: an
(B, L, D) tensor scales with B·D, log_w (K, D) with D, a per-program partial sum with the
grid.  The large shape's launches, their arguments and the host code's own ops come from
running the host code there on meta tensors (:func:`weirdnet_lab.scan_cost.count.count`
with ``execute=False``: nothing allocated, no kernel run); the host code may split the
channels into chunks, each running the same launches, so large launch ``i`` takes the
counts of small launch ``i mod n``, which must be the same kernel with the same
constexprs (else :class:`DerivationError`).  The tests check the derivation against
interpreter runs at a second shape, with and without channel chunks, argument by
argument.
"""

from __future__ import annotations

from fractions import Fraction

from .count import Launch, Phase


class DerivationError(ValueError):
    """The large shape's launches do not repeat the small shape's."""


def derive(small: Phase, large: Phase) -> Phase:
    """``large`` (a run that executed nothing) with each launch's per-argument counts
    derived from ``small`` (a run that executed)."""
    n = len(small.launches)
    if n == 0 or len(large.launches) % n:
        raise DerivationError(f"{len(large.launches)} launches at the large shape are not "
                              f"a whole number of repeats of the {n} at the small shape")
    out = Phase(ops=list(large.ops))
    for i, big in enumerate(large.launches):
        ref = small.launches[i % n]
        if (ref.kernel, ref.constexprs) != (big.kernel, big.constexprs) or \
                set(ref.args) != set(big.args):
            raise DerivationError(f"launch {i} ({big.kernel}) does not match launch {i % n} "
                                  f"of the small shape ({ref.kernel}): other constexprs or "
                                  "arguments")
        args = {}
        for name, arg in big.args.items():
            r = ref.args[name]
            scale = Fraction(arg["numel"], r["numel"]) if r["numel"] else Fraction(0)
            args[name] = {**arg, "loaded": _exact(r["loaded"] * scale, name),
                          "stored": _exact(r["stored"] * scale, name)}
        out.launches.append(Launch(big.kernel, big.module, big.grid, big.num_warps,
                                   big.constexprs, big.signature, big.aligned, args,
                                   ref.block_elements))
    return out


def _exact(value: Fraction, name: str) -> int:
    if value.denominator != 1:
        raise DerivationError(f"argument {name}: {value} elements is not a whole number; "
                              "the small shape does not divide the large one")
    return int(value)
