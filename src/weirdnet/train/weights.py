"""A trained model's weights copied into a new model (``train.init_from``), and the check
that a saved state fits a model tensor by tensor."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from weirdnet.config.typed import ConfigError
from weirdnet.models.base import WEIGHTS_FILE
from weirdnet.run import checkpoint as ckpt
from weirdnet.run.safetensors_io import load_file


def load_initial_weights(model: nn.Module, source: Path) -> Path:
    """Copy into ``model`` the weights of the trained model at ``source`` (a run directory,
    its best/, a checkpoint or a saved model folder: ``train.init_from``), after checking
    the files against their manifest and every tensor's name and shape; return the model
    directory read.  Errors: :class:`ConfigError` naming the key."""
    from weirdnet.train.trained import find_model_dir

    try:
        model_dir, _ = find_model_dir(source)
        if (model_dir / ckpt.MANIFEST).is_file():
            ckpt.verify_directory(model_dir)
        tensors, _ = load_file(model_dir / WEIGHTS_FILE, "cpu")
        check_state_fits(model, tensors, model_dir, changed="the two models differ")
    except (OSError, ValueError) as error:  # missing, damaged or not this model
        raise ConfigError(f"train.init_from: {error}") from None
    model.load_state_dict(tensors)
    return model_dir


def check_state_fits(model: nn.Module, state: dict[str, torch.Tensor], directory: Path,
                      changed: str = "was model.* changed since?") -> None:
    """Raise :class:`CheckpointError` naming the tensors that differ in name or shape
    between ``model`` and a checkpoint's ``state``."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    problems = [f"{k}: checkpoint {found[k]}, model {expected[k]}"
                for k in sorted(expected.keys() & found.keys()) if expected[k] != found[k]]
    problems += [f"{k} missing from the checkpoint" for k in sorted(expected.keys() - found.keys())]
    problems += [f"{k} not in the model" for k in sorted(found.keys() - expected.keys())]
    if problems:
        more = f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""
        raise ckpt.CheckpointError(
            f"{directory} does not fit the model of this config ({changed}): "
            f"{'; '.join(problems[:4])}{more}")
