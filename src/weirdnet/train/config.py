"""The run configuration of ``weirdnet train``: a TOML file, ``--set`` overrides, checks.

A config file has up to six tables; every key has a default except ``data.dataset``::

    extends = "base.toml"        # optional: start from another file (relative path)

    [run]       name, out_dir, seed, deterministic, device, tensorboard
    [data]      dataset, root, options, eval_options, train_split, eval_split, test_split,
                pad_multiple
    [model]     preset (the sizes: weirdnet.models.presets), then any key of the model's
                config, e.g. [model.backbone] pattern = "B", dropout = 0.1
    [optim]     name ("adamw" | "adam"), lr, betas, eps, weight_decay
    [schedule]  name ("cosine" | "rsqrt" | "constant"), warmup_steps, min_lr_ratio,
                extend ("keep" | "rewarm" | "stretch")
    [train]     steps, batch_size, grad_accum, clip, precision, eval_every, eval_spacing,
                eval_batches, final_eval_batches, checkpoint_every, keep_last,
                early_stop_patience, early_stop_at, best_metric, log_every, num_workers,
                distributed, compile, activation_checkpointing, activation_checkpointing_k,
                ffn_chunk, init_from

A file may end with named overlays: ``[overlay.cpu]`` (and its sub-tables
``[overlay.cpu.train]`` etc.) holds what the config ``<file>-cpu`` changes, e.g. the
CPU-sized run of a paper's experiment (:data:`weirdnet.config.toml.OVERLAYS`).

``--set section.key=value`` (dotted, any depth, e.g. ``model.backbone.dim=64``) overrides
a key; the value is read as a TOML value (``64``, ``1e-3``, ``true``, ``[0.9, 0.98]``,
``"text"``) and a bare word is a string.  Unknown keys and values of the wrong type are
errors that name the key (and suggest the closest known one).

``batch_size`` is the *global* batch of one optimizer step: each of the N processes of a
torchrun job gets ``batch_size / (N · grad_accum)`` items per micro-batch, so the same
config trains the same way on one process or several.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from weirdnet.config.toml import apply_assignments, read_toml
from weirdnet.config.typed import ConfigError, from_dict
from weirdnet.data.registry import check_options, check_root, entry
from weirdnet.run.rundir import RunDirError, check_run_name

__all__ = ["ConfigError", "DataConfig", "OptimConfig", "RunConfig", "ScheduleConfig",
           "TrainConfig", "TrainSection", "apply_overrides", "load_config"]

OPTIMIZERS = ("adamw", "adam")
SCHEDULES = ("cosine", "rsqrt", "constant")
EXTENSIONS = ("keep", "rewarm", "stretch")
MAX_WORKERS = 64
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DISTRIBUTED = ("auto", "ddp", "fsdp")
ACTIVATION_CHECKPOINTING = ("none", "blocks", "every_k")
EVAL_SPACINGS = ("even", "doubling")


@dataclass
class RunConfig:
    """Where the run goes and how it is seeded.

    name: run directory name under ``out_dir`` (default: the config file's stem).
    seed: seeds Python, NumPy and torch (each process adds its rank for dropout).
    deterministic: ``torch.use_deterministic_algorithms(True)`` (slower on GPU).
    device: "auto" (CUDA if available, else CPU), "cpu", "cuda" or "cuda:N".
    tensorboard: also write TensorBoard events to ``RUN/tensorboard`` (needs tensorboard).
    """

    name: str = ""
    out_dir: str = "runs"
    seed: int = 0
    deterministic: bool = False
    device: str = "auto"
    tensorboard: bool = False


@dataclass
class DataConfig:
    """The dataset (``weirdnet data list``) and its options.

    options: given to every split, e.g. ``{seq_len = 256}``; eval_options: extra options
    for the evaluation and test splits only.  test_split = "" skips the final test.
    pad_multiple: each batch of variable-length items is padded to its longest item
    rounded up to a multiple of this (1: to the longest item).  On a GPU a multiple such
    as 64 leaves few distinct batch shapes, for kernels that compile or plan per shape;
    padding is masked, so results change only by rounding.
    """

    dataset: str = ""
    root: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    eval_options: dict[str, Any] = field(default_factory=dict)
    train_split: str = "train"
    eval_split: str = "val"
    test_split: str = "test"
    pad_multiple: int = 1


@dataclass
class OptimConfig:
    """The optimizer: AdamW (decoupled weight decay) or Adam (L2 added to the gradient).

    lr in (0, 1]; eps in (0, 1]; weight_decay in [0, 10], and for AdamW lr x weight_decay
    < 1; betas in [0, 1) (checked when the config is read: :func:`check`)."""

    name: str = "adamw"
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.01


@dataclass
class ScheduleConfig:
    """Learning-rate schedule (see :mod:`weirdnet.train.schedule`): linear warmup over
    ``warmup_steps``, then "cosine" decay to ``min_lr_ratio``·lr at the last step, LRA's
    "rsqrt" decay ∝ 1/√step, or "constant".

    extend: what a resumed run does when ``train.steps`` differs from the steps its
    schedule was laid out for: "keep" (the schedule stays as it was: past its end the
    cosine rate stays at its final value; a warmup longer than those steps still runs to
    its end first), "rewarm" (from the resume step, warm up again
    from the current rate to lr over warmup_steps, then decay over the remaining steps),
    or "stretch" (lay the schedule out again over the new train.steps, as if they had
    been asked for from the start: the rate jumps at the resume step).
    """

    name: str = "cosine"
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    extend: str = "keep"


@dataclass
class TrainSection:
    """The loop.

    steps: optimizer steps; batch_size: global items per step (see the module doc);
    grad_accum: micro-batches per step; clip: max gradient norm (0 = off);
    precision: "auto" (bf16 autocast on a GPU that has it, else fp32), "fp32", "bf16",
    "fp16" (CUDA only, with loss scaling);
    eval_every: evaluate every N steps, and at the last step (0 = only at the end), on
    the first eval_batches x batch_size items of the split (0 = the whole split): the
    periodic validation of ``log.jsonl`` and the terminal, which picks ``best/``;
    eval_spacing: "even" (every eval_every steps) or "doubling" (every eval_every steps up
    to 8 x eval_every, then the gap doubles each time the step count does, 4 evaluations
    per doubling, and the last step too: a curve on a log-step axis at a cost that grows
    as log(steps); the steps are the same for every run of the same eval_every, so runs
    of different lengths are compared at equal steps; :func:`eval_due`);
    final_eval_batches: the same for the evaluation of the best model on the evaluation
    and test splits at the end (0 = whole splits);
    checkpoint_every: steps between checkpoints (0 = only
    at eval points and the end); keep_last: checkpoints kept;
    early_stop_patience: stop after this many evaluations without improvement (0 = off);
    early_stop_at: stop at the first evaluation whose best metric reaches this value
    (None = off; e.g. 0.99 accuracy, as Zoology's recall runs);
    best_metric: "auto" (accuracy for classification/retrieval, exact_match for seq2seq,
    loss for lm) or a metric name, "-" prefixed if lower is better, e.g. "-loss";
    log_every: steps between log lines; num_workers: DataLoader workers;
    distributed: "auto" (FSDP for models of more than 300M parameters, else DDP), "ddp",
    "fsdp" (only used under torchrun with more than one process);
    compile: run the training forward and backward through ``torch.compile`` (inductor;
    the first steps are slower while it compiles; evaluation stays eager);
    activation_checkpointing: "none", "blocks" (keep only each block's input and
    recompute the block in the backward pass: the memory of long contexts) or "every_k"
    (only blocks 0, k, 2k, ...; k = activation_checkpointing_k); gradients are the same.
    ffn_chunk: > 0 runs every FFN in checkpointed chunks of that many positions (the FFN is
    position-wise): a block then never holds d_ff numbers per position for the whole
    sequence, which is what a million-position context needs (0: whole).
    context_parallel: P > 1 shards every sequence of a batch over P processes (under
    torchrun, a 2-D mesh of data parallel x context parallel; lm task; see
    docs/training.md "Context parallelism"); 1: off.
    init_from: start from the weights of a trained model instead of a random
    initialisation (a warm start: the next stage of a curriculum, or fine-tuning): a run
    directory (its best/), a best/ or checkpoints/step-* directory, or a saved model
    folder.  This config's model must have the same tensors (names and shapes); the
    optimizer, schedule and step count start fresh.  A resumed run continues from its
    own checkpoint instead ("" = off).
    """

    steps: int = 1000
    batch_size: int = 32
    grad_accum: int = 1
    clip: float = 1.0
    precision: str = "auto"
    eval_every: int = 200
    eval_spacing: str = "even"
    eval_batches: int = 50
    final_eval_batches: int = 0
    checkpoint_every: int = 0
    keep_last: int = 2
    early_stop_patience: int = 0
    early_stop_at: float | None = None
    best_metric: str = "auto"
    log_every: int = 10
    num_workers: int = 0
    distributed: str = "auto"
    compile: bool = False
    activation_checkpointing: str = "none"
    activation_checkpointing_k: int = 2
    ffn_chunk: int = 0
    context_parallel: int = 1
    init_from: str = ""


@dataclass
class TrainConfig:
    """A whole run: see the module doc.  ``model`` stays a dict: it is checked when the
    model is built (by the model config classes), with ``model.`` in every error."""

    run: RunConfig = field(default_factory=RunConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: dict[str, Any] = field(default_factory=dict)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainSection = field(default_factory=TrainSection)

    def __post_init__(self) -> None:
        check(self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from a dict (as read from TOML or JSON), checking keys and types."""
        return from_dict(cls, data, where="config")


def eval_due(step: int, steps: int, every: int, spacing: str = "even") -> bool:
    """Whether the periodic evaluation runs after optimizer step ``step`` (1-based) of a
    run of ``steps``: see ``train.eval_spacing``.  ``every`` 0: never (the run is
    evaluated once, at the end).  The last step is always evaluated, so the end of a run
    (and of a run continued to more steps) is in ``best/`` and the results.

    "even": every ``every`` steps; "doubling": the gap is ``every`` up to step 8·every,
    then 2·every up to 16·every, 4·every up to 32·every, ... (4 evaluations per doubling).
    """
    if spacing not in EVAL_SPACINGS:
        raise ValueError(f"eval spacing must be one of {EVAL_SPACINGS}, got {spacing!r}")
    if not every:
        return False
    if step == steps:
        return True
    if spacing == "even":
        return step % every == 0
    gap = every
    while step > 8 * gap:
        gap *= 2
    return step % gap == 0


def check(config: TrainConfig) -> None:
    """Value checks beyond types; raise :class:`ConfigError` naming the key."""
    if not config.data.dataset:
        raise ConfigError("data.dataset is not set; name a dataset (`weirdnet data list`)")
    _check_data(config.data)
    _check_device("run.device", config.run.device)
    _choice("optim.name", config.optim.name, OPTIMIZERS)
    _choice("schedule.name", config.schedule.name, SCHEDULES)
    _choice("schedule.extend", config.schedule.extend, EXTENSIONS)
    if config.run.name:
        try:
            check_run_name(config.run.name)
        except RunDirError as error:
            raise ConfigError(str(error)) from None
    _choice("train.precision", config.train.precision, PRECISIONS)
    _choice("train.distributed", config.train.distributed, DISTRIBUTED)
    _choice("train.eval_spacing", config.train.eval_spacing, EVAL_SPACINGS)
    _choice("train.activation_checkpointing", config.train.activation_checkpointing,
            ACTIVATION_CHECKPOINTING)
    train = config.train
    for key in ("steps", "batch_size", "grad_accum", "keep_last", "log_every",
                "activation_checkpointing_k", "context_parallel"):
        _at_least(f"train.{key}", getattr(train, key), 1)
    for key in ("eval_every", "eval_batches", "final_eval_batches", "checkpoint_every",
                "early_stop_patience", "num_workers", "ffn_chunk"):
        _at_least(f"train.{key}", getattr(train, key), 0)
    if train.num_workers > MAX_WORKERS:  # each worker is a process with a copy of the data
        raise ConfigError(f"train.num_workers must be <= {MAX_WORKERS}, got "
                          f"{train.num_workers} (this machine has {os.cpu_count()} cores)")
    _at_least("schedule.warmup_steps", config.schedule.warmup_steps, 0)
    if train.batch_size % train.grad_accum:
        raise ConfigError(f"train.batch_size={train.batch_size} is not a multiple of "
                          f"train.grad_accum={train.grad_accum}")
    _check_optim(config.optim)
    _number("train.clip", train.clip, least=0.0, hint=" (0 turns clipping off)")
    if not 0.0 <= config.schedule.min_lr_ratio <= 1.0:
        raise ConfigError(f"schedule.min_lr_ratio must be in [0, 1], got "
                          f"{config.schedule.min_lr_ratio}")


MAX_LR = 1.0
"""The largest ``optim.lr``: Adam's step moves each weight by about lr, so a larger one
overshoots any weight scale a model has (1e30 gave NaN weights after one step)."""
MAX_EPS = 1.0
MAX_WEIGHT_DECAY = 10.0


def _check_optim(optim: OptimConfig) -> None:
    """The optimizer's numbers in sane ranges (one line naming the key): lr in (0, 1],
    eps in (0, 1], weight_decay in [0, 10] (and lr x weight_decay < 1 for AdamW, whose
    step multiplies every weight by 1 - lr x weight_decay), betas in [0, 1)."""
    _number("optim.lr", optim.lr, above=0.0, most=MAX_LR)
    _number("optim.eps", optim.eps, above=0.0, most=MAX_EPS)
    _number("optim.weight_decay", optim.weight_decay, least=0.0, most=MAX_WEIGHT_DECAY)
    if optim.name == "adamw" and optim.lr * optim.weight_decay >= 1.0:
        raise ConfigError(f"optim.lr x optim.weight_decay must be < 1 for adamw (each step "
                          f"multiplies every weight by 1 - lr x weight_decay), got "
                          f"{optim.lr:g} x {optim.weight_decay:g}")
    if len(optim.betas) != 2 or not all(0 <= b < 1 for b in optim.betas):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1), got {optim.betas}")


def _check_data(data: DataConfig) -> None:
    """The dataset is registered, has the named splits and takes the options (names and
    types, read from its factory); ``data.options`` and ``data.eval_options`` are replaced
    by the checked values (an int given for a float option becomes a float)."""
    try:
        found = entry(data.dataset)
    except KeyError as error:
        raise ConfigError(f"data.dataset: {error.args[0]}") from None
    check_root(data.dataset, data.root or None, "data.root", present=False)  # its kind;
    # whether it exists is checked where the data is read (weirdnet.data.get)
    for key in ("train_split", "eval_split", "test_split"):
        if key != "test_split" or data.test_split:
            _choice(f"data.{key}", getattr(data, key), found.splits)
    _at_least("data.pad_multiple", data.pad_multiple, 1)
    data.options = check_options(data.dataset, data.options, "data.options.")
    data.eval_options = check_options(data.dataset, data.eval_options, "data.eval_options.")


DEVICES = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
"""``run.device`` names; whether this machine has the device is checked when the run starts
(:func:`weirdnet.run.processes.resolve_device`)."""


def _check_device(key: str, value: str) -> None:
    if not DEVICES.fullmatch(value):
        raise ConfigError(f"{key} must be \"auto\", \"cpu\", \"cuda\", \"cuda:N\" or \"mps\"; "
                          f"got {value!r}")


def _choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{key} must be one of {', '.join(choices)}; got {value!r}{hint}")


def _number(key: str, value: float, *, above: float | None = None,
            least: float | None = None, most: float | None = None, hint: str = "") -> None:
    """A finite number ``> above`` or ``>= least``, and ``<= most`` if given (NaN and
    infinity are refused: NaN passes every comparison's negation and would, e.g., turn
    clipping off)."""
    bound = f"> {above:g}" if above is not None else f">= {least:g}"
    low_ok = value > above if above is not None else value >= least
    if most is not None:
        bound += f" and <= {most:g}"
        low_ok = low_ok and value <= most
    if not (math.isfinite(value) and low_ok):
        raise ConfigError(f"{key} must be a finite number {bound}{hint}, got {value}")


def _at_least(key: str, value: int, low: int) -> None:
    if value < low:
        raise ConfigError(f"{key} must be >= {low}, got {value}")


def apply_overrides(data: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """``data`` with every ``key.path=value`` of ``assignments`` set (a deep copy); an
    unknown section or key is an error naming the closest known one."""
    return apply_assignments(data, assignments, _check_known_path)


def _check_known_path(parts: list[str]) -> None:
    """Unknown sections/keys of the fixed tables fail here, before any type check."""
    sections = {f.name: f for f in dataclasses.fields(TrainConfig)}
    if parts[0] not in sections:
        _unknown(parts[0], list(sections), "section")
    if parts[0] == "model" or len(parts) < 2:
        return
    section_type = {"run": RunConfig, "data": DataConfig, "optim": OptimConfig,
                    "schedule": ScheduleConfig, "train": TrainSection}[parts[0]]
    known = [f.name for f in dataclasses.fields(section_type)]
    if parts[1] not in known:
        _unknown(f"{parts[0]}.{parts[1]}", [f"{parts[0]}.{k}" for k in known], "key")


def _unknown(name: str, known: list[str], what: str) -> None:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown {what} {name!r}{hint} (known: {', '.join(known)})")


def load_config(path: str | os.PathLike, overrides: list[str] = ()) -> TrainConfig:
    """Read ``path`` (TOML, or a run's ``train_config.json``), apply ``overrides`` and
    check everything; ``run.name`` defaults to the file's stem."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ConfigError(f"cannot read {path}: {error}") from error
    else:
        data = read_toml(path)
    data = apply_overrides(data, list(overrides))
    config = TrainConfig.from_dict(data)
    if not config.run.name:
        config.run.name = path.stem
    return config
