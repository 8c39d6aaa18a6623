"""What differs between tasks: the model class, how a batch is fed to it, the metrics.

==============  ====================  =======================  ===========================
task            model                 batch keys               metrics
==============  ====================  =======================  ===========================
lm              WeirdNetLM            tokens (B, L+1)          loss (nats/token), bpc,
                                                               perplexity
classification  WeirdNetClassifier    tokens (B, L) or values  loss, accuracy
                                      (B, L, C); label (B,)
retrieval       WeirdNetDualEncoder   tokens, tokens2; label   loss, accuracy
recall          WeirdNetLM            tokens (B, L); targets   loss, accuracy (over the
                                      (B, L), -100 = not asked asked positions)
seq2seq         WeirdNetSeq2Seq       src (B, Ls); tgt (B, Lt) loss, token_accuracy,
                                      = [bos] y [eos]          exact_match
==============  ====================  =======================  ===========================

Each kind is one :class:`Task` object (:data:`TASKS`, :func:`get`): it feeds a batch to
its model, takes the model's own loss for training, and turns evaluation batches into
additive statistics and those into metrics.  Every metric is a ratio of sums
(:class:`Sums`), so shards of an evaluation computed on several processes add up exactly.
``exact_match`` is the fraction of sequences whose every target token is the argmax under
teacher forcing, which is exactly the fraction greedy decoding gets right.

A task's **input tokens** (:meth:`Task.input_tokens`, the trainer's
``input_tokens_per_s``) are the positions its model reads that are not padding: lm
``tokens[:, :-1]`` (the last token is only a target); classification ``tokens``, or the
time steps of ``values`` (B, L, C); retrieval both documents; recall ``tokens``; seq2seq
``src`` and the decoder's inputs ``tgt[:, :-1]``.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import torch

from weirdnet.config.tables import merge
from weirdnet.config.typed import ConfigError
from weirdnet.data.registry import DatasetInfo
from weirdnet.models.lm import token_nll
from weirdnet.models.presets import get_preset
from weirdnet.ops.packing import within_documents

__all__ = ["MODEL_CLASSES", "PEER_TASKS", "TASKS", "Sums", "Task", "add_sums", "best_metric",
           "build_model_config", "check_best_metric", "check_lengths", "get", "model_fits",
           "to_device"]

_LOWER_IS_BETTER = {"loss", "bpc", "perplexity"}
IGNORE_TARGET = -100
"""A target that is not asked (``cross_entropy``'s ignore_index)."""

Sums = dict[str, float]
"""Additive statistics of a set of batches, e.g. {"nll": ..., "targets": ...}."""


class Task:
    """One kind of task: its model class, default model, best metric, and how a batch
    becomes a loss (the model's own) and metrics.  Subclasses set the class attributes
    and :meth:`forward`; the token tasks and the per-item tasks share their sums."""

    name: str = ""
    model_class: str = ""
    best: str = "-loss"  # the default train.best_metric ("-": lower is better)
    default_model: dict[str, Any] = {}
    inputs: tuple[tuple[str, int], ...] = ()
    """(batch key, positions dropped at its end) of each input the model reads."""

    def input_tokens(self, batch: dict[str, Any]) -> int:
        """The non-padding input positions of ``batch`` (a host batch, before
        :func:`to_device`): for each of :attr:`inputs` (B, L, ...) present, the True
        entries of its ``<key>_mask`` (B, L) in the positions read, else B x those."""
        total = 0
        for key, dropped in self.inputs:
            value = batch.get(key)
            if value is None:
                continue
            length = value.shape[1] - dropped
            mask = batch.get(f"{key}_mask")
            total += value.shape[0] * length if mask is None else int(mask[:, :length].sum())
        return total

    def forward(self, model: torch.nn.Module, batch: dict[str, Any], with_loss: bool
                ) -> tuple[Any, torch.Tensor, torch.Tensor | None]:
        """(model output, targets, counted-target mask or None); the output carries the
        loss when ``with_loss``."""
        raise NotImplementedError

    def loss(self, model: torch.nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
        """(the model's mean loss on the batch, number of counted targets)."""
        out, targets, mask = self.forward(model, batch, with_loss=True)
        return out.loss, targets.numel() if mask is None else int(mask.sum())

    @torch.no_grad()
    def batch_sums(self, model: torch.nn.Module, batch: dict[str, Any]) -> Sums:
        """The additive statistics of one evaluation batch (see :meth:`metrics`)."""
        out, targets, mask = self.forward(model, batch, with_loss=False)
        counted = torch.ones_like(targets, dtype=torch.bool) if mask is None else mask
        nll = token_nll(out.logits, targets)
        return {"nll": float((nll * counted).sum()), "targets": float(counted.sum())}

    def metric_names(self, info: DatasetInfo) -> tuple[str, ...]:
        """The names of the metrics :meth:`metrics` returns for a dataset ``info``."""
        return ("loss",)

    def metrics(self, sums: Sums, info: DatasetInfo) -> dict[str, float]:
        """Metrics of a whole evaluation from its summed statistics."""
        if not sums.get("targets"):
            raise ValueError("the evaluation saw no targets (empty split?)")
        return {"loss": sums["nll"] / sums["targets"]}


class LMTask(Task):
    """Next-token prediction on ``tokens`` (B, L+1): loss, bits per character, perplexity."""

    name, model_class = "lm", "WeirdNetLM"
    default_model = {"backbone": {"pattern": "B", "causal": True}}
    inputs = (("tokens", 1),)

    def forward(self, model, batch, with_loss):
        tokens, mask = batch["tokens"], batch.get("tokens_mask")
        mask = None if mask is None else mask[:, 1:]
        targets = tokens[:, 1:]
        doc_ids = batch.get("doc_ids")  # packed documents (data option pack)
        if doc_ids is None:
            return model(tokens[:, :-1], targets if with_loss else None, mask), targets, mask
        targets = within_documents(targets, doc_ids)  # a document's first token: no target
        counted = targets != -100 if mask is None else mask & (targets != -100)
        out = model(tokens[:, :-1], targets if with_loss else None, mask,
                    doc_ids=doc_ids[:, :-1])
        return out, targets, counted

    def metric_names(self, info):
        bpc = ("bpc",) if _has_bpc(info) else ()
        return ("loss", *bpc, "perplexity")

    def metrics(self, sums, info):
        metrics = super().metrics(sums, info)
        if _has_bpc(info):
            metrics["bpc"] = metrics["loss"] / math.log(2)
        metrics["perplexity"] = math.exp(min(metrics["loss"], 700.0))
        return metrics


def _has_bpc(info: DatasetInfo) -> bool:
    """Whether the tokens are bytes, so the loss converts to bits per character."""
    return info.encoding is not None or info.vocab_size == 256


class Seq2SeqTask(Task):
    """Teacher-forced decoding of ``tgt`` = [bos] y [eos] from ``src``: loss, token
    accuracy, exact match (the fraction greedy decoding gets entirely right)."""

    name, model_class, best = "seq2seq", "WeirdNetSeq2Seq", "exact_match"
    default_model = {"encoder": {"pattern": "A", "causal": False},
                     "decoder": {"pattern": "B", "causal": True}}
    inputs = (("src", 0), ("tgt", 1))

    def forward(self, model, batch, with_loss):
        tgt, tgt_mask = batch["tgt"], batch.get("tgt_mask")
        tgt_mask = None if tgt_mask is None else tgt_mask[:, 1:]
        targets = tgt[:, 1:]
        out = model(batch["src"], tgt[:, :-1], batch.get("src_mask"), tgt_mask,
                    targets if with_loss else None)
        return out, targets, tgt_mask

    @torch.no_grad()
    def batch_sums(self, model, batch):
        out, targets, mask = self.forward(model, batch, with_loss=False)
        counted = torch.ones_like(targets, dtype=torch.bool) if mask is None else mask
        nll, correct = token_nll(out.logits, targets), out.logits.argmax(-1) == targets
        return {"nll": float((nll * counted).sum()), "targets": float(counted.sum()),
                "correct": float((correct & counted).sum()), "sequences": targets.shape[0],
                "exact": float((correct | ~counted).all(dim=1).sum())}

    def metric_names(self, info):
        return ("loss", "token_accuracy", "exact_match")

    def metrics(self, sums, info):
        metrics = super().metrics(sums, info)
        metrics["token_accuracy"] = sums["correct"] / sums["targets"]
        metrics["exact_match"] = sums["exact"] / sums["sequences"]
        return metrics


class _AccuracyTask(Task):
    """Every target :meth:`forward` returns counts once (an item's label, a recall
    position that is asked): loss and accuracy."""

    best = "accuracy"

    @torch.no_grad()
    def batch_sums(self, model, batch):
        out, targets, _ = self.forward(model, batch, with_loss=False)
        nll = token_nll(out.logits, targets)
        return {"nll": float(nll.sum()), "targets": float(targets.numel()),
                "correct": float((out.logits.argmax(-1) == targets).sum())}

    def metric_names(self, info):
        return ("loss", "accuracy")

    def metrics(self, sums, info):
        metrics = super().metrics(sums, info)
        metrics["accuracy"] = sums["correct"] / sums["targets"]
        return metrics


class RecallTask(_AccuracyTask):
    """A causal model predicts ``targets[t]`` at position ``t`` of ``tokens`` where a
    target is asked (not -100): the recall diagnostics (:mod:`weirdnet.data.recall`).
    The output head runs only at the asked positions (``logits_at``): the loss and the
    metrics are those of the full head, without its cost at the positions not asked."""

    name, model_class = "recall", "WeirdNetLM"
    default_model = {"backbone": {"pattern": "B", "causal": True}}
    inputs = (("tokens", 0),)

    def forward(self, model, batch, with_loss):
        tokens, targets, mask = batch["tokens"], batch["targets"], batch.get("tokens_mask")
        asked = targets != IGNORE_TARGET
        if mask is not None:
            asked = asked & mask
        out = model(tokens, targets if with_loss else None, mask, logits_at=asked)
        return out, targets[asked], None


class ClassificationTask(_AccuracyTask):
    """``tokens`` (B, L) or ``values`` (B, L, C) with their mask; ``label`` (B,)."""

    name, model_class = "classification", "WeirdNetClassifier"
    inputs = (("tokens", 0), ("values", 0))

    def forward(self, model, batch, with_loss):
        key = "tokens" if "tokens" in batch else "values"
        labels = batch["label"]
        return (model(batch[key], batch.get(f"{key}_mask"),
                      labels=labels if with_loss else None), labels, None)


class RetrievalTask(_AccuracyTask):
    """Two documents ``tokens``, ``tokens2`` with their masks; ``label`` (B,)."""

    name, model_class = "retrieval", "WeirdNetDualEncoder"
    inputs = (("tokens", 0), ("tokens2", 0))

    def forward(self, model, batch, with_loss):
        labels = batch["label"]
        out = model(batch["tokens"], batch["tokens2"], batch.get("tokens_mask"),
                    batch.get("tokens2_mask"), labels=labels if with_loss else None)
        return out, labels, None


TASKS: dict[str, Task] = {t.name: t for t in (LMTask(), ClassificationTask(),
                                              RetrievalTask(), Seq2SeqTask(),
                                              RecallTask())}
MODEL_CLASSES = {name: task.model_class for name, task in TASKS.items()}
PEER_TASKS = ("lm", "recall")
"""The tasks a ``transformers`` peer (``model.peer``, :class:`~weirdnet.models.PeerLM`)
can train: those of a causal LM."""


def model_fits(class_name: str, task: str) -> bool:
    """Whether a model of class ``class_name`` can run ``task``: the task's own class, or a
    ``transformers`` peer on a causal-LM task."""
    return class_name == MODEL_CLASSES.get(task) or (class_name == "PeerLM"
                                                     and task in PEER_TASKS)


def get(name: str) -> Task:
    """The task called ``name`` (a dataset's ``info.task``)."""
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; the trainer knows {', '.join(TASKS)}")
    return TASKS[name]


def best_metric(task: str, configured: str) -> tuple[str, bool]:
    """(metric name, lower is better) of ``train.best_metric`` ("auto" picks per task)."""
    name = get(task).best if configured == "auto" else configured
    lower = name.startswith("-") or name.lstrip("-") in _LOWER_IS_BETTER
    return name.lstrip("-"), lower


def check_best_metric(configured: str, info: DatasetInfo) -> None:
    """ConfigError unless ``train.best_metric`` names a metric that the dataset's task
    reports (checked before a run starts, not at its first evaluation)."""
    name, _ = best_metric(info.task, configured)
    known = get(info.task).metric_names(info)
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"train.best_metric={configured!r} is not a metric of the "
                          f"{info.task} task{hint}; use auto or one of {', '.join(known)} "
                          "(prefix '-' if lower is better)")


def check_lengths(model_config: Any, info: DatasetInfo, split: str) -> None:
    """ConfigError when the items of ``split`` (``info.max_len`` tokens, if fixed) are
    longer than the model built from ``model_config`` (its config object) can take."""
    if info.max_len is None:
        return
    if info.task == "seq2seq":  # src <= encoder.max_len, tgt - 1 <= decoder.max_len
        room = max(model_config.encoder.max_len, model_config.decoder.max_len + 1)
        key = (f"model.encoder.max_len={model_config.encoder.max_len} / "
               f"model.decoder.max_len={model_config.decoder.max_len}")
    else:  # an LM reads all but the last token of an item
        shift = 1 if info.task == "lm" else 0
        room = model_config.backbone.max_len + shift
        key = f"model.backbone.max_len={model_config.backbone.max_len}"
    if info.max_len > room:
        raise ConfigError(f"{key} is too short for the {split} split, whose items have "
                          f"{info.max_len} tokens; raise it or leave it unset (it then "
                          "follows the data)")


def build_model_config(model: dict[str, Any], info: DatasetInfo) -> tuple[str, dict[str, Any]]:
    """(model class name, config dict) from the ``[model]`` table and the dataset.

    The table may name a ``preset`` (its config is the base) and a ``class``; the rest is
    merged over the base.  A table with ``peer`` (and no class or preset) is a
    ``transformers`` peer model (:class:`~weirdnet.models.PeerLM`).  The dataset decides
    the vocabulary (or input channels), the number of classes and, unless the table sets
    it, ``max_len``; a table value that contradicts the dataset is an error.
    """
    table = dict(model)
    preset_name = table.pop("preset", None)
    class_name = table.pop("class", None)
    task_class = MODEL_CLASSES[info.task]
    if "peer" in table:
        _check_peer_alone(preset_name, class_name)
        class_name = "PeerLM"  # a transformers model (weirdnet.models.peers)
    if class_name == "PeerLM":
        if info.task not in PEER_TASKS:
            raise ConfigError(f"model.peer: peer models are causal LMs, for the "
                              f"{'/'.join(PEER_TASKS)} tasks, not {info.task}")
        config = merge({"backbone": {"causal": True}}, table)
        _fill_backbone(config.setdefault("backbone", {}), table.get("backbone", {}), info,
                       "backbone")
        return class_name, config
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
    config = merge(merge(get(info.task).default_model, base), table)
    for key, backbone in _backbones(config, info.task).items():
        _fill_backbone(backbone, table.get(key, {}), info, key)
    if info.task in ("classification", "retrieval"):
        _set_from_data(config, table, "num_classes", info.num_classes, "model")
    return class_name, config


def _check_peer_alone(preset_name: str | None, class_name: str | None) -> None:
    """``model.peer`` (a ``transformers`` model) excludes a weirdnet preset or class."""
    if preset_name:
        raise ConfigError(f"model.peer and model.preset exclude each other: peer names a "
                          f"transformers model, preset {preset_name!r} a weirdnet one; use a "
                          "config without model.preset for a peer")
    if class_name not in (None, "PeerLM"):
        raise ConfigError(f"model.peer and model.class exclude each other: peer names a "
                          f"transformers model, class {class_name!r} a weirdnet one")


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


def add_sums(total: Sums, sums: Sums) -> Sums:
    """``total`` + ``sums``, key by key (in place; returns ``total``)."""
    for key, value in sums.items():
        total[key] = total.get(key, 0.0) + value
    return total
