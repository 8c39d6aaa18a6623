"""What differs between tasks: the model class, how a batch is fed to it, the metrics.

==============  ====================  =======================  ===========================
task            model                 batch keys               metrics
==============  ====================  =======================  ===========================
lm              WeirdNetLM            tokens (B, L+1)          loss (nats/token), bpc,
                                                               perplexity
classification  WeirdNetClassifier    tokens (B, L) or values  loss, accuracy
                                      (B, L, C); label (B,)
retrieval       WeirdNetDualEncoder   tokens, tokens2; label   loss, accuracy
seq2seq         WeirdNetSeq2Seq       src (B, Ls); tgt (B, Lt) loss, token_accuracy,
                                      = [bos] y [eos]          exact_match
==============  ====================  =======================  ===========================

Every metric is a ratio of sums (:class:`Sums`), so shards of an evaluation computed on
several processes add up exactly.  ``exact_match`` is the fraction of sequences whose
every target token is the argmax under teacher forcing, which is exactly the fraction
greedy decoding gets right.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from weirdnet.data.registry import DatasetInfo
from weirdnet.models.config import ConfigError
from weirdnet.train.config import merge

__all__ = ["MODEL_CLASSES", "Sums", "add_sums", "batch_metrics", "best_metric",
           "build_model_config", "forward", "metrics_from_sums", "to_device", "train_loss"]

MODEL_CLASSES = {"lm": "WeirdNetLM", "classification": "WeirdNetClassifier",
                 "retrieval": "WeirdNetDualEncoder", "seq2seq": "WeirdNetSeq2Seq"}
_DEFAULT_MODEL = {
    "lm": {"backbone": {"pattern": "B", "causal": True}},
    "seq2seq": {"encoder": {"pattern": "A", "causal": False},
                "decoder": {"pattern": "B", "causal": True}},
}
_BEST_METRIC = {"lm": "-loss", "classification": "accuracy", "retrieval": "accuracy",
                "seq2seq": "exact_match"}
_LOWER_IS_BETTER = {"loss", "bpc", "perplexity"}

Sums = dict[str, float]
"""Additive statistics of a set of batches, e.g. {"nll": ..., "targets": ...}."""


def best_metric(task: str, configured: str) -> tuple[str, bool]:
    """(metric name, lower is better) of ``train.best_metric`` ("auto" picks per task)."""
    name = _BEST_METRIC[task] if configured == "auto" else configured
    lower = name.startswith("-") or name.lstrip("-") in _LOWER_IS_BETTER
    return name.lstrip("-"), lower


def build_model_config(model: dict[str, Any], info: DatasetInfo) -> tuple[str, dict[str, Any]]:
    """(model class name, config dict) from the ``[model]`` table and the dataset.

    The table may name a ``preset`` (its config is the base) and a ``class``; the rest is
    merged over the base.  The dataset decides the vocabulary (or input channels), the
    number of classes and, unless the table sets it, ``max_len``; a table value that
    contradicts the dataset is an error.
    """
    from weirdnet.models.presets import get_preset

    table = dict(model)
    preset_name = table.pop("preset", None)
    class_name = table.pop("class", None)
    task_class = MODEL_CLASSES[info.task]
    base: dict[str, Any] = {}
    if preset_name:
        try:
            preset = get_preset(preset_name)
        except KeyError as error:
            raise ConfigError(f"model.preset: {error.args[0]}") from None
        base, class_name = preset.config, class_name or preset.model
    class_name = class_name or task_class
    if class_name != task_class:
        raise ConfigError(f"model class {class_name} does not fit the {info.task} task of the "
                          f"dataset (it needs {task_class})")
    config = merge(merge(_DEFAULT_MODEL.get(info.task, {}), base), table)
    for key, backbone in _backbones(config, info.task).items():
        _fill_backbone(backbone, table.get(key, {}), info, key)
    if info.task in ("classification", "retrieval"):
        _set_from_data(config, table, "num_classes", info.num_classes, "model")
    return class_name, config


def _backbones(config: dict[str, Any], task: str) -> dict[str, dict[str, Any]]:
    keys = ("encoder", "decoder") if task == "seq2seq" else ("backbone",)
    return {key: config.setdefault(key, {}) for key in keys}


def _fill_backbone(backbone: dict[str, Any], explicit: dict[str, Any], info: DatasetInfo,
                   where: str) -> None:
    if info.vocab_size is not None:
        _set_from_data(backbone, explicit, "vocab_size", info.vocab_size, f"model.{where}")
        backbone["input_dim"] = None
    elif info.input_dim is not None:
        _set_from_data(backbone, explicit, "input_dim", info.input_dim, f"model.{where}")
        backbone["vocab_size"] = None
    if info.max_len is not None and "max_len" not in explicit:
        # LM and decoder inputs drop the last token of the item.
        shift = 1 if info.task == "lm" or where == "decoder" else 0
        backbone["max_len"] = max(info.max_len - shift, 1)


def _set_from_data(config: dict[str, Any], explicit: dict[str, Any], key: str, value: Any,
                   where: str) -> None:
    if key in explicit and explicit[key] != value:
        raise ConfigError(f"{where}.{key}={explicit[key]!r} contradicts the dataset, which has "
                          f"{key}={value!r}; leave it unset")
    config[key] = value


# ---- feeding batches -------------------------------------------------------------------

def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The batch's tensors on ``device``.  A ``<key>_mask`` that is True everywhere becomes
    None, decided on the host before the copy: the mixers then take their unmasked paths,
    with no device sync and no mask transfer."""
    out = {}
    for key, value in batch.items():
        if key.endswith("_mask") and torch.is_tensor(value) and bool(value.all()):
            value = None
        out[key] = value.to(device, non_blocking=True) if torch.is_tensor(value) else value
    return out


