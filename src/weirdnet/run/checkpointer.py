"""A training run's persistence, in the shape of torchtitan's checkpointer.

:class:`Run` holds what a run keeps in its directory ``RUN = out_dir/name`` and how it is
read back: :meth:`Run.save` checkpoints the model, optimizer, schedule, loss scaler,
random states and :class:`Progress` (``RUN/checkpoints/step-*``, the last
``train.keep_last`` kept: :mod:`weirdnet.run.checkpoint`); :meth:`Run.resume` restores
them bit for bit; :meth:`Run.track_best` and :meth:`Run.save_best` keep the best model
so far in ``RUN/best``; :meth:`Run.finish` writes ``RUN/results.json``;
:meth:`Run.interrupted` says, after a stop signal, what was kept.  The trainer calls it
and reads as a training loop.

Every method is called on every process of a torchrun job (the full state dicts are
gathered with a collective); only the main process writes.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from weirdnet.run import checkpoint as ckpt
from weirdnet.run import processes as procs
from weirdnet.run.files import write_atomic
from weirdnet.run.rundir import Claim
from weirdnet.run.safetensors_io import load_file
from weirdnet.run.signals import STOP, Interrupted, signal_name

__all__ = ["Progress", "Run", "config_changes", "saved_config"]

RESULTS = "results.json"


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


class Run:
    """The claimed run directory of one training run, and the states it saves: the model
    (``model``, trained as ``wrapped``), ``optimizer``, ``scheduler``, ``scaler`` and
    ``state``.  ``run_files``: the JSON documents written beside every saved model (the
    train config, the data's description), by file name; ``say``: a line for the user."""

    def __init__(self, claim: Claim, processes: procs.Processes, *, model: torch.nn.Module,
                 wrapped: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                 scaler, state: Progress, keep_last: int, run_files: dict[str, Any],
                 say: Callable[[str], None]):
        self.claim, self.dir, self.processes = claim, claim.run_dir, processes
        self.model, self.wrapped, self.optimizer = model, wrapped, optimizer
        self.scheduler, self.scaler, self.state = scheduler, scaler, state
        self.keep_last, self.run_files, self.say = keep_last, run_files, say
        self.last_step = state.step  # the step of the newest checkpoint
        self.best_lost = False  # a resumed run's best/ was damaged (see _check_best)
        self.resumed_from: str | None = None

    # -- saving --

    def _gather(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Full model and optimizer state dicts (a collective under DDP/FSDP)."""
        # deferred: torch.distributed.checkpoint takes about a second to import
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(self.wrapped, self.optimizer, options=options)

    def save(self) -> Path | None:
        """Checkpoint the current step (all ranks call it; rank 0 writes)."""
        model_state, optimizer_state = self._gather()
        rngs = procs.gather_objects(ckpt.capture_rng(), self.processes)
        trainer_state = {"progress": self.state.__dict__, "optimizer": optimizer_state,
                         "scheduler": self.scheduler.state_dict(),
                         "scaler": self.scaler.state_dict(), "rng": rngs,
                         "world_size": self.processes.world_size}
        path = None
        if self.processes.is_main:
            with STOP.shielded():  # a signal waits until the checkpoint is complete
                path = ckpt.save_checkpoint(
                    self.dir, self.state.step, lambda d: self._write_model(d, model_state),
                    trainer_state, self.keep_last, _tensor_bytes(model_state))
        self.last_step = self.state.step
        procs.barrier(self.processes)
        return path

    def _write_model(self, directory: Path, model_state: dict[str, torch.Tensor]) -> None:
        """The model and the files that describe its run (config, data info)."""
        self.model.save(directory, model_state)
        self.write_run_files(directory)

    def write_run_files(self, directory: Path) -> None:
        """The run's description files (:attr:`run_files`) into ``directory``."""
        for name, document in self.run_files.items():
            write_atomic(directory / name, json.dumps(document, indent=2) + "\n")

    def track_best(self, metrics: dict[str, float], name: str, lower: bool) -> bool:
        """Whether ``metrics[name]`` beats the best so far (``lower`` is better, or
        higher): the best value and step, and the count of evaluations without
        improvement (early stopping's patience), are kept in :class:`Progress`; a better
        model is then saved with :meth:`save_best`."""
        value, best = metrics[name], self.state.best_value
        better = best is None or (value < best if lower else value > best)
        if better:
            self.state.best_value, self.state.best_step = value, self.state.step
            self.state.evals_without_improvement = 0
        else:
            self.state.evals_without_improvement += 1
        return better

    def save_best(self, metrics: dict[str, float]) -> None:
        """The model becomes ``RUN/best``, with its ``metrics`` (all ranks call it)."""
        model_state, _ = self._gather()
        if self.processes.is_main:
            def write(directory: Path) -> None:
                self._write_model(directory, model_state)
                document = {"step": self.state.step, "metrics": metrics}
                write_atomic(directory / "metrics.json", json.dumps(document, indent=2) + "\n")

            with STOP.shielded():
                best = ckpt.save_directory(self.dir / "best", write,
                                           needed=_tensor_bytes(model_state))
            ckpt.verify_directory(best)  # read back: what was written is what is kept
        procs.barrier(self.processes)

    def load_best(self) -> None:
        """Put the weights of ``RUN/best`` into the model (every rank)."""
        # deferred: torch.distributed.checkpoint takes about a second to import
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        ckpt.verify_directory(self.dir / "best")  # damaged since it was written: an error
        tensors, _ = load_file(self.dir / "best" / ckpt.WEIGHTS_FILE, "cpu")
        set_model_state_dict(self.wrapped, tensors,
                             options=StateDictOptions(full_state_dict=True))

    def finish(self, summary: dict[str, Any]) -> None:
        """Write the run's results (``RUN/results.json``; the main process)."""
        if self.processes.is_main:
            with STOP.shielded():
                write_atomic(self.dir / RESULTS, json.dumps(summary, indent=2) + "\n")

    def completed(self, steps: int) -> dict[str, Any] | None:
        """The stored results of a run that has already done all its ``steps`` (nothing
        is trained or rewritten), else None."""
        results = self.dir / RESULTS
        finished = self.state.step >= steps or self.state.stopped_early
        if not finished or self.state.eval_pending or self.best_lost \
                or not results.is_file():
            return None
        try:
            summary = json.loads(results.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if summary.get("steps") != self.state.step:
            return None
        self.say(f"{self.dir} has done all train.steps={steps} and has its results; "
                 "nothing to do (train longer with --set train.steps=N)")
        return summary

    # -- resuming --

    def open(self, resume: bool, seed: int) -> dict[str, Any] | None:
        """Start using the claimed directory: report repairs and a moved run; with
        ``resume``, load the newest intact checkpoint (see :meth:`resume`) and return the
        train config it was written with (None: nothing to resume)."""
        for note in self.claim.cleaned:
            self.say(f"{note} (left by an earlier process that was killed)")
        if resume:
            self._note_moved()
        procs.barrier(self.processes)
        return self.resume(seed) if resume else None

    def resume(self, seed: int) -> dict[str, Any] | None:
        """Load the newest intact checkpoint (model, optimizer, schedule, loss scaler,
        random states, :class:`Progress`) and say what was resumed; the train config it was
        written with (:func:`config_changes` says what changed since), or None if there is
        none.  Random
        states saved by another number of processes are seeded anew from ``seed``."""
        found = ckpt.load_latest(self.dir)
        if found is None:
            self.say(f"{self.dir} has no checkpoint yet; starting from step 0")
            return None
        directory, model_state, trainer_state = found
        # deferred: torch.distributed.checkpoint takes about a second to import
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        ckpt.check_state_fits(self.model, model_state, directory)
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
        saved = saved_config(directory)
        self.state.__dict__.update(Progress(**trainer_state["progress"]).__dict__)
        self.last_step, self.resumed_from = self.state.step, str(directory)
        self.say(f"resuming {self.dir} from step {self.state.step} ({directory.name})")
        self._check_best()
        rngs, rank = trainer_state["rng"], self.processes.rank
        if len(rngs) == self.processes.world_size:
            ckpt.restore_rng(rngs[rank])
        else:
            ckpt.seed_everything(seed + 1000 * rank + self.state.step + 1)
        return saved

    def _check_best(self) -> None:
        """A resumed run's ``best/`` is verified: when it is damaged, one line says so and
        the best so far is forgotten, so the next evaluation writes a new ``best/``."""
        best = self.dir / "best"
        if not best.is_dir():
            return
        try:
            ckpt.verify_directory(best)
        except ckpt.CheckpointError as error:
            step = self.state.best_step
            self.say(f"{best} is damaged ({error}); the best model so far"
                     f"{f' (step {step})' if step is not None else ''} is lost: the next "
                     "evaluation's model becomes best/")
            self.state.best_value = self.state.best_step = None
            self.state.evals_without_improvement = 0
            self.best_lost = True

    def _note_moved(self) -> None:
        """One line when the run's stored ``run.out_dir``/``run.name`` name another place
        than where it is (a copied, moved or renamed run): it is trained where it is."""
        stored = saved_config(self.dir).get("run")
        if not isinstance(stored, dict):
            return
        name, out_dir = stored.get("name"), stored.get("out_dir")
        if not (isinstance(name, str) and isinstance(out_dir, str)):
            return
        here = self.run_files[ckpt.TRAIN_CONFIG]["run"]
        if name == here["name"] and Path(out_dir).resolve() == Path(here["out_dir"]).resolve():
            return
        self.say(f"{self.dir}'s train_config.json names run.out_dir={out_dir!r}, "
                 f"run.name={name!r}, i.e. {Path(out_dir) / name} from here (a copied, "
                 f"moved or renamed run, or another working directory); training "
                 f"{self.dir} itself, as run.out_dir={here['out_dir']!r}, "
                 f"run.name={here['name']!r}")

    # -- stopping --

    def interrupted(self, stop: BaseException, phase: str) -> Interrupted:
        """Save what can be saved after a stop signal that came in ``phase`` (start,
        step, boundary, eval or final); the :class:`Interrupted` whose one-line message
        says what was kept and how to continue."""
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        name, step = signal_name(signum), self.state.step
        again = f"continue with: weirdnet train {self.dir}"
        consistent = phase in ("boundary", "eval")  # not in the middle of a step
        if phase == "final":
            return Interrupted(signum, f"{name} during the final evaluation; the model is "
                               f"trained and saved (step {step}); finish with: weirdnet "
                               f"train {self.dir}")
        if consistent and step > self.last_step and not (
                self.processes.distributed and not getattr(stop, "at_safe_point", False)):
            self.state.eval_pending = phase == "eval"
            path = self.save()
            where = " during the evaluation (redone on resume)" if phase == "eval" else ""
            return Interrupted(signum, f"{name} at step {step}{where}; saved {path}; {again}")
        last = ckpt.list_checkpoints(self.dir)
        if consistent and last and step == self.last_step:
            return Interrupted(signum, f"{name} at step {step}; its checkpoint {last[-1]} is "
                               f"intact; {again}")
        if last:
            return Interrupted(signum, f"{name} during step {step + 1} (a second signal stops "
                               f"at once); the last checkpoint, {last[-1].name}, is intact; "
                               f"{again}")
        return Interrupted(signum, f"{name} during step {step + 1}, before any checkpoint; "
                           f"nothing was saved (start again with --overwrite)")

    def abandon(self) -> None:
        """Undo the claim of a run that could not start (see :meth:`Claim.abandon`)."""
        self.claim.abandon()

    def close(self) -> None:
        """Release the run directory's lock."""
        self.claim.release()


def saved_config(directory: Path) -> dict[str, Any]:
    """The train config a checkpoint (or run) was written with ({} if it has none)."""
    try:
        return json.loads((directory / ckpt.TRAIN_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _tensor_bytes(state: dict[str, torch.Tensor]) -> int:
    """The bytes of a state dict's tensors (what its safetensors file needs)."""
    return sum(t.numel() * t.element_size() for t in state.values()
               if isinstance(t, torch.Tensor))


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


def config_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'key old -> new' for every config key whose value differs (but the run's
    location)."""
    if not old:
        return []
    before, after = _flatten(old), _flatten(new)
    return [f"{key} {before.get(key, '(unset)')!r} -> {after.get(key, '(unset)')!r}"
            for key in sorted((before.keys() | after.keys()) - _LOCATION_KEYS)
            if before.get(key) != after.get(key)]
