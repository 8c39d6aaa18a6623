"""A readable summary of a model: structure, widths and a parameter count by part.

Used by ``weirdnet info PRESET`` (and on a saved model directory).  The count is taken on
the meta device, so even the 700M-parameter presets are described without allocating.
"""

from __future__ import annotations

from collections import Counter

import torch.nn as nn

from .backbone import Backbone
from .presets import Preset


def _part(name: str, model: nn.Module) -> str:
    """The part of the model a parameter belongs to, for the breakdown."""
    pieces = name.split(".")
    if "blocks" in pieces:
        block = model.get_submodule(".".join(pieces[:pieces.index("blocks") + 2]))
        kind = pieces[pieces.index("blocks") + 2]
        if kind == "mixer":
            return f"mixers: {type(block.mixer).__name__}"
        if kind == "cross":
            return f"cross-attention: {type(block.cross).__name__}"
        return "feed-forward" if kind == "ffn" else "layer norms"
    if pieces[-2:-1] in (["embed"], ["pos"]):
        return "position embedding" if pieces[-2] == "pos" else "token embedding / input"
    if pieces[-2:-1] == ["norm"]:
        return "layer norms"
    return "output head"


def parameter_breakdown(model: nn.Module) -> Counter:
    """Parameter count per part (tied tensors counted once)."""
    counts: Counter = Counter()
    for name, param in model.named_parameters():
        counts[_part(name, model)] += param.numel()
    return counts


def _structure(backbone: Backbone) -> str:
    cfg = backbone.config
    names = cfg.mixers
    form = "causal" if cfg.causal else "bidirectional"
    label = {"A": "structure A", "B": "structure B"}.get(cfg.pattern, f"pattern {cfg.pattern}")
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    widths = f"D={cfg.dim}, d_ff={cfg.ffn_dim}"
    if cfg.heads:
        widths += f", heads={cfg.heads}"
    source = (f"vocab={cfg.vocab_size}" if cfg.vocab_size is not None
              else f"input_dim={cfg.input_dim}")
    return (f"{cfg.depth} layers, {label} ({form}): {shown}\n"
            f"    {widths}, max_len={cfg.max_len}, {source}, activation={cfg.activation}")


def describe(model: nn.Module, preset: Preset | None = None) -> str:
    """The text printed by ``weirdnet info``."""
    lines = []
    if preset is not None:
        lines += [f"preset   {preset.name}  ({preset.source})"]
    lines.append(f"model    {type(model).__name__}")
    for name, module in model.named_children():
        if isinstance(module, Backbone):
            lines.append(f"{name:<8} {_structure(module)}")
    total = model.num_parameters()
    lines.append(f"parameters  {total:,} ({total / 1e6:.1f}M)")
    for part, count in sorted(parameter_breakdown(model).items(), key=lambda kv: -kv[1]):
        lines.append(f"    {part:<40} {count:>14,}  {100 * count / total:5.1f}%")
    if preset is not None and preset.paper_parameters:
        stated = preset.paper_parameters
        lines.append(f"paper states {stated / 1e6:.0f}M; this build has {total / 1e6:.1f}M "
                     f"({100 * (total - stated) / stated:+.1f}%)")
        lines += list(preset.notes)
    return "\n".join(lines)
