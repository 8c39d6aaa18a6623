"""The training loop behind ``weirdnet train`` (one process or a torchrun job).

:func:`train` builds everything from a :class:`~weirdnet.train.config.TrainConfig`:
datasets (``weirdnet.data.get``), the model (:mod:`weirdnet.train.tasks`), AdamW/Adam,
the schedule, then runs the optimizer steps with gradient accumulation, clipping and
autocast, evaluates every ``eval_every`` steps, keeps the best model in ``RUN/best``,
checkpoints (:mod:`weirdnet.train.checkpoint`), and finally evaluates the best model on
the evaluation and test splits and prints a results table.  Only rank 0 logs and writes.

Files of a run ``RUN = out_dir/name``: ``train_config.json``, ``log.jsonl`` (events, see
:mod:`weirdnet.train.runlog`), ``checkpoints/step-*``, ``best/``, ``results.json``,
``tensorboard/`` (optional).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from weirdnet._atomic import write_atomic
from weirdnet.models.config import ConfigError
from weirdnet.train import checkpoint as ckpt
from weirdnet.train import distributed as dist_util
from weirdnet.train import tasks
from weirdnet.train.config import TrainConfig
from weirdnet.train.loading import EvalBatches, ResumableSampler, train_loader
from weirdnet.train.runlog import RunLog, results_table
from weirdnet.train.schedule import lr_multiplier

__all__ = ["Progress", "RunError", "evaluate", "train"]


class RunError(RuntimeError):
    """A run that cannot start or continue (existing run directory, empty dataset, NaN)."""


@dataclass
class Progress:
    """Where the loop is; saved in every checkpoint so a resumed run continues exactly."""

    step: int = 0
    epoch: int = 0
    step_in_epoch: int = 0
    best_value: float | None = None
    best_step: int | None = None
    evals_without_improvement: int = 0


# ---- set-up ----------------------------------------------------------------------------

def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_deterministic() -> None:
    """Deterministic kernels only (an error names any op that has none)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def load_datasets(config: TrainConfig) -> dict[str, Any]:
    """The train, eval and (if named) test splits."""
    from weirdnet.data.registry import get

    data = config.data
    root = data.root or None
    splits = {"train": get(data.dataset, data.train_split, root=root, **data.options)}
    eval_options = {**data.options, **data.eval_options}
    splits["eval"] = get(data.dataset, data.eval_split, root=root, **eval_options)
    if data.test_split:
        splits["test"] = get(data.dataset, data.test_split, root=root, **eval_options)
    for name, dataset in splits.items():
        if len(dataset) == 0:
            split = {"train": data.train_split, "eval": data.eval_split,
                     "test": data.test_split}[name]
            raise RunError(f"dataset {data.dataset!r} split {split!r} is empty; check "
                           "data.root and data.options")
    return splits


def build_model(config: TrainConfig, info) -> nn.Module:
    """The model for the dataset ``info`` (errors name the ``model.`` key)."""
    from weirdnet.models.base import model_class
    from weirdnet.models.config import from_dict

    class_name, model_config = tasks.build_model_config(config.model, info)
    cls = model_class(class_name)
    return cls(from_dict(cls.config_class, model_config, where="model"))


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or Adam; weight decay only on matrices (not on biases, norms, w levels)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
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


def prepare_run_dir(config: TrainConfig, resume: bool, overwrite: bool, is_main: bool) -> Path:
    """``out_dir/name``; an existing run needs ``resume`` (continue) or ``overwrite``."""
    run_dir = Path(config.run.out_dir) / config.run.name
    existing = run_dir.is_dir() and any(run_dir.iterdir())
    if existing and overwrite and is_main:
        shutil.rmtree(run_dir)
    elif existing and not resume and not overwrite:
        raise RunError(f"run directory {run_dir} already exists; continue it with --resume, "
                       "start over with --overwrite, or pick another name with "
                       "--set run.name=NAME")
    return run_dir


# ---- the loop --------------------------------------------------------------------------

