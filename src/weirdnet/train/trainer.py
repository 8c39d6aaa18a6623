"""The training loop behind ``weirdnet train`` (one process or a torchrun job).

:func:`train` builds everything from a :class:`~weirdnet.train.config.TrainConfig`:
datasets (``weirdnet.data.get``), the model (:mod:`weirdnet.train.tasks`), AdamW/Adam,
the schedule, then runs the optimizer steps with gradient accumulation, clipping and
autocast, evaluates every ``eval_every`` steps (or on the doubling grid of
``eval_spacing``), keeps the best model in ``RUN/best``,
checkpoints (:mod:`weirdnet.train.checkpoint`), and finally evaluates the best model on
the evaluation and test splits and prints a results table.  Only rank 0 logs and writes.

Files of a run ``RUN = out_dir/name``: ``train_config.json``, ``data_fingerprint.json``
(what the data were read from: :mod:`weirdnet.train.data_fingerprint`), ``log.jsonl``
(events, see :mod:`weirdnet.train.runlog`), ``checkpoints/step-*``, ``best/``,
``results.json``, ``tensorboard/`` (optional).
"""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from weirdnet._atomic import write_atomic
from weirdnet._faults import fault_point
from weirdnet._signals import STOP, Interrupted, signal_name
from weirdnet.models.base import WEIGHTS_FILE
from weirdnet.models.safetensors_io import load_file
from weirdnet.train import checkpoint as ckpt
from weirdnet.train import context_parallel, data_fingerprint, tasks
from weirdnet.train import distributed as dist_util
from weirdnet.train.config import TrainConfig, eval_due
from weirdnet.train.evaluation import evaluate, non_finite
from weirdnet.train.loading import ResumableSampler, train_loader
from weirdnet.train.rundir import RunDirError, check_run_dir, claim_run_dir
from weirdnet.train.runlog import RunLog, results_table, scope_text
from weirdnet.train.schedule import extend_phases, phased_multiplier
from weirdnet.train.setup import (
    RunError,
    autocast_dtype,
    build_model,
    enable_activation_checkpointing,
    load_datasets,
    make_deterministic,
    make_optimizer,
    seed_everything,
)
from weirdnet.train.weights import check_state_fits, load_initial_weights
from weirdnet.typed_config import ConfigError

__all__ = ["Progress", "RunError", "evaluate", "train"]


@dataclass
class Progress:
    """Where the loop is; saved in every checkpoint so a resumed run continues exactly."""

    step: int = 0
    epoch: int = 0
    step_in_epoch: int = 0
    best_value: float | None = None
    best_step: int | None = None
    evals_without_improvement: int = 0
    schedule_phases: list[list[int]] = field(default_factory=list)
    eval_pending: bool = False  # an evaluation at ``step`` was interrupted: redo it
    stopped_early: bool = False


# ---- the loop --------------------------------------------------------------------------