def forward(model: torch.nn.Module, batch: dict[str, Any], task: str
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Run ``model`` on ``batch`` (as :func:`to_device` gives it): (logits, targets,
    counted-target mask or None).

    lm / seq2seq: logits (B, L, V), targets (B, L); classification / retrieval: logits
    (B, K), labels (B,).
    """
    if task == "lm":
        tokens, mask = batch["tokens"], batch.get("tokens_mask")
        mask = None if mask is None else mask[:, 1:]
        targets = tokens[:, 1:]
        return model(tokens[:, :-1], None, mask).logits, targets, mask
    if task == "seq2seq":
        tgt, tgt_mask = batch["tgt"], batch.get("tgt_mask")
        tgt_mask = None if tgt_mask is None else tgt_mask[:, 1:]
        logits = model(batch["src"], tgt[:, :-1], batch.get("src_mask"),
                       tgt_mask).logits
        return logits, tgt[:, 1:], tgt_mask
    if task == "retrieval":
        logits = model(batch["tokens"], batch["tokens2"],
                       batch.get("tokens_mask"), batch.get("tokens2_mask")).logits
        return logits, batch["label"], None
    key = "tokens" if "tokens" in batch else "values"
    logits = model(batch[key], batch.get(f"{key}_mask")).logits
    return logits, batch["label"], None


def train_loss(model: torch.nn.Module, batch: dict[str, Any], task: str
               ) -> tuple[torch.Tensor, int]:
    """(mean loss of the batch, number of counted targets) for the backward pass."""
    logits, targets, mask = forward(model, batch, task)
    nll = _token_nll(logits, targets)
    if mask is None:
        return nll.mean(), targets.numel()
    count = int(mask.sum())
    return (nll * mask).sum() / max(count, 1), count


def _token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy (nats) of every target: logits (..., V), targets (...) -> (...)."""
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                           targets.reshape(-1).long(), reduction="none")
    return flat.view(targets.shape)


@torch.no_grad()
def batch_metrics(model: torch.nn.Module, batch: dict[str, Any], task: str) -> Sums:
    """The additive statistics of one evaluation batch (see :func:`metrics_from_sums`)."""
    logits, targets, mask = forward(model, batch, task)
    nll = _token_nll(logits, targets)
    correct = logits.argmax(-1) == targets
    if task in ("classification", "retrieval"):
        return {"nll": float(nll.sum()), "targets": targets.numel(),
                "correct": float(correct.sum())}
    counted = torch.ones_like(targets, dtype=torch.bool) if mask is None else mask
    sums = {"nll": float((nll * counted).sum()), "targets": float(counted.sum())}
    if task == "seq2seq":
        sums["correct"] = float((correct & counted).sum())
        sums["sequences"] = targets.shape[0]
        sums["exact"] = float((correct | ~counted).all(dim=1).sum())
    return sums


def add_sums(total: Sums, sums: Sums) -> Sums:
    """``total`` + ``sums``, key by key (in place; returns ``total``)."""
    for key, value in sums.items():
        total[key] = total.get(key, 0.0) + value
    return total


def metrics_from_sums(sums: Sums, task: str, info: DatasetInfo) -> dict[str, float]:
    """Metrics of a whole evaluation from its summed statistics."""
    if not sums.get("targets"):
        raise ValueError("the evaluation saw no targets (empty split?)")
    loss = sums["nll"] / sums["targets"]
    metrics = {"loss": loss}
    if task in ("classification", "retrieval"):
        metrics["accuracy"] = sums["correct"] / sums["targets"]
    elif task == "seq2seq":
        metrics["token_accuracy"] = sums["correct"] / sums["targets"]
        metrics["exact_match"] = sums["exact"] / sums["sequences"]
    else:
        if info.encoding is not None or info.vocab_size == 256:
            metrics["bpc"] = loss / math.log(2)
        metrics["perplexity"] = math.exp(min(loss, 700.0))
    return metrics