class Trainer:
    """One run: call :meth:`fit`.  Attributes are built once in ``__init__``."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, overwrite: bool = False,
                 progress_bar: bool = True):
        self.config = config
        self.processes = dist_util.setup(config.run.device)
        if config.run.deterministic:
            make_deterministic()
        seed_everything(config.run.seed)  # the same initial model on every rank
        self.run_dir = prepare_run_dir(config, resume, overwrite, self.processes.is_main)
        dist_util.barrier(self.processes)
        self.splits = load_datasets(config)
        self.info = self.splits["train"].info
        self.task = self.info.task
        if self.task not in tasks.MODEL_CLASSES:
            raise RunError(f"dataset {config.data.dataset!r} has task {self.task!r}, which "
                           "the trainer does not know")
        self.model = build_model(config, self.info).to(self.processes.device)
        self.parameters = self.model.num_parameters()
        self._check_batch()
        self.wrapped = dist_util.wrap(self.model, self.processes, config.train.distributed,
                                      self.parameters)
        self.optimizer = make_optimizer(self.model, config)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_multiplier(
            config.schedule.name, config.schedule.warmup_steps, config.train.steps,
            config.schedule.min_lr_ratio))
        self.amp_dtype = autocast_dtype(config.train.precision, self.processes.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.sampler = ResumableSampler(self.splits["train"], self.processes,
                                        config.run.seed, config.train.batch_size)
        if self.sampler.steps_per_epoch == 0:
            raise RunError(f"the train split has {len(self.splits['train'])} items, fewer than "
                           f"one batch of train.batch_size={config.train.batch_size}")
        self.state = Progress()
        self.resumed_from = self._resume() if resume else None
        # dropout etc. differ between ranks; a resumed run restored its own states above
        if self.resumed_from is None:
            seed_everything(config.run.seed + 1000 * self.processes.rank + 1)
        self.log = RunLog(self.run_dir, enabled=self.processes.is_main,
                          tensorboard=config.run.tensorboard)
        self.progress_bar = progress_bar

    def _check_batch(self) -> None:
        train = self.config.train
        parts = self.processes.world_size * train.grad_accum
        if train.batch_size % parts:
            raise ConfigError(f"train.batch_size={train.batch_size} must be a multiple of "
                              f"processes x grad_accum = {self.processes.world_size} x "
                              f"{train.grad_accum}")
        self.micro_batch = train.batch_size // parts

    # -- checkpoints --

    def _gather_states(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Full model and optimizer state dicts (a collective under DDP/FSDP)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(self.wrapped, self.optimizer, options=options)

    def _trainer_state(self, optimizer_state: dict[str, Any]) -> dict[str, Any]:
        rngs = dist_util.gather_objects(ckpt.capture_rng(), self.processes)
        return {"progress": self.state.__dict__, "optimizer": optimizer_state,
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "rng": rngs, "world_size": self.processes.world_size}

    def save_checkpoint(self) -> Path | None:
        """Checkpoint the current step (all ranks call it; rank 0 writes)."""
        model_state, optimizer_state = self._gather_states()
        trainer_state = self._trainer_state(optimizer_state)
        path = None
        if self.processes.is_main:
            path = ckpt.save_checkpoint(
                self.run_dir, self.state.step, lambda d: self._write_model(d, model_state),
                trainer_state, self.config.train.keep_last)
        self.last_checkpoint_step = self.state.step
        dist_util.barrier(self.processes)
        return path

    def _save_best(self, metrics: dict[str, float]) -> None:
        model_state, _ = self._gather_states()
        if self.processes.is_main:
            def write(directory: Path) -> None:
                self._write_model(directory, model_state)
                document = {"step": self.state.step, "metrics": metrics}
                write_atomic(directory / "metrics.json", json.dumps(document, indent=2) + "\n")

            ckpt.save_directory(self.run_dir / "best", write)
        dist_util.barrier(self.processes)

    def _write_model(self, directory: Path, model_state: dict[str, torch.Tensor]) -> None:
        """The model and the files that describe its run (config, data info)."""
        self.model.save(directory, model_state)
        self._write_run_files(directory)

    def _write_run_files(self, directory: Path) -> None:
        write_atomic(directory / ckpt.TRAIN_CONFIG,
                     json.dumps(self.config.to_dict(), indent=2) + "\n")
        write_atomic(directory / ckpt.DATA_INFO,
                     json.dumps(dataclasses.asdict(self.info), indent=2) + "\n")

    def _resume(self) -> str | None:
        found = ckpt.load_latest(self.run_dir)
        if found is None:
            return None
        directory, model_state, trainer_state = found
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        try:
            set_state_dict(self.model, self.optimizer, model_state_dict=model_state,
                           optim_state_dict=trainer_state["optimizer"],
                           options=StateDictOptions(full_state_dict=True))
        except (RuntimeError, KeyError, ValueError) as error:
            raise ckpt.CheckpointError(
                f"{directory} does not fit the model of this config (was the model changed "
                f"since?): {str(error).splitlines()[0]}") from None
        self.scheduler.load_state_dict(trainer_state["scheduler"])
        self.scaler.load_state_dict(trainer_state["scaler"])
        self.state = Progress(**trainer_state["progress"])
        rngs = trainer_state["rng"]
        if len(rngs) == self.processes.world_size:
            ckpt.restore_rng(rngs[self.processes.rank])
        else:
            seed_everything(self.config.run.seed + 1000 * self.processes.rank
                            + self.state.step + 1)
        return str(directory)

    # -- evaluation --

    def evaluate(self, split: str, max_batches: int) -> dict[str, float]:
        """Metrics of the model on ``split`` ("eval" or "test"), over all ranks: the first
        ``max_batches`` x ``train.batch_size`` items of it (0 = all)."""
        return evaluate(dist_util.eval_module(self.wrapped), self.splits[split], self.info,
                        self.micro_batch, self.processes,
                        max_batches * self.config.train.batch_size, self._autocast)

    # -- training --

    def _autocast(self):
        device_type = self.processes.device.type
        return torch.autocast(device_type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)

    def _micro_batches(self):
        """Endless (epoch, micro-batch) stream from the saved data position."""
        dataset = self.splits["train"]
        while True:
            self.sampler.set_position(self.state.epoch, self.state.step_in_epoch)
            if hasattr(dataset, "set_epoch"):
                dataset.set_epoch(self.state.epoch)
            loader = train_loader(dataset, self.sampler, self.micro_batch, self.info.pad_id,
                                  self.config.train.num_workers,
                                  self.processes.device.type == "cuda")
            yield from loader
            self.state.epoch += 1
            self.state.step_in_epoch = 0

    def _step(self, stream) -> tuple[float, int]:
        """One optimizer step: (mean loss over the micro-batches, counted targets)."""
        accum = self.config.train.grad_accum
        loss_sum, targets = 0.0, 0
        for k in range(accum):
            batch = tasks.to_device(next(stream), self.processes.device)
            with dist_util.no_sync(self.wrapped, k < accum - 1), self._autocast():
                loss, count = tasks.train_loss(self.wrapped, batch, self.task)
                self.scaler.scale(loss / accum).backward()
            loss_sum += float(loss.detach())
            targets += count
        if not math.isfinite(loss_sum) and not self.scaler.is_enabled():
            raise RunError(f"the loss is {loss_sum} at step {self.state.step + 1}; lower "
                           "optim.lr, raise schedule.warmup_steps or set train.clip")
        self.scaler.unscale_(self.optimizer)
        clip = self.config.train.clip
        norm = nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else math.inf)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.step_in_epoch += 1
        self._last_grad_norm = float(norm)
        return loss_sum / accum, targets

    def _improved(self, metrics: dict[str, float]) -> bool:
        name, lower = tasks.best_metric(self.task, self.config.train.best_metric)
        if name not in metrics:
            raise ConfigError(f"train.best_metric={name!r} is not among the metrics "
                              f"{sorted(metrics)}")
        value = metrics[name]
        best = self.state.best_value
        better = best is None or (value < best if lower else value > best)
        if better:
            self.state.best_value, self.state.best_step = value, self.state.step
            self.state.evals_without_improvement = 0
        else:
            self.state.evals_without_improvement += 1
        return better

    def _evaluate_and_track(self) -> bool:
        """Periodic evaluation; returns True when early stopping says stop."""
        metrics = self.evaluate("eval", self.config.train.eval_batches)
        self.log.event("eval", self.state.step, split="val", metrics=metrics)
        if self._improved(metrics):
            self._save_best(metrics)
        patience = self.config.train.early_stop_patience
        return patience > 0 and self.state.evals_without_improvement >= patience

    def fit(self) -> dict[str, Any]:
        """Train to ``train.steps`` (or early stop), then evaluate the best model; returns
        the results (also in ``RUN/results.json``)."""
        cfg = self.config.train
        self.log.event("start", self.state.step, run=self.config.run.name, task=self.task,
                       world_size=self.processes.world_size, parameters=self.parameters,
                       resumed_from=self.resumed_from, config=self.config.to_dict())
        if self.processes.is_main:
            self._write_run_files(self.run_dir)
        self.last_checkpoint_step = self.state.step
        stream = self._micro_batches()
        bar = self._bar()
        window = _Window()
        stopped_early = False
        self.wrapped.train()
        try:
            while self.state.step < cfg.steps and not stopped_early:
                loss, targets = self._step(stream)
                window.add(loss, targets * self.processes.world_size, self.micro_batch
                           * cfg.grad_accum * self.processes.world_size)
                if self.state.step % cfg.log_every == 0 or self.state.step == cfg.steps:
                    self._log_train(window, bar)
                if bar is not None:
                    bar.update(1)
                at_eval = cfg.eval_every and self.state.step % cfg.eval_every == 0
                if at_eval:
                    stopped_early = self._evaluate_and_track()
                if at_eval or (cfg.checkpoint_every and
                               self.state.step % cfg.checkpoint_every == 0):
                    self.save_checkpoint()
        except KeyboardInterrupt:
            if not self.processes.distributed and self.state.step > self.last_checkpoint_step:
                path = self.save_checkpoint()
                print(f"\ninterrupted at step {self.state.step}; saved {path}; continue with: "
                      f"weirdnet train {self.run_dir} --resume", flush=True)
            raise
        finally:
            if bar is not None:
                bar.close()
        return self._finish(stopped_early)

    def _finish(self, stopped_early: bool) -> dict[str, Any]:
        if self.state.step > self.last_checkpoint_step:
            self.save_checkpoint()
        if self.state.best_step is None or not self.config.train.eval_every:
            self._evaluate_and_track()  # no periodic evaluation ran: the last model is best
        self._load_best()
        limit = self.config.train.final_eval_batches
        results = {"val": self.evaluate("eval", limit)}
        if "test" in self.splits:
            results["test"] = self.evaluate("test", limit)
        summary = {"run": self.config.run.name, "run_dir": str(self.run_dir),
                   "task": self.task, "dataset": self.config.data.dataset,
                   "steps": self.state.step, "best_step": self.state.best_step,
                   "stopped_early": stopped_early, "parameters": self.parameters,
                   "world_size": self.processes.world_size, "results": results}
        self.log.event("end", self.state.step, results=results, best_step=self.state.best_step)
        if self.processes.is_main:
            write_atomic(self.run_dir / "results.json", json.dumps(summary, indent=2) + "\n")
        self.log.close()
        return summary

    def _load_best(self) -> None:
        """Put the weights of ``RUN/best`` into the model (every rank)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        from weirdnet.models.base import WEIGHTS_FILE
        from weirdnet.models.safetensors_io import load_file

        tensors, _ = load_file(self.run_dir / "best" / WEIGHTS_FILE, "cpu")
        set_model_state_dict(self.wrapped, tensors,
                             options=StateDictOptions(full_state_dict=True))

    def _bar(self):
        if not (self.progress_bar and self.processes.is_main):
            return None
        from tqdm.auto import tqdm

        return tqdm(total=self.config.train.steps, initial=self.state.step, unit="step",
                    desc=self.config.run.name, dynamic_ncols=True, mininterval=1.0)

    def _log_train(self, window: _Window, bar) -> None:
        loss, targets, items, seconds = window.take()
        loss = dist_util.all_reduce_sums({"loss": loss}, self.processes)["loss"] \
            / self.processes.world_size
        tokens_per_s = targets / max(seconds, 1e-9)
        self.log.event("train", self.state.step, loss=loss, lr=self.scheduler.get_last_lr()[0],
                       grad_norm=self._last_grad_norm, tokens_per_s=tokens_per_s,
                       samples_per_s=items / max(seconds, 1e-9))
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)