class Trainer:
    """One run: call :meth:`fit`.  Attributes are built once in ``__init__``."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, overwrite: bool = False,
                 progress_bar: bool = True, allow_data_change: bool = False):
        self.config = config
        self.allow_data_change = allow_data_change
        self.progress_bar = progress_bar
        self.bar = None  # the training progress bar while it is shown (see _say)
        self.processes = dist_util.setup(config.run.device)
        self.best_lost = False  # a resumed run's best/ was damaged (see _check_best)
        # Everything is checked before the run directory is created or changed: a run that
        # cannot start leaves nothing behind (and an existing run stays as it was).
        try:
            check_run_dir(config.run.out_dir, config.run.name, resume=resume,
                          overwrite=overwrite, is_main=self.processes.is_main)
        except RunDirError as error:
            raise RunError(str(error)) from None
        self._build(resume)
        try:
            self.claim = claim_run_dir(config.run.out_dir, config.run.name, resume=resume,
                                       overwrite=overwrite, is_main=self.processes.is_main)
        except RunDirError as error:
            raise RunError(str(error)) from None
        self.run_dir = self.claim.run_dir
        try:
            self._open(resume)
        except BaseException:
            self.claim.abandon()
            raise

    def _build(self, resume: bool) -> None:
        """Data, model (from ``train.init_from`` if set), optimizer and schedule, and the
        checks that need them; nothing is written."""
        config = self.config
        if config.run.deterministic:
            make_deterministic()
        seed_everything(config.run.seed)  # the same initial model on every rank
        self.splits = load_datasets(config)
        self._check_data_source(resume)
        self.info = self.splits["train"].info
        self.task = self.info.task
        if self.task not in tasks.TASKS:
            raise RunError(f"dataset {config.data.dataset!r} has task {self.task!r}, which "
                           "the trainer does not know")
        self.model = build_model(config, self.info)
        self.initialised_from = self._warm_start(resume)
        self.model.to(self.processes.device)
        self.shards = context_parallel.setup(
            config.train.context_parallel, self.processes, self.task,
            self.info.max_len - 1 if self.info.max_len else config.train.context_parallel,
            self.model)
        enable_activation_checkpointing(self.model, config.train.activation_checkpointing,
                                        config.train.activation_checkpointing_k,
                                        config.train.ffn_chunk)
        self._check_fits_data()
        self.parameters = self.model.num_parameters()
        self._check_batch()
        self.amp_dtype = autocast_dtype(config.train.precision, self.processes.device)
        self.wrapped = dist_util.wrap(self.model, self.processes, config.train.distributed,
                                      self.parameters)
        # what the training step calls: the wrapped model, compiled if train.compile
        self.step_module = torch.compile(self.wrapped) if config.train.compile else self.wrapped
        self.optimizer = make_optimizer(self.model, config)
        self.state = Progress(schedule_phases=[[0, config.train.steps]])
        self._set_schedule()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: self._lr_factor(step))
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.sampler = ResumableSampler(self.splits["train"], self._data_processes,
                                        config.run.seed, config.train.batch_size)
        if self.sampler.steps_per_epoch == 0:
            raise RunError(f"the train split has {len(self.splits['train'])} items, fewer than "
                           f"one batch of train.batch_size={config.train.batch_size}")

    def _check_data_source(self, resume: bool) -> None:
        """Fingerprint the data's source (:mod:`weirdnet.train.data_fingerprint`); a
        resumed run whose recorded source changed is a :class:`RunError` naming the
        file, unless ``allow_data_change`` (then the new source is recorded)."""
        data = self.config.data
        self.data_fingerprint = data_fingerprint.record(data.dataset, data.root)
        self.data_note = None
        run_dir = Path(self.config.run.out_dir) / self.config.run.name
        # only a run with a checkpoint has trained on the data it recorded
        recorded = data_fingerprint.read_record(run_dir) \
            if resume and ckpt.list_checkpoints(run_dir) else None
        if recorded is None:
            return
        change = data_fingerprint.data_change(recorded, self.data_fingerprint)
        if change is None:
            return
        if not self.allow_data_change:
            raise RunError(f"the data changed since {run_dir} started: {change}; resuming "
                           "would not continue the run it was; restore the data, or "
                           "continue on the new data with --allow-data-change")
        self.data_note = (f"the data changed since {run_dir} started: {change}; continuing "
                          "on the new data (--allow-data-change), which is recorded now")

    def _warm_start(self, resume: bool) -> str | None:
        """``train.init_from``: put a trained model's weights into the new model; the
        directory read, or None (not set, or a resumed run that has its own checkpoint)."""
        source = self.config.train.init_from
        run_dir = Path(self.config.run.out_dir) / self.config.run.name
        if not source or (resume and ckpt.list_checkpoints(run_dir)):
            return None
        model_dir = load_initial_weights(self.model, Path(source))
        self._say(f"starting from the weights of {model_dir} (train.init_from)")
        return str(model_dir)

    def _check_fits_data(self) -> None:
        """The config's values that only the data and the model can check: the best
        metric is one the task reports, every split's items fit the model's max_len,
        TensorBoard can be written."""
        tasks.check_best_metric(self.config.train.best_metric, self.info)
        for split, dataset in self.splits.items():
            name = getattr(self.config.data, f"{split}_split", split)
            tasks.check_lengths(self.model.config, dataset.info, repr(name))
        if self.config.run.tensorboard:
            try:  # tensorboard is optional: checked only when the config asks for it
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                raise ConfigError("run.tensorboard = true needs the tensorboard package: pip "
                                  "install tensorboard (or --set run.tensorboard=false)"
                                  ) from None

    def _open(self, resume: bool) -> None:
        """Start using the claimed run directory: report repairs and a moved run, load
        the checkpoint to resume from, open the log."""
        config = self.config
        for note in self.claim.cleaned:
            self._say(f"{note} (left by an earlier process that was killed)")
        if resume:
            self._note_moved()
        dist_util.barrier(self.processes)
        self.resumed_from = self._resume() if resume else None
        # dropout etc. differ between ranks; a resumed run restored its own states above
        if self.resumed_from is None:
            seed_everything(config.run.seed + 1000 * self.processes.rank + 1)
        self.log = RunLog(self.run_dir, enabled=self.processes.is_main,
                          tensorboard=config.run.tensorboard)
        self.phase = "start"  # what the run is doing: start|step|boundary|eval|final

    def _note_moved(self) -> None:
        """One line when the run's stored ``run.out_dir``/``run.name`` name another place
        than where it is (a copied, moved or renamed run): it is trained where it is."""
        stored = _saved_config(self.run_dir).get("run")
        if not isinstance(stored, dict):
            return
        name, out_dir = stored.get("name"), stored.get("out_dir")
        if not (isinstance(name, str) and isinstance(out_dir, str)):
            return
        here = self.config.run
        if name == here.name and Path(out_dir).resolve() == Path(here.out_dir).resolve():
            return
        self._say(f"{self.run_dir}'s train_config.json names run.out_dir={out_dir!r}, "
                  f"run.name={name!r}, i.e. {Path(out_dir) / name} from here (a copied, "
                  f"moved or renamed run, or another working directory); training "
                  f"{self.run_dir} itself, as run.out_dir={here.out_dir!r}, "
                  f"run.name={here.name!r}")

    def _say(self, message: str) -> None:
        """One line for the user on stderr (main process only), above the progress bar
        when one is shown."""
        if not self.processes.is_main:
            return
        if self.bar is not None:
            self.bar.write(f"weirdnet train: {message}", file=sys.stderr)
        else:
            print(f"weirdnet train: {message}", file=sys.stderr, flush=True)

    def _set_schedule(self) -> None:
        """The learning-rate factor function of the current ``schedule_phases``."""
        sched = self.config.schedule
        self._lr_factor = phased_multiplier(sched.name, sched.warmup_steps,
                                            self.state.schedule_phases, sched.min_lr_ratio)

    def close(self) -> None:
        """Release the run directory's lock and close the log."""
        log = getattr(self, "log", None)
        if log is not None:
            log.close()
        self.claim.release()

    @property
    def _data_processes(self) -> dist_util.Processes:
        """The processes that read different items: all of them, or with
        ``train.context_parallel`` the data-parallel places (a context-parallel group
        reads the same items)."""
        return self.processes if self.shards is None else self.shards.data

    def _check_batch(self) -> None:
        train = self.config.train
        readers = self._data_processes.world_size
        parts = readers * train.grad_accum
        if train.batch_size % parts:
            raise ConfigError(f"train.batch_size={train.batch_size} must be a multiple of "
                              f"data-parallel processes x grad_accum = {readers} x "
                              f"{train.grad_accum}")
        self.micro_batch = train.batch_size // parts

    # -- checkpoints --

    def _gather_states(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Full model and optimizer state dicts (a collective under DDP/FSDP)."""
        # deferred: torch.distributed.checkpoint takes about a second to import
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
            with STOP.shielded():  # a signal waits until the checkpoint is complete
                path = ckpt.save_checkpoint(
                    self.run_dir, self.state.step, lambda d: self._write_model(d, model_state),
                    trainer_state, self.config.train.keep_last, _tensor_bytes(model_state))
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

            with STOP.shielded():
                best = ckpt.save_directory(self.run_dir / "best", write,
                                           needed=_tensor_bytes(model_state))
            ckpt.verify_directory(best)  # read back: what was written is what is kept
        dist_util.barrier(self.processes)

    def _check_best(self) -> None:
        """A resumed run's ``best/`` is verified: when it is damaged, one line says so and
        the best so far is forgotten, so the next evaluation writes a new ``best/``."""
        best = self.run_dir / "best"
        if not best.is_dir():
            return
        try:
            ckpt.verify_directory(best)
        except ckpt.CheckpointError as error:
            step = self.state.best_step
            self._say(f"{best} is damaged ({error}); the best model so far"
                      f"{f' (step {step})' if step is not None else ''} is lost: the next "
                      "evaluation's model becomes best/")
            self.state.best_value = self.state.best_step = None
            self.state.evals_without_improvement = 0
            self.best_lost = True

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
        """Load the newest intact checkpoint (model, optimizer, schedule, RNG, data
        position); say what was resumed and what the new config changes."""
        found = ckpt.load_latest(self.run_dir)
        if found is None:
            self._say(f"{self.run_dir} has no checkpoint yet; starting from step 0")
            return None
        directory, model_state, trainer_state = found
        # deferred: torch.distributed.checkpoint takes about a second to import
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        check_state_fits(self.model, model_state, directory)
        try:
            set_state_dict(self.model, self.optimizer, model_state_dict=model_state,
                           optim_state_dict=trainer_state["optimizer"],
                           options=StateDictOptions(full_state_dict=True))
        except (RuntimeError, KeyError, ValueError) as error:
            raise ckpt.CheckpointError(
                f"{directory} does not fit the optimizer of this config (was the model or "
                f"optim changed since?): {' '.join(str(error).split())[:300]}") from None
        self.scheduler.load_state_dict(trainer_state["scheduler"])
        self.scaler.load_state_dict(trainer_state["scaler"])
        saved = _saved_config(directory)
        self.state = Progress(**trainer_state["progress"])
        self._say(f"resuming {self.run_dir} from step {self.state.step} ({directory.name})")
        self._check_best()
        self._continue_schedule(saved)
        rngs = trainer_state["rng"]
        if len(rngs) == self.processes.world_size:
            ckpt.restore_rng(rngs[self.processes.rank])
        else:
            seed_everything(self.config.run.seed + 1000 * self.processes.rank
                            + self.state.step + 1)
        return str(directory)

    def _continue_schedule(self, saved: dict[str, Any]) -> None:
        """Check ``train.steps`` against the steps done, report changed keys, and lay the
        schedule out again as ``schedule.extend`` says."""
        done, steps = self.state.step, self.config.train.steps
        if steps < done:
            raise RunError(f"train.steps={steps} is fewer than the {done} steps {self.run_dir} "
                           f"has done; evaluate it with `weirdnet eval {self.run_dir}`, or "
                           f"train longer with --set train.steps=N (N > {done})")
        changes = _config_changes(saved, json.loads(json.dumps(self.config.to_dict())))
        if changes:
            self._say("config changed since the checkpoint: " + "; ".join(changes))
        old_steps = saved.get("train", {}).get("steps", steps)
        phases = self.state.schedule_phases or [[0, old_steps]]
        how = self.config.schedule.extend
        self.state.schedule_phases = extend_phases(phases, done, steps, how)
        self._set_schedule()
        if phases[-1][1] == steps or self.config.schedule.name != "cosine" and how == "keep":
            return
        before = self.optimizer.param_groups[0]["lr"]
        for group, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs,
                               strict=True):
            group["lr"] = base * self._lr_factor(self.scheduler.last_epoch)
        note = self._keep_note(done, steps) if how == "keep" else _EXTEND_NOTES[how]
        self._say(f"the learning-rate schedule was laid out for {phases[-1][1]} steps, now "
                  f"train.steps={steps}: schedule.extend={how!r} "
                  f"({note}); lr at step {done + 1}: {before:.3g} -> "
                  f"{self.optimizer.param_groups[0]['lr']:.3g}")

    def _keep_note(self, done: int, steps: int) -> str:
        """What ``schedule.extend='keep'`` does from step ``done + 1`` to ``steps``: the
        rate stays at its final value, or, when the warmup outlasts the steps the
        schedule was laid out for, it first keeps rising (then falls to that value)."""
        warmup = self.config.schedule.warmup_steps
        start = self.state.schedule_phases[-1][0]
        base = self.scheduler.base_lrs[0]
        # factor(k) is the rate of step k + 1; the peak comes by the end of the warmup
        ahead = range(done, min(steps, start + warmup + 1))
        peak = max(ahead, key=self._lr_factor, default=done)
        if self._lr_factor(peak) <= self._lr_factor(done):
            return _EXTEND_NOTES["keep"]
        return (f"the schedule is unchanged; its warmup (schedule.warmup_steps={warmup}) "
                f"outlasts the steps it was laid out for, so the rate keeps rising to "
                f"{base * self._lr_factor(peak):.3g} at step {peak + 1}, then falls to "
                f"{base * self._lr_factor(steps - 1):.3g} and stays there")

    # -- evaluation --

    def evaluate(self, split: str, max_batches: int, desc: str) -> dict[str, float]:
        """Metrics of the model on ``split`` ("eval" or "test"), over all ranks: the first
        ``max_batches`` x ``train.batch_size`` items of it (0 = all).  A progress bar
        ``desc`` is shown while it runs; one process stops between batches when asked."""
        return evaluate(dist_util.eval_module(self.wrapped), self.splits[split],  # whole
                        self.info, self.micro_batch, self.processes,  # sequences
                        max_batches * self.config.train.batch_size, self._autocast,
                        progress=desc if self.progress_bar else None,
                        pad_multiple=self.config.data.pad_multiple)

    def items_evaluated(self, split: str, max_batches: int) -> int:
        """How many items of ``split`` :meth:`evaluate` reads with ``max_batches`` (the
        trials behind a test accuracy's binomial interval)."""
        size = len(self.splits[split])
        limit = max_batches * self.config.train.batch_size
        return size if limit <= 0 else min(size, limit)

    def scope(self, split: str, max_batches: int) -> dict[str, int]:
        """What an evaluation of ``split`` with ``max_batches`` reads: ``items`` (the
        first ones), ``batches`` of ``train.batch_size`` items, ``split_items`` (all)."""
        items = self.items_evaluated(split, max_batches)
        return {"items": items, "batches": -(-items // self.config.train.batch_size),
                "split_items": len(self.splits[split])}

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
                                  self.processes.device.type == "cuda",
                                  self.config.data.pad_multiple, self.info.max_len)
            yield from loader
            self.state.epoch += 1
            self.state.step_in_epoch = 0

    def _step(self, stream) -> tuple[float, int, int]:
        """One optimizer step: (mean loss over the micro-batches, counted targets, input
        tokens read; see :meth:`weirdnet.train.tasks.Task.input_tokens`)."""
        accum, task = self.config.train.grad_accum, tasks.get(self.task)
        loss_sum, targets, inputs = 0.0, 0, 0
        for k in range(accum):
            batch = next(stream)
            inputs += task.input_tokens(batch)  # on the host: no device sync
            batch = tasks.to_device(batch, self.processes.device)
            with dist_util.no_sync(self.wrapped, k < accum - 1), self._autocast(), \
                    context_parallel.entered(self.shards):  # the sharded ops read it
                if self.shards is None:
                    loss, count = task.loss(self.step_module, batch)
                    reported = float(loss.detach())
                else:
                    loss, reported, count = context_parallel.sharded_loss(
                        task, self.step_module, batch, self.shards)
                self.scaler.scale(loss / accum).backward()
            loss_sum += reported
            targets += count
        fault_point("step")
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
        return loss_sum / accum, targets, inputs

    def _non_finite_hint(self) -> str:
        """What to do about a non-finite evaluation: the weights diverged, or (finite
        weights) some items give non-finite outputs."""
        # this process's part of each parameter (a DTensor's local shard under FSDP)
        local = (getattr(p, "_local_tensor", p) for p in self.model.parameters())
        if all(bool(torch.isfinite(t).all()) for t in local):
            return ("the weights are finite, so some of the split's items give non-finite "
                    "outputs: check the data")
        return ("the weights are no longer finite: lower optim.lr, raise "
                "schedule.warmup_steps or set train.clip")

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
        """Periodic evaluation (``train.eval_batches``: log.jsonl and a line on the
        terminal); a better model becomes ``best/``; returns True when early stopping
        says stop.  A non-finite metric is a :class:`RunError`: never the best model."""
        step, batches = self.state.step, self.config.train.eval_batches
        metrics = self.evaluate("eval", batches, f"eval at step {step}")
        scope = self.scope("eval", batches)
        self.log.event("eval", step, split="val", metrics=metrics, scope="periodic",
                       **scope)
        _check_finite(metrics, "val", f"at the evaluation of step {step}",
                      self._non_finite_hint())
        improved = self._improved(metrics)
        self._say(f"step {step}: val {_metrics_text(metrics)} (periodic validation on "
                  f"{scope_text(scope, 'val')}{'; new best' if improved else ''})")
        if improved:
            self._save_best(metrics)
        if self.state.step >= self.config.train.steps:
            return self.state.stopped_early  # the end: not stopped early, whatever it says
        patience = self.config.train.early_stop_patience
        if patience > 0 and self.state.evals_without_improvement >= patience:
            self.state.stopped_early = True
        if self._reached_target(metrics):
            self.state.stopped_early = True
        return self.state.stopped_early

    def _reached_target(self, metrics: dict[str, float]) -> bool:
        """Whether this evaluation reached ``train.early_stop_at`` (the best metric at or
        beyond it: Zoology stops a recall run at 99% accuracy)."""
        target = self.config.train.early_stop_at
        if target is None:
            return False
        name, lower = tasks.best_metric(self.task, self.config.train.best_metric)
        return metrics[name] <= target if lower else metrics[name] >= target

    def fit(self) -> dict[str, Any]:
        """Train to ``train.steps`` (or early stop), then evaluate the best model; returns
        the results (also in ``RUN/results.json``).  SIGINT/SIGTERM stop it at the next
        safe point with a checkpoint: :class:`~weirdnet._signals.Interrupted` says what
        was kept."""
        complete = self._completed_summary()
        if complete is not None:
            return complete
        notice = ("weirdnet train: {signal} received: stopping after the current step "
                  "(or evaluation batch), with a checkpoint; a second {signal} stops at "
                  "once") if self.processes.is_main else None
        with STOP.deferred(notice):
            try:
                return self._fit()
            except (Interrupted, KeyboardInterrupt) as stop:
                interrupted = self._interrupted(stop)
                interrupted.quiet = not self.processes.is_main
                raise interrupted from None

    def _completed_summary(self) -> dict[str, Any] | None:
        """The stored results of a run that has already done all its steps (nothing is
        trained or rewritten), else None."""
        results = self.run_dir / "results.json"
        finished = self.state.step >= self.config.train.steps or self.state.stopped_early
        if not finished or self.state.eval_pending or self.best_lost \
                or not results.is_file():
            return None
        try:
            summary = json.loads(results.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if summary.get("steps") != self.state.step:
            return None
        self._say(f"{self.run_dir} has done all train.steps={self.config.train.steps} and "
                  "has its results; nothing to do (train longer with --set train.steps=N)")
        self.log.close()
        return summary

    def _fit(self) -> dict[str, Any]:
        cfg = self.config.train
        self.log.event("start", self.state.step, run=self.config.run.name, task=self.task,
                       world_size=self.processes.world_size, parameters=self.parameters,
                       resumed_from=self.resumed_from, initialised_from=self.initialised_from,
                       config=self.config.to_dict())
        if self.processes.is_main:
            self._write_run_files(self.run_dir)
            data_fingerprint.write_record(self.run_dir, self.data_fingerprint)
        if self.data_note is not None:
            self._say(self.data_note)
        self.last_checkpoint_step = self.state.step
        stopped_early = self.state.stopped_early
        if self.state.eval_pending:  # interrupted during the evaluation at this step
            self.phase = "eval"
            stopped_early = self._evaluate_and_track()
            self.state.eval_pending = False
        stream = self._micro_batches()
        bar = self.bar = self._bar()
        window = _Window()
        self.wrapped.train()
        try:
            while self.state.step < cfg.steps and not stopped_early:
                self.phase = "step"
                loss, targets, inputs = self._step(stream)
                self.phase = "boundary"
                ranks = self._data_processes.world_size
                window.add(loss, targets * ranks, inputs * ranks,
                           self.micro_batch * cfg.grad_accum * ranks)
                if self.state.step % cfg.log_every == 0 or self.state.step == cfg.steps:
                    self._log_train(window, bar)
                if bar is not None:
                    bar.update(1)
                at_eval = eval_due(self.state.step, cfg.steps, cfg.eval_every,
                                   cfg.eval_spacing)
                if at_eval:
                    self.phase = "eval"
                    stopped_early = self._evaluate_and_track()
                    self.phase = "boundary"
                if at_eval or (cfg.checkpoint_every and
                               self.state.step % cfg.checkpoint_every == 0):
                    self.save_checkpoint()
                if self._stop_requested():
                    raise Interrupted(STOP.signum or signal.SIGTERM, at_safe_point=True)
        finally:
            if bar is not None:
                bar.close()
            self.bar = None
        self.phase = "final"
        return self._finish(stopped_early)

    def _finish(self, stopped_early: bool) -> dict[str, Any]:
        """Checkpoint the last step, evaluate the best model on the evaluation and test
        splits, write ``results.json``.  Interrupted, it is redone on resume."""
        if self.state.step > self.last_checkpoint_step:
            self.save_checkpoint()
        if self.state.best_step is None or not self.config.train.eval_every:
            self._evaluate_and_track()  # no periodic evaluation ran: the last model is best
        self._load_best()
        limit = self.config.train.final_eval_batches
        results = {"val": self.evaluate("eval", limit, "final eval (val)")}
        evaluated = {"val": self.items_evaluated("eval", limit)}
        scope = {"batch_size": self.config.train.batch_size,
                 "final": {"val": self.scope("eval", limit)},
                 "periodic": {"val": self.scope("eval", self.config.train.eval_batches)}}
        if "test" in self.splits:
            results["test"] = self.evaluate("test", limit, "final eval (test)")
            evaluated["test"] = self.items_evaluated("test", limit)
            scope["final"]["test"] = self.scope("test", limit)
        for split, metrics in results.items():
            _check_finite(metrics, split, f"in the final evaluation of best/ (step "
                          f"{self.state.best_step})", "no results are written; its model "
                          "computes non-finite values on some of the split's items")
        summary = {"run": self.config.run.name, "run_dir": str(self.run_dir),
                   "task": self.task, "dataset": self.config.data.dataset,
                   "steps": self.state.step, "best_step": self.state.best_step,
                   "stopped_early": stopped_early, "parameters": self.parameters,
                   "initialised_from": (self.initialised_from
                                        or self.config.train.init_from or None),
                   "world_size": self.processes.world_size, "results": results,
                   "evaluated": evaluated, "scope": scope}
        self.log.event("end", self.state.step, results=results, best_step=self.state.best_step,
                       scope=scope["final"])
        if self.processes.is_main:
            with STOP.shielded():
                write_atomic(self.run_dir / "results.json",
                             json.dumps(summary, indent=2) + "\n")
        self.log.close()
        return summary

    def _stop_requested(self) -> bool:
        """Whether a stop signal arrived (in any process of a torchrun job)."""
        requested = STOP.requested
        if self.processes.distributed:
            flag = {"stop": float(requested)}
            requested = dist_util.all_reduce_sums(flag, self.processes)["stop"] > 0
        return requested

    def _interrupted(self, stop: BaseException) -> Interrupted:
        """Save what can be saved after a stop signal; the :class:`Interrupted` whose
        one-line message says what was kept and how to continue."""
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        name, step = signal_name(signum), self.state.step
        again = f"continue with: weirdnet train {self.run_dir}"
        consistent = self.phase in ("boundary", "eval")  # not in the middle of a step
        if self.phase == "final":
            return Interrupted(signum, f"{name} during the final evaluation; the model is "
                               f"trained and saved (step {step}); finish with: weirdnet "
                               f"train {self.run_dir}")
        if consistent and step > self.last_checkpoint_step and not (
                self.processes.distributed and not getattr(stop, "at_safe_point", False)):
            self.state.eval_pending = self.phase == "eval"
            path = self.save_checkpoint()
            where = " during the evaluation (redone on resume)" if self.phase == "eval" else ""
            return Interrupted(signum, f"{name} at step {step}{where}; saved {path}; {again}")
        last = ckpt.list_checkpoints(self.run_dir)
        if consistent and last and step == self.last_checkpoint_step:
            return Interrupted(signum, f"{name} at step {step}; its checkpoint {last[-1]} is "
                               f"intact; {again}")
        if last:
            return Interrupted(signum, f"{name} during step {step + 1} (a second signal stops "
                               f"at once); the last checkpoint, {last[-1].name}, is intact; "
                               f"{again}")
        return Interrupted(signum, f"{name} during step {step + 1}, before any checkpoint; "
                           f"nothing was saved (start again with --overwrite)")

    def _load_best(self) -> None:
        """Put the weights of ``RUN/best`` into the model (every rank)."""
        # deferred: torch.distributed.checkpoint takes about a second to import
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        ckpt.verify_directory(self.run_dir / "best")  # damaged since it was written: an error
        tensors, _ = load_file(self.run_dir / "best" / WEIGHTS_FILE, "cpu")
        set_model_state_dict(self.wrapped, tensors,
                             options=StateDictOptions(full_state_dict=True))

    def _bar(self):
        if not (self.progress_bar and self.processes.is_main):
            return None
        return tqdm(total=self.config.train.steps, initial=self.state.step, unit="step",
                    desc=self.config.run.name, dynamic_ncols=True, mininterval=1.0)

    def _log_train(self, window: _Window, bar) -> None:
        loss, rates = window.take()
        loss = dist_util.all_reduce_sums({"loss": loss}, self.processes)["loss"] \
            / self.processes.world_size
        # cpu_samples_per_s: this process's samples per second of its own CPU time (every
        # thread), which other jobs on the machine leave unchanged
        rates["cpu_samples_per_s"] /= self.processes.world_size
        self.log.event("train", self.state.step, loss=loss, lr=self.scheduler.get_last_lr()[0],
                       grad_norm=self._last_grad_norm, **rates)
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.4f}", in_tok_s=f"{rates['input_tokens_per_s']:,.0f}",
                            samples_s=f"{rates['samples_per_s']:,.1f}", refresh=False)


_EXTEND_NOTES = {
    "keep": "the schedule is unchanged; past its end the rate stays at its last value",
    "rewarm": "warm up again to optim.lr, then decay over the remaining steps",
    "stretch": "the schedule is laid out again over all train.steps",
}


def _check_finite(metrics: dict[str, float], split: str, where: str, hint: str) -> None:
    """RunError naming the first non-finite metric of an evaluation of ``split``: a model
    whose evaluation is NaN or infinite is never the best model nor a result."""
    found = non_finite(metrics)
    if found is not None:
        raise RunError(f"the {split} {found[0]} is {found[1]} {where}; {hint}")


def _metrics_text(metrics: dict[str, float]) -> str:
    """``loss 1.2345, bpc 1.7810``: an evaluation's metrics, for a terminal line."""
    return ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())


