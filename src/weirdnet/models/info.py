"""A readable summary of a model: structure, widths and a parameter count by part.

Used by ``weirdnet info TARGET`` (a preset name or a saved model directory, see
:func:`describe_target`).  The count is taken on the meta device, so even the
700M-parameter presets are described without allocating.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import torch.nn as nn

from .backbone import Backbone
from .base import CheckpointError, load
from .presets import PRESETS, Preset, build_preset, get_preset


class TargetError(ValueError):
    """``weirdnet info TARGET`` names nothing it can describe; the message is one line."""


def _looks_like_path(target: str) -> bool:
    """True for a TARGET written as a path (a separator, or a leading . or ~)."""
    separators = [s for s in (os.sep, os.altsep, "/") if s]
    return target.startswith((".", "~")) or any(s in target for s in separators)


def _load_directory(path: Path) -> nn.Module:
    """The model saved in ``path`` on the meta device; TargetError where it holds none."""
    try:
        return load(path, map_location="meta")
    except (CheckpointError, ValueError, KeyError, OSError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        if (path / "best").is_dir() and not (path / "config.json").exists():
            message += f"; a training run keeps its model in {path / 'best'}"
        raise TargetError(message) from None


def _not_found(target: str, path: Path) -> TargetError:
    """Why TARGET, neither a directory nor a preset name, names no model (one line)."""
    if path.exists():
        return TargetError(f"{target} is a file, not a saved model directory (written by "
                           f"model.save()) or a preset name")
    if _looks_like_path(target):
        return TargetError(f"{target} does not exist, so it holds no saved model; give a "
                           f"directory written by model.save() (a run's best/) or a preset "
                           f"name (`weirdnet info --list`)")
    try:
        get_preset(target)
    except KeyError as error:  # always: target is not in PRESETS
        return TargetError(f"{error.args[0]}; no directory {target} exists either")
    return TargetError(f"no model {target!r}")


def resolve_target(target: str) -> tuple[nn.Module, Preset | None]:
    """The model ``weirdnet info TARGET`` describes (on the meta device) and its preset
    (None for a saved model).  A directory is read as a saved model, any other TARGET as
    a preset name; TargetError (one line) where it names neither, saying whether the
    path is missing, a file, or holds no model."""
    path = Path(target).expanduser()
    if path.is_dir():
        return _load_directory(path), None
    if target not in PRESETS:
        raise _not_found(target, path)
    return build_preset(target, device="meta"), PRESETS[target]


def describe_target(target: str) -> str:
    """The text ``weirdnet info TARGET`` prints (see :func:`resolve_target`)."""
    model, preset = resolve_target(target)
    return describe(model, preset)


def _part(name: str, model: nn.Module) -> str:
    """The part of the model a parameter belongs to, for the breakdown."""
    pieces = name.split(".")
    if pieces[0] == "peer":  # a transformers model (PeerLM): its own module names
        if "lm_head" in pieces:
            return "output head"
        if any("embed" in piece or piece == "embeddings" for piece in pieces):
            return "token embedding / input"
        if "layers" in pieces or "blocks" in pieces:
            at = pieces.index("layers" if "layers" in pieces else "blocks") + 2
            return f"layers: {type(model.get_submodule('.'.join(pieces[:at]))).__name__}"
        return "norms"
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
    options = "".join(f", {key}={getattr(cfg, key)}" for key in
                      ("positions", "norm", "bias", "short_conv")
                      if getattr(cfg, key) != getattr(type(cfg), key))
    return (f"{cfg.depth} layers, {label} ({form}): {shown}\n"
            f"    {widths}, max_len={cfg.max_len}, {source}, activation={cfg.activation}"
            f"{options}")


def describe(model: nn.Module, preset: Preset | None = None) -> str:
    """The text printed by ``weirdnet info``."""
    lines = []
    if preset is not None:
        lines += [f"preset   {preset.name}  ({preset.source})"]
    lines.append(f"model    {type(model).__name__}")
    for name, module in model.named_children():
        if isinstance(module, Backbone):
            lines.append(f"{name:<8} {_structure(module)}")
    if type(model).__name__ == "PeerLM":
        b = model.config.backbone
        lines.append(f"peer     {type(model.peer).__name__} from transformers: D={b.dim}, "
                     f"{b.depth} layers, vocab={b.vocab_size}, max_len={b.max_len}")
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
