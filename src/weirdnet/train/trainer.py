"""The training loop behind ``weirdnet train`` (one process or a torchrun job).

:func:`train` builds everything from a :class:`~weirdnet.train.config.TrainConfig`
(datasets, model, optimizer, schedule), runs the optimizer steps with gradient
accumulation, clipping and autocast, evaluates every ``eval_every`` steps (or on the
doubling grid of ``eval_spacing``), then evaluates the best model on the evaluation and
test splits and prints a results table.  What the run keeps (checkpoints, ``RUN/best``,
the results) and how it resumes: :class:`weirdnet.run.checkpointer.Run`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from weirdnet.config.typed import ConfigError
from weirdnet.run import checkpoint as ckpt
from weirdnet.run import processes as procs
from weirdnet.run.checkpointer import Progress, Run, config_changes
from weirdnet.run.faults import fault_point
from weirdnet.run.rundir import RunDirError, check_run_dir, claim_run_dir
from weirdnet.run.runlog import RunLog, Window, results_table, scope_text
from weirdnet.run.signals import STOP, Interrupted
from weirdnet.train import context_parallel, data_fingerprint, tasks
from weirdnet.train import distributed as dist_util
from weirdnet.train.config import TrainConfig, eval_due
from weirdnet.train.evaluation import (
    check_finite,
    evaluate,
    metrics_text,
    non_finite_hint,
    scope,
)
from weirdnet.train.loading import ResumableSampler, micro_batches
from weirdnet.train.schedule import continue_schedule, phased_multiplier
from weirdnet.train.setup import (
    RunError,
    autocast_dtype,
    build_model,
    check_fits_data,
    enable_activation_checkpointing,
    load_datasets,
    make_deterministic,
    make_optimizer,
    micro_batch_size,
)
from weirdnet.train.weights import load_initial_weights

__all__ = ["Progress", "RunError", "evaluate", "train"]


class Trainer:
    """One run: call :meth:`fit`.  Attributes are built once in ``__init__``."""

    def __init__(self, config: TrainConfig, *, resume: bool = False, overwrite: bool = False,
                 progress_bar: bool = True, allow_data_change: bool = False):
        self.config = config
        self.allow_data_change = allow_data_change
        self.progress_bar = progress_bar
        self.bar = None  # the training progress bar while it is shown (see _say)
        self.processes = procs.setup(config.run.device)
        # Everything is checked before the run directory is created or changed: a run that
        # cannot start leaves nothing behind (and an existing run stays as it was).
        try:
            check_run_dir(config.run.out_dir, config.run.name, resume=resume,
                          overwrite=overwrite, is_main=self.processes.is_main)
        except RunDirError as error:
            raise RunError(str(error)) from None
        self._build(resume)
        try:
            claim = claim_run_dir(config.run.out_dir, config.run.name, resume=resume,
                                  overwrite=overwrite, is_main=self.processes.is_main)
        except RunDirError as error:
            raise RunError(str(error)) from None
        self.run_dir = claim.run_dir
        self.run = Run(claim, self.processes, model=self.model, wrapped=self.wrapped,
                       optimizer=self.optimizer, scheduler=self.scheduler, scaler=self.scaler,
                       state=self.state, keep_last=config.train.keep_last, say=self._say,
                       run_files={ckpt.TRAIN_CONFIG: config.to_dict(),
                                  ckpt.DATA_INFO: dataclasses.asdict(self.info)})
        try:
            self._open(resume)
        except BaseException:
            self.run.abandon()
            raise

    def _build(self, resume: bool) -> None:
        """Data, model (from ``train.init_from`` if set), optimizer and schedule, and the
        checks that need them; nothing is written."""
        config = self.config
        if config.run.deterministic:
            make_deterministic()
        ckpt.seed_everything(config.run.seed)  # the same initial model on every rank
        self.splits = load_datasets(config)
        run_dir = Path(config.run.out_dir) / config.run.name
        resumed = resume and bool(ckpt.list_checkpoints(run_dir))  # it has a checkpoint
        self.data_fingerprint, self.data_note = data_fingerprint.check_source(
            config.data, run_dir, resumed, self.allow_data_change)
        self.info = self.splits["train"].info
        self.task = self.info.task
        if self.task not in tasks.TASKS:
            raise RunError(f"dataset {config.data.dataset!r} has task {self.task!r}, which "
                           "the trainer does not know")
        self.model = build_model(config, self.info)
        self.initialised_from = None  # train.init_from, unless resumed from a checkpoint
        if config.train.init_from and not resumed:
            model_dir = load_initial_weights(self.model, Path(config.train.init_from))
            self._say(f"starting from the weights of {model_dir} (train.init_from)")
            self.initialised_from = str(model_dir)
        self.model.to(self.processes.device)
        self.shards = context_parallel.setup(
            config.train.context_parallel, self.processes, self.task,
            self.info.max_len - 1 if self.info.max_len else config.train.context_parallel,
            self.model)
        enable_activation_checkpointing(self.model, config.train.activation_checkpointing,
                                        config.train.activation_checkpointing_k,
                                        config.train.ffn_chunk)
        check_fits_data(config, self.model, self.splits, self.info)
        self.parameters = self.model.num_parameters()
        self.micro_batch = micro_batch_size(config.train, self._data_processes.world_size)
        self.amp_dtype = autocast_dtype(config.train.precision, self.processes.device)
        self.wrapped = dist_util.wrap(self.model, self.processes, config.train.distributed,
                                      self.parameters)
        # what the training step calls: the wrapped model, compiled if train.compile
        self.step_module = torch.compile(self.wrapped) if config.train.compile else self.wrapped
        self.optimizer = make_optimizer(self.model, config)
        self.state = Progress(schedule_phases=[[0, config.train.steps]])
        sched = config.schedule
        self._lr_factor = phased_multiplier(sched.name, sched.warmup_steps,
                                            self.state.schedule_phases, sched.min_lr_ratio)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: self._lr_factor(step))
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.sampler = ResumableSampler(self.splits["train"], self._data_processes,
                                        config.run.seed, config.train.batch_size)
        if self.sampler.steps_per_epoch == 0:
            raise RunError(f"the train split has {len(self.splits['train'])} items, fewer than "
                           f"one batch of train.batch_size={config.train.batch_size}")

    def _open(self, resume: bool) -> None:
        """Start using the claimed run directory (:meth:`Run.open`: repairs, a moved run,
        the checkpoint to resume from), continue the schedule, open the log."""
        config = self.config
        saved = self.run.open(resume, config.run.seed)
        self.resumed_from = self.run.resumed_from
        if saved is not None:
            self._continue(saved)
        # dropout etc. differ between ranks; a resumed run restored its own states above
        if self.resumed_from is None:
            ckpt.seed_everything(config.run.seed + 1000 * self.processes.rank + 1)
        self.log = RunLog(self.run_dir, enabled=self.processes.is_main,
                          tensorboard=config.run.tensorboard)
        self.phase = "start"  # what the run is doing: start|step|boundary|eval|final

    def _continue(self, saved: dict[str, Any]) -> None:
        """A resumed run: check ``train.steps`` against the steps done, report changed
        config keys, and lay the schedule out again as ``schedule.extend`` says."""
        done, steps = self.state.step, self.config.train.steps
        if steps < done:
            raise RunError(f"train.steps={steps} is fewer than the {done} steps {self.run_dir} "
                           f"has done; evaluate it with `weirdnet eval {self.run_dir}`, or "
                           f"train longer with --set train.steps=N (N > {done})")
        changes = config_changes(saved, json.loads(json.dumps(self.config.to_dict())))
        if changes:
            self._say("config changed since the checkpoint: " + "; ".join(changes))
        phases = self.state.schedule_phases or [[0, saved.get("train", {}).get("steps", steps)]]
        self.state.schedule_phases, self._lr_factor, note = continue_schedule(
            self.config.schedule, phases, done, steps, self.optimizer, self.scheduler)
        if note is not None:
            self._say(note)

    def _say(self, message: str) -> None:
        """One line for the user on stderr (main process only), above the progress bar
        when one is shown."""
        if not self.processes.is_main:
            return
        if self.bar is not None:
            self.bar.write(f"weirdnet train: {message}", file=sys.stderr)
        else:
            print(f"weirdnet train: {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Release the run directory's lock and close the log."""
        log = getattr(self, "log", None)
        if log is not None:
            log.close()
        self.run.close()

    @property
    def _data_processes(self) -> procs.Processes:
        """The processes that read different items: all of them, or with
        ``train.context_parallel`` the data-parallel places (a context-parallel group
        reads the same items)."""
        return self.processes if self.shards is None else self.shards.data

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

    def scope(self, split: str, max_batches: int) -> dict[str, int]:
        """What :meth:`evaluate` reads of ``split`` with ``max_batches`` (see
        :func:`weirdnet.train.evaluation.scope`)."""
        return scope(len(self.splits[split]), max_batches, self.config.train.batch_size)

    # -- training --

    def _autocast(self):
        device_type = self.processes.device.type
        return torch.autocast(device_type, dtype=self.amp_dtype or torch.float32,
                              enabled=self.amp_dtype is not None)

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

    def _evaluate_and_track(self) -> bool:
        """Periodic evaluation (``train.eval_batches``: log.jsonl and a line on the
        terminal); a better model becomes ``best/``; returns True when early stopping
        says stop.  A non-finite metric is a :class:`RunError`: never the best model."""
        step, batches = self.state.step, self.config.train.eval_batches
        metrics = self.evaluate("eval", batches, f"eval at step {step}")
        scope = self.scope("eval", batches)
        self.log.event("eval", step, split="val", metrics=metrics, scope="periodic",
                       **scope)
        check_finite(metrics, "val", f"at the evaluation of step {step}",
                     non_finite_hint(self.model))
        name, lower = tasks.best_metric(self.task, self.config.train.best_metric)
        if name not in metrics:
            raise ConfigError(f"train.best_metric={name!r} is not among the metrics "
                              f"{sorted(metrics)}")
        improved = self.run.track_best(metrics, name, lower)
        self._say(f"step {step}: val {metrics_text(metrics)} (periodic validation on "
                  f"{scope_text(scope, 'val')}{'; new best' if improved else ''})")
        if improved:
            self.run.save_best(metrics)
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
        safe point with a checkpoint: :class:`~weirdnet.run.signals.Interrupted` says what
        was kept."""
        complete = self.run.completed(self.config.train.steps)
        if complete is not None:
            self.log.close()
            return complete
        notice = ("weirdnet train: {signal} received: stopping after the current step "
                  "(or evaluation batch), with a checkpoint; a second {signal} stops at "
                  "once") if self.processes.is_main else None
        with STOP.deferred(notice):
            try:
                return self._fit()
            except (Interrupted, KeyboardInterrupt) as stop:
                interrupted = self.run.interrupted(stop, self.phase)
                interrupted.quiet = not self.processes.is_main
                raise interrupted from None

    def _fit(self) -> dict[str, Any]:
        cfg = self.config.train
        self.log.event("start", self.state.step, run=self.config.run.name, task=self.task,
                       world_size=self.processes.world_size, parameters=self.parameters,
                       resumed_from=self.resumed_from, initialised_from=self.initialised_from,
                       config=self.config.to_dict())
        if self.processes.is_main:
            self.run.write_run_files(self.run_dir)
            data_fingerprint.write_record(self.run_dir, self.data_fingerprint)
        if self.data_note is not None:
            self._say(self.data_note)
        stopped_early = self.state.stopped_early
        if self.state.eval_pending:  # interrupted during the evaluation at this step
            self.phase = "eval"
            stopped_early = self._evaluate_and_track()
            self.state.eval_pending = False
        stream = micro_batches(self.splits["train"], self.sampler, self.state, self.micro_batch,
                               self.info.pad_id, cfg.num_workers,
                               self.processes.device.type == "cuda",
                               self.config.data.pad_multiple, self.info.max_len)
        bar = self.bar = self._bar()
        window = Window()
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
                    self.run.save()
                if procs.any_rank(STOP.requested, self.processes):
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
        if self.state.step > self.run.last_step:
            self.run.save()
        if self.state.best_step is None or not self.config.train.eval_every:
            self._evaluate_and_track()  # no periodic evaluation ran: the last model is best
        self.run.load_best()
        limit = self.config.train.final_eval_batches
        splits = {"val": "eval", **({"test": "test"} if "test" in self.splits else {})}
        results = {name: self.evaluate(split, limit, f"final eval ({name})")
                   for name, split in splits.items()}
        final = {name: self.scope(split, limit) for name, split in splits.items()}
        evaluated = {name: read["items"] for name, read in final.items()}
        scope = {"batch_size": self.config.train.batch_size, "final": final,
                 "periodic": {"val": self.scope("eval", self.config.train.eval_batches)}}
        for split, metrics in results.items():
            check_finite(metrics, split, f"in the final evaluation of best/ (step "
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
        self.run.finish(summary)
        self.log.close()
        return summary

    def _bar(self):
        if not (self.progress_bar and self.processes.is_main):
            return None
        return tqdm(total=self.config.train.steps, initial=self.state.step, unit="step",
                    desc=self.config.run.name, dynamic_ncols=True, mininterval=1.0)

    def _log_train(self, window: Window, bar) -> None:
        loss, rates = window.take()
        loss = procs.all_reduce_sums({"loss": loss}, self.processes)["loss"] \
            / self.processes.world_size
        # cpu_samples_per_s: this process's samples per second of its own CPU time (every
        # thread), which other jobs on the machine leave unchanged
        rates["cpu_samples_per_s"] /= self.processes.world_size
        self.log.event("train", self.state.step, loss=loss, lr=self.scheduler.get_last_lr()[0],
                       grad_norm=self._last_grad_norm, **rates)
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.4f}", in_tok_s=f"{rates['input_tokens_per_s']:,.0f}",
                            samples_s=f"{rates['samples_per_s']:,.1f}", refresh=False)


def train(config: TrainConfig, *, resume: bool = False, overwrite: bool = False,
          progress_bar: bool = True, allow_data_change: bool = False) -> dict[str, Any]:
    """Run ``config`` to the end and return its results (see :meth:`Trainer.fit`); prints
    the results table on rank 0.  ``allow_data_change``: resume even though the data's
    source changed since the run started (see :mod:`weirdnet.train.data_fingerprint`)."""
    with ckpt.disk_full_is_an_error(Path(config.run.out_dir) / config.run.name):
        trainer = Trainer(config, resume=resume, overwrite=overwrite,
                          progress_bar=progress_bar, allow_data_change=allow_data_change)
        try:
            summary = trainer.fit()
            if trainer.processes.is_main:
                print(results_table(summary), flush=True)
            return summary
        finally:
            trainer.close()
            procs.teardown(trainer.processes)
