"""Language models matched by parameter count, the way the Mamba and GLA papers match
their baselines: every model of a comparison gets the non-embedding parameters of one
reference, within :data:`TOLERANCE`, by turning one width knob.

Parameters are counted without the embedding tables (token and learned-position tables,
and an output head tied to them; Kaplan et al. 2020), so that a model with a learned
position table is not counted larger at a longer context.  The knob is the feed-forward
width ``d_ff`` (rounded to a multiple of 8), or, for a model without a feed-forward
(Mamba, Mamba-2), the number of layers.  The count is affine in either knob, so two
builds give the slope; a third checks the result.  Where that knob cannot come within
the tolerance (a peer at a tiny width, whose one layer outweighs the reference), the
width ``dim`` is searched too (every width up to twice the width, with the number of
layers): the setting within the tolerance whose width is nearest the reference's.
Models are built on the meta device to be counted, so nothing is allocated.
"""

from __future__ import annotations

import functools
from typing import Any

TOLERANCE = 0.05
"""The largest relative difference of a matched model's count from the reference's."""

D_FF_MULTIPLE = 8
WIDTH_STEP = 1

_NO_FEED_FORWARD = ("mamba", "mamba2", "fla-mamba2")


def knob(model: dict[str, Any]) -> str:
    """The backbone key turned to match ``model`` (a ``model`` table): "depth" for a
    peer without a feed-forward, else "d_ff"."""
    return "depth" if model.get("peer") in _NO_FEED_FORWARD else "d_ff"


def build(model: dict[str, Any], max_len: int = 64, vocab_size: int = 256):
    """The language model of a ``model`` table (a byte vocabulary by default; the
    embedding tables are not counted, so their sizes do not change a count)."""
    from weirdnet.models import WeirdNetLM
    from weirdnet_lab.peers import PeerLM

    backbone = {**model["backbone"], "vocab_size": vocab_size, "max_len": max_len,
                "causal": True}
    if model.get("peer"):
        return PeerLM({**model, "backbone": backbone})
    return WeirdNetLM({**model, "backbone": backbone})


def count(model: dict[str, Any]) -> int:
    """Non-embedding parameters of the language model of ``model`` (built on the meta
    device: nothing is allocated)."""
    import torch

    with torch.device("meta"):
        return build(model).num_parameters(embeddings=False)


def _with(model: dict[str, Any], key: str, value: int) -> dict[str, Any]:
    return {**model, "backbone": {**model["backbone"], key: value}}


def _near(got: int, target: int) -> bool:
    return abs(got - target) <= TOLERANCE * target


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
    if _near(got, target):
        return result, got
    if found := _width_search(result, target):
        return found
    raise ValueError(f"{model.get('peer') or model['backbone'].get('pattern')}: "
                     f"{key} = {value} gives {got:,} parameters, more than "
                     f"{TOLERANCE:.0%} from the reference's {target:,}, and no width "
                     "up to twice the reference's comes nearer")


def _width_search(model: dict[str, Any], target: int) -> tuple[dict[str, Any], int] | None:
    """The (model, count) within the tolerance whose ``dim`` is nearest the model's own,
    over widths up to twice it and up to twice its layers; None if none is."""
    dim, depth = model["backbone"]["dim"], model["backbone"]["depth"]
    widths = sorted(set(range(WIDTH_STEP, 2 * dim + 1, WIDTH_STEP)) | {dim},
                    key=lambda d: abs(d - dim))
    for width in widths:
        near = []
        for layers in range(1, 2 * depth + 1):
            candidate = _with(_with(model, "dim", width), "depth", layers)
            try:
                got = count(candidate)
            except Exception:  # noqa: BLE001 - a width the model's config refuses
                break
            if _near(got, target):
                near.append((abs(got - target), layers, candidate, got))
        if near:
            _, _, candidate, got = min(near, key=lambda n: n[:2])
            return candidate, got
    return None


def reference(widths: dict[str, Any]) -> dict[str, Any]:
    """The reference model at ``widths``: the GPT-2-style Transformer (softmax attention,
    learned positions, GELU, LayerNorm), whose count every model matches."""
    return {"backbone": {**widths, "pattern": "softmax", "causal": True}}


@functools.cache
def _matched_cached(name: str, widths: tuple) -> tuple[dict[str, Any], int, int]:
    from weirdnet_lab.variants import get_variant

    sizes = dict(widths)
    target = count(reference(sizes))
    table, got = matched(get_variant(name).lm_model(sizes), target)
    return table, got, target


def matched_variant(name: str, widths: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """(the ``model`` table of the suite variant ``name`` as a language model at
    ``widths``, matched to :func:`reference`; its non-embedding parameters; the
    reference's).  ValueError when it cannot be matched within :data:`TOLERANCE`."""
    return _matched_cached(name, tuple(sorted(widths.items())))