class _Window:
    """Loss and throughput since the last log line."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.losses: list[float] = []
        self.targets = self.items = 0

    def add(self, loss: float, targets: int, items: int) -> None:
        self.losses.append(loss)
        self.targets += targets
        self.items += items

    def take(self) -> tuple[float, int, int, float]:
        now = time.perf_counter()
        out = (sum(self.losses) / max(len(self.losses), 1), self.targets, self.items,
               now - self.start)
        self.__init__()
        return out


def train(config: TrainConfig, *, resume: bool = False, overwrite: bool = False,
          progress_bar: bool = True) -> dict[str, Any]:
    """Run ``config`` to the end and return its results (see :meth:`Trainer.fit`); prints
    the results table on rank 0."""
    trainer = Trainer(config, resume=resume, overwrite=overwrite, progress_bar=progress_bar)
    try:
        summary = trainer.fit()
        if trainer.processes.is_main:
            print(results_table(summary), flush=True)
        return summary
    finally:
        dist_util.teardown(trainer.processes)


def evaluate(model: nn.Module, dataset, info, batch_size: int,
             processes: dist_util.Processes, limit: int = 0, autocast=nullcontext
             ) -> dict[str, float]:
    """Metrics of ``model`` on the first ``limit`` items of ``dataset`` (0 = all), this
    rank's share of them summed over all ranks (see
    :class:`~weirdnet.train.loading.EvalBatches`); ``autocast()`` wraps each forward.
    The model is in eval mode meanwhile; its mode is restored afterwards."""
    batches = EvalBatches(dataset, processes, batch_size, limit, info.pad_id)
    was_training = model.training
    model.eval()
    sums: tasks.Sums = {}
    try:
        for batch, keep in batches:
            with autocast():
                stats = tasks.batch_metrics(model, tasks.to_device(batch, processes.device),
                                            info.task)
            if keep:
                tasks.add_sums(sums, stats)
    finally:
        model.train(was_training)
    return tasks.metrics_from_sums(dist_util.all_reduce_sums(sums, processes), info.task,
                                   info)
