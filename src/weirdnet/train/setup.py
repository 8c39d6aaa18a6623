"""What a training run is built from: seeds, datasets, the model, the optimizer, autocast
and activation checkpointing, each from a :class:`~weirdnet.train.config.TrainConfig`."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn as nn

from weirdnet.config.typed import ConfigError, from_dict
from weirdnet.data.registry import get
from weirdnet.models.base import model_class
from weirdnet.models.size import check_fits_in_memory, does_not_fit, parameter_count
from weirdnet.train import tasks
from weirdnet.train.config import TrainConfig


class RunError(RuntimeError):
    """A run that cannot start or continue (existing run directory, empty dataset, NaN)."""


def make_deterministic() -> None:
    """Deterministic kernels only (an error names any op that has none)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def eval_dataset(data, split: str, **overrides):
    """Split ``split`` of a config's data (``config.data``) as evaluation reads it: its
    ``options``, then its ``eval_options``, then ``overrides`` (e.g. another
    ``seq_len``)."""
    return get(data.dataset, split, root=data.root or None,
               **{**data.options, **data.eval_options, **overrides})


def load_datasets(config: TrainConfig) -> dict[str, Any]:
    """The train, eval and (if named) test splits."""
    data = config.data
    splits = {"train": get(data.dataset, data.train_split, root=data.root or None,
                           **data.options)}
    splits["eval"] = eval_dataset(data, data.eval_split)
    if data.test_split:
        splits["test"] = eval_dataset(data, data.test_split)
    for name, dataset in splits.items():
        if len(dataset) == 0:
            split = {"train": data.train_split, "eval": data.eval_split,
                     "test": data.test_split}[name]
            raise RunError(f"dataset {data.dataset!r} split {split!r} is empty; check "
                           "data.root and data.options")
    return splits


def build_model(config: TrainConfig, info) -> nn.Module:
    """The model for the dataset ``info`` (errors name the ``model.`` key); a model whose
    parameters cannot fit in memory is refused before anything is allocated."""
    class_name, model_config = tasks.build_model_config(config.model, info)
    cls = model_class(class_name)
    typed = from_dict(cls.config_class, model_config, where="model")
    try:
        check_fits_in_memory(cls, typed)
    except ConfigError as error:
        raise ConfigError(f"model: {error}") from None
    try:
        return cls(typed)
    except (torch.OutOfMemoryError, RuntimeError) as error:
        text = str(error)
        if not isinstance(error, torch.OutOfMemoryError) and not (
                "allocate" in text or "overflow" in text):
            raise
        raise ConfigError(f"model: {does_not_fit(parameter_count(cls, typed))}") from None


def enable_activation_checkpointing(model: nn.Module, mode: str, every: int,
                                    ffn_chunk: int = 0) -> None:
    """``train.activation_checkpointing`` (and ``train.ffn_chunk``) through the model's
    own :meth:`~weirdnet.models.WeirdNetModel.set_activation_checkpointing` (nothing to do
    when both are off)."""
    if mode == "none" and not ffn_chunk:
        return
    model.set_activation_checkpointing(mode, every, ffn_chunk)


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or Adam; weight decay only on matrices (not on biases, norms, w levels, nor
    on a tensor marked ``_no_weight_decay``, mamba_ssm's convention for its A_log and
    D)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2 and not getattr(p, "_no_weight_decay", False)]
    decayed = {id(p) for p in decay}
    rest = [p for p in params if id(p) not in decayed]
    opt = config.optim
    groups = [{"params": decay, "weight_decay": opt.weight_decay},
              {"params": rest, "weight_decay": 0.0}]
    cls = torch.optim.AdamW if opt.name == "adamw" else torch.optim.Adam
    return cls(groups, lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``train.precision`` on ``device`` (None: full fp32)."""
    if precision == "auto":
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else None
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("train.precision=\"fp16\" needs a CUDA device (use bf16 or fp32)")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def check_fits_data(config: TrainConfig, model: nn.Module, splits: dict[str, Any],
                    info) -> None:
    """The config's values that only the data and the model can check: the best metric
    is one the task reports, every split's items fit the model's max_len, TensorBoard
    can be written."""
    tasks.check_best_metric(config.train.best_metric, info)
    for split, dataset in splits.items():
        name = getattr(config.data, f"{split}_split", split)
        tasks.check_lengths(model.config, dataset.info, repr(name))
    if config.run.tensorboard:
        try:  # tensorboard is optional: checked only when the config asks for it
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            raise ConfigError("run.tensorboard = true needs the tensorboard package: pip "
                              "install tensorboard (or --set run.tensorboard=false)"
                              ) from None


def micro_batch_size(train, readers: int) -> int:
    """The items of one micro-batch: ``train.batch_size`` over the ``readers`` (the
    data-parallel processes) and ``train.grad_accum`` (ConfigError unless it divides)."""
    parts = readers * train.grad_accum
    if train.batch_size % parts:
        raise ConfigError(f"train.batch_size={train.batch_size} must be a multiple of "
                          f"data-parallel processes x grad_accum = {readers} x "
                          f"{train.grad_accum}")
    return train.batch_size // parts
