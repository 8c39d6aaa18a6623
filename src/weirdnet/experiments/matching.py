"""Language models matched by parameter count, the way the Mamba and GLA papers match
their baselines: every model of a comparison gets the non-embedding parameters of one
reference, within :data:`TOLERANCE`, by turning one width knob.

Parameters are counted without the embedding tables (token and learned-position tables,
and an output head tied to them; Kaplan et al. 2020), so that a model with a learned
position table is not counted larger at a longer context.  The knob is the feed-forward
width ``d_ff`` (rounded to a multiple of 8), or, for a model without a feed-forward
(Mamba, Mamba-2), the number of layers.  The count is affine in either knob, so two
builds give the slope; a third checks the result.
"""

from __future__ import annotations

from typing import Any

TOLERANCE = 0.05
"""The largest relative difference of a matched model's count from the reference's."""

D_FF_MULTIPLE = 8

_NO_FEED_FORWARD = ("mamba", "mamba2")


def knob(model: dict[str, Any]) -> str:
    """The backbone key turned to match ``model`` (a ``model`` table): "depth" for a
    peer without a feed-forward, else "d_ff"."""
    return "depth" if model.get("peer") in _NO_FEED_FORWARD else "d_ff"


def build(model: dict[str, Any]):
    """The language model of a ``model`` table, with a 256-byte vocabulary (its
    embedding tables are not counted, so their sizes do not matter)."""
    from weirdnet.models import PeerLM, WeirdNetLM

    backbone = {**model["backbone"], "vocab_size": 256, "max_len": 64, "causal": True}
    if model.get("peer"):
        return PeerLM({**model, "backbone": backbone})
    return WeirdNetLM({**model, "backbone": backbone})


def count(model: dict[str, Any]) -> int:
    """Non-embedding parameters of the language model of ``model``."""
    return build(model).num_parameters(embeddings=False)


def _with(model: dict[str, Any], key: str, value: int) -> dict[str, Any]:
    return {**model, "backbone": {**model["backbone"], key: value}}


def matched(model: dict[str, Any], target: int) -> tuple[dict[str, Any], int]:
    """(``model`` with its knob set so that its count is nearest ``target``, that
    count); ValueError when no setting comes within :data:`TOLERANCE`."""
    key = knob(model)
    step = 1 if key == "depth" else D_FF_MULTIPLE
    start = int(model["backbone"].get(key) or (4 * model["backbone"]["dim"]))
    here, there = count(_with(model, key, start)), count(_with(model, key, start + step))
    slope = (there - here) / step
    if slope <= 0:
        raise ValueError(f"{key} does not change the parameter count of {model}")
    value = max(step, round((start + (target - here) / slope) / step) * step)
    result = _with(model, key, value)
    got = count(result)
    if abs(got - target) > TOLERANCE * target:
        raise ValueError(f"{model.get('peer') or model['backbone'].get('pattern')}: "
                         f"{key} = {value} gives {got:,} parameters, more than "
                         f"{TOLERANCE:.0%} from the reference's {target:,}")
    return result, got
