"""Finding and loading a trained model: a run directory, its best/ or a checkpoint.

Used by ``weirdnet eval``/``generate`` and by the Hugging Face export.
"""

from __future__ import annotations

import json
from pathlib import Path

from weirdnet.models.base import load
from weirdnet.run.checkpoint import (
    DATA_INFO,
    MANIFEST,
    TRAIN_CONFIG,
    list_checkpoints,
    verify_directory,
)


def find_model_dir(path: Path) -> tuple[Path, Path | None]:
    """(directory of the saved model, directory holding its run files or None) for a run
    directory, its best/ or a checkpoint directory."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if not path.is_dir():
        model_near = any((path.parent / name).is_file() for name in ("config.json", TRAIN_CONFIG))
        hint = f" (such as {path.parent})" if model_near else ""
        raise FileNotFoundError(f"{path} is a file; give a run directory, its best/ or a "
                                f"checkpoints/step-* directory{hint}")
    model_dir = path / "best" if (path / "best" / "config.json").is_file() else path
    if not (model_dir / "config.json").is_file():
        found = list_checkpoints(path)
        if not found:
            raise FileNotFoundError(f"{path} holds no model: expected a run directory (with "
                                    "best/ or checkpoints/), or a directory with config.json "
                                    "and model.safetensors")
        model_dir = found[-1]
    for candidate in (model_dir, path, model_dir.parent.parent):
        if (candidate / TRAIN_CONFIG).is_file():
            return model_dir, candidate
    return model_dir, None


def load_trained(path: Path, device: str = "cpu"):
    """(model, train config dict or None, data info dict or None, model directory) of a
    run or checkpoint; the checkpoint's manifest is verified when it has one."""
    model_dir, run_files = find_model_dir(path)
    if (model_dir / MANIFEST).is_file():
        verify_directory(model_dir)
    model = load(model_dir, map_location=device)
    config = info = None
    if run_files is not None:
        config = json.loads((run_files / TRAIN_CONFIG).read_text())
        if (run_files / DATA_INFO).is_file():
            info = json.loads((run_files / DATA_INFO).read_text())
    return model, config, info, model_dir
