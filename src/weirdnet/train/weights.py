"""A trained model's weights copied into a new model (``train.init_from``), checked tensor
by tensor (:func:`weirdnet.run.checkpoint.check_state_fits`)."""

from __future__ import annotations

from pathlib import Path

import torch.nn as nn

from weirdnet.config.typed import ConfigError
from weirdnet.run import checkpoint as ckpt
from weirdnet.run.checkpoint import WEIGHTS_FILE, check_state_fits
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
