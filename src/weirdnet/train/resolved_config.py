"""What a training config resolves to, as one TOML file (``weirdnet configs show``).

A shipped config is a trail: a name, a file, its ``extends``, an ``[overlay.NAME]`` table,
a model preset.  :func:`resolved_toml` follows it and writes every key out: each section
with all its defaults, and the ``[model]`` table as the preset's config merged with the
file's keys and the task's defaults (``class`` instead of ``preset``).  ``weirdnet train``
on that text trains the same run with the same model.

The keys the dataset decides when a run starts (the vocabulary or input channels, the
classes, and ``max_len`` where the config leaves it to the data) stay out of the file, as
they are out of the config: the header names them and the values the preset sized.
"""

from __future__ import annotations

import os
from typing import Any

from weirdnet.config.toml_write import dumps
from weirdnet.config.typed import from_dict, to_dict
from weirdnet.data.registry import DatasetInfo, entry
from weirdnet.models.base import model_class
from weirdnet.models.presets import get_preset
from weirdnet.train import tasks
from weirdnet.train.config import TrainConfig, load_config

FROM_DATA = ("vocab_size", "input_dim", "max_len")
"""A backbone's keys that the dataset sets unless the config's ``[model]`` table does."""


def resolved_model(model: dict[str, Any], task: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ``[model]`` table with every key of the model's config written out: its
    preset's, its own, the task's defaults and the config class's, the values left to the
    dataset, by dotted key, as the preset had them).

    ``model`` is a config's ``[model]`` table, ``task`` its dataset's task.  A
    ``transformers`` peer's table is returned as it is (it names no preset)."""
    if "peer" in model:
        return dict(model), {}
    class_name, merged = tasks.build_model_config(
        model, DatasetInfo(task, num_classes=model.get("num_classes")))
    if merged.get("num_classes", 0) is None:
        del merged["num_classes"]  # the dataset's, when the run starts
    full = to_dict(from_dict(model_class(class_name).config_class, merged, where="model"))
    left: dict[str, Any] = {}
    for key, backbone in full.items():
        if isinstance(backbone, dict) and "vocab_size" in backbone:
            given = model.get(key, {})
            for name in (n for n in FROM_DATA if n not in given):
                backbone.pop(name)
                if merged.get(key, {}).get(name) is not None:
                    left[f"{key}.{name}"] = merged[key][name]
    if "num_classes" in full and "num_classes" not in model:
        del full["num_classes"]
        preset = get_preset(model["preset"]).config if "preset" in model else {}
        if "num_classes" in preset:
            left["num_classes"] = preset["num_classes"]
    return {"class": class_name, **full}, left


def resolved(path: str | os.PathLike, overrides: list[str] = ()) -> tuple[dict, dict]:
    """(config ``path`` with ``overrides`` as one dict of every key, the model's values
    left to the dataset): see :func:`resolved_model`."""
    config = load_config(path, overrides)
    table = config.to_dict()
    task = entry(config.data.dataset).task
    table["model"], left = resolved_model(config.model, task)
    TrainConfig.from_dict(table)  # what is shown must load
    return table, left


def resolved_toml(path: str | os.PathLike, overrides: list[str] = (),
                  name: str = "") -> str:
    """The TOML text of :func:`resolved`, with a header saying what it is; ``name`` is how
    the config was named (default: ``path``)."""
    table, left = resolved(path, overrides)
    given = name or str(path)
    lines = [f"weirdnet configs show {given}:",
             "the config resolved (extends, overlay and preset), every key written out.",
             f"`weirdnet train FILE` on this text trains what `weirdnet train {given}` does."]
    if left:
        values = ", ".join(f"{key} = {value}" for key, value in left.items())
        lines += ["Set from the dataset when the run starts, so not written below (the "
                  "model table", f"  had {values})."]
    return dumps(table, "\n".join(lines))