def _tensor_bytes(state: dict[str, torch.Tensor]) -> int:
    """The bytes of a state dict's tensors (what its safetensors file needs)."""
    return sum(t.numel() * t.element_size() for t in state.values()
               if isinstance(t, torch.Tensor))


def _saved_config(directory: Path) -> dict[str, Any]:
    """The train config a checkpoint was written with ({} if it has none)."""
    try:
        return json.loads((directory / ckpt.TRAIN_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


_LOCATION_KEYS = frozenset({"run.out_dir", "run.name"})
"""Where the run is: always the directory being trained (a move is reported on its own)."""


def _config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'key old -> new' for every config key whose value differs (but the run's
    location)."""
    if not old:
        return []
    before, after = _flatten(old), _flatten(new)
    return [f"{key} {before.get(key, '(unset)')!r} -> {after.get(key, '(unset)')!r}"
            for key in sorted((before.keys() | after.keys()) - _LOCATION_KEYS)
            if before.get(key) != after.get(key)]


class _Window:
    """Loss and throughput since the last log line."""

    def __init__(self) -> None:
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        self.losses: list[float] = []
        self.targets = self.inputs = self.samples = 0

    def add(self, loss: float, targets: int, inputs: int, samples: int) -> None:
        """One step's mean loss, counted targets, input tokens and samples (all ranks)."""
        self.losses.append(loss)
        self.targets += targets
        self.inputs += inputs
        self.samples += samples

    def take(self) -> tuple[float, dict[str, float]]:
        """(mean loss, rates) since the last take: ``input_tokens_per_s``,
        ``samples_per_s`` and ``targets_per_s`` by the wall clock, ``cpu_samples_per_s``
        by this process's CPU time (all ranks' samples); then starts a new window."""
        seconds = max(time.perf_counter() - self.start, 1e-9)
        cpu_seconds = max(time.process_time() - self.cpu_start, 1e-9)
        loss = sum(self.losses) / max(len(self.losses), 1)
        rates = {"input_tokens_per_s": self.inputs / seconds,
                 "samples_per_s": self.samples / seconds,
                 "targets_per_s": self.targets / seconds,
                 "cpu_samples_per_s": self.samples / cpu_seconds}
        self.__init__()
        return loss, rates


def train(config: TrainConfig, *, resume: bool = False, overwrite: bool = False,
          progress_bar: bool = True, allow_data_change: bool = False) -> dict[str, Any]:
    """Run ``config`` to the end and return its results (see :meth:`Trainer.fit`); prints
    the results table on rank 0.  ``allow_data_change``: resume even though the data's
    source changed since the run started (see :mod:`weirdnet.train.data_fingerprint`)."""
    with _disk_full_is_an_error(Path(config.run.out_dir) / config.run.name):
        trainer = Trainer(config, resume=resume, overwrite=overwrite,
                          progress_bar=progress_bar, allow_data_change=allow_data_change)
        try:
            summary = trainer.fit()
            if trainer.processes.is_main:
                print(results_table(summary), flush=True)
            return summary
        finally:
            trainer.close()
            dist_util.teardown(trainer.processes)


@contextmanager
def _disk_full_is_an_error(run_dir: Path) -> Iterator[None]:
    """A full disk anywhere in the run (the log, a run file) is a one-line
    :class:`~weirdnet.train.checkpoint.DiskFullError` naming what could not be written."""
    try:
        yield
    except OSError as error:
        if error.errno not in ckpt.DISK_FULL:
            raise
        raise ckpt.DiskFullError(Path(error.filename or run_dir / "log.jsonl")) from None


