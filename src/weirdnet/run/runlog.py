"""A run's record: ``RUN/log.jsonl`` (one JSON event a line), optional TensorBoard, and
the results table printed at the end of every run.

Events (every one has ``event``, ``step`` (optimizer steps done) and ``time`` (Unix s)):

- ``start``: run, task, world_size, parameters, resumed_from, config;
- ``train``: loss (mean over the steps since the last line), lr, grad_norm, and the
  throughput since the last line: input_tokens_per_s (the non-padding positions the
  model reads, see :meth:`weirdnet.train.tasks.Task.input_tokens`), samples_per_s,
  targets_per_s (the positions the loss counts: one a sample for a classifier) and
  cpu_samples_per_s (by this process's CPU time).  Logs written before these names have
  ``tokens_per_s``, which counted targets (:func:`weirdnet.train.plot.read_log` reads it
  as targets_per_s);
- ``eval``: split, metrics (e.g. loss, accuracy or bpc, perplexity), and what was read:
  scope "periodic", items (the first ``train.eval_batches`` x ``train.batch_size`` of
  the split), batches (of ``train.batch_size``), split_items (the whole split).  This is
  the periodic validation, also printed on the terminal; it picks ``best/``;
- ``end``: results ({"val": metrics, "test": metrics}) of ``best/`` on the first
  ``train.final_eval_batches`` batches of each split (0: the whole split), best_step, and
  scope ({"val": {items, batches, split_items}, ...}).  A periodic ``eval`` of the same
  step read fewer items, so its numbers differ from these.

A resumed run appends to the same file, starting on a fresh line when the last one was
torn (a killed writer, a full disk), so its first event is never glued to a broken line;
readers keep the last event of each (event, split, step) (see
:func:`weirdnet.train.plot.read_log`).  The file is never opened through a symlink.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["RunLog", "results_table"]


class RunLog:
    """Appends events to ``run_dir/log.jsonl`` (flushed per line) when ``enabled``."""

    def __init__(self, run_dir: Path, enabled: bool = True, tensorboard: bool = False):
        self.enabled = enabled
        self.handle = None
        self.writer = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self.handle = open_log(run_dir / "log.jsonl")
        if tensorboard:
            try:  # tensorboard is optional: imported only when the config asks for it
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:
                raise ImportError("run.tensorboard = true needs the tensorboard package: pip "
                                  "install tensorboard") from error
            self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def event(self, kind: str, step: int, **fields: Any) -> None:
        """Write one event (and its scalars to TensorBoard)."""
        if not self.enabled:
            return
        record = {"event": kind, "step": step, "time": time.time(), **fields}
        self.handle.write(json.dumps(record) + "\n")
        self.handle.flush()
        if self.writer is not None:
            self._tensorboard(kind, step, fields)

    def _tensorboard(self, kind: str, step: int, fields: dict[str, Any]) -> None:
        if kind == "train":
            for key in ("loss", "lr", "grad_norm", "input_tokens_per_s", "samples_per_s"):
                self.writer.add_scalar(f"train/{key}", fields[key], step)
        elif kind == "eval":
            for key, value in fields["metrics"].items():
                self.writer.add_scalar(f"{fields['split']}/{key}", value, step)

    def close(self) -> None:
        """Close the log file and the TensorBoard writer."""
        if self.handle is not None:
            self.handle.close()
        if self.writer is not None:
            self.writer.close()


def open_log(path: Path):
    """``path`` opened for appending text (made if missing, never through a symlink),
    positioned on a fresh line: a torn last line gets its line end first."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                 0o666)
    size = os.fstat(fd).st_size
    torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
    handle = os.fdopen(fd, "a", encoding="utf-8")
    if torn:
        handle.write("\n")
        handle.flush()
    return handle


def scope_text(scope: dict[str, int], split: str) -> str:
    """What an evaluation of ``split`` read: ``the first 16 of 3,184 val items (2
    batches)`` or ``all 3,184 val items (398 batches)``; ``scope`` has items, batches
    and split_items."""
    batches = f"{scope['batches']:,} batch{'es' if scope['batches'] != 1 else ''}"
    if scope["items"] >= scope["split_items"]:
        return f"all {scope['split_items']:,} {split} items ({batches})"
    return f"the first {scope['items']:,} of {scope['split_items']:,} {split} items ({batches})"


def _scope_lines(scope: dict[str, Any]) -> list[str]:
    """The lines under the results table that say what its numbers and the periodic
    validation (log.jsonl, the terminal) each read."""
    final = "; ".join(scope_text(part, split) for split, part in scope["final"].items())
    lines = [f"these results: best/ on {final}; batches of {scope['batch_size']:,}"]
    periodic = scope.get("periodic", {}).get("val")
    if periodic is not None:
        differ = "; so its numbers differ" if periodic != scope["final"]["val"] else ""
        lines.append("the periodic validation (log.jsonl, the terminal): "
                     f"{scope_text(periodic, 'val')}{differ}")
    return lines


_ORDER = ("loss", "bpc", "perplexity", "accuracy", "token_accuracy", "exact_match")


def _format(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"


def results_table(summary: dict[str, Any]) -> str:
    """The end-of-run table: one row per metric, one column per split, then where the
    run's files are."""
    results = summary["results"]
    splits = list(results)
    names = [m for m in _ORDER if any(m in results[s] for s in splits)]
    names += sorted({m for s in splits for m in results[s]} - set(names))
    header = f"| metric | {' | '.join(splits)} |"
    if "model_dir" in summary:  # weirdnet eval
        title = (f"\nEvaluation of {summary['model_dir']} (step {summary['best_step']}; "
                 f"{summary['task']} on {summary['dataset']}, "
                 f"{summary['parameters']:,} parameters)")
    else:
        title = (f"\nResults of {summary['run']} ({summary['task']} on {summary['dataset']}, "
                 f"best model from step {summary['best_step']} of {summary['steps']}"
                 f"{', stopped early' if summary.get('stopped_early') else ''}, "
                 f"{summary['parameters']:,} parameters)")
    lines = [title, "", header, "|" + "---|" * (len(splits) + 1)]
    for name in names:
        cells = [_format(results[s][name]) if name in results[s] else "" for s in splits]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    if "model_dir" in summary:
        return "\n".join(lines)
    run_dir = summary["run_dir"]
    if "scope" in summary:  # runs of older versions have no scope
        lines += ["", *_scope_lines(summary["scope"])]
    lines += ["", f"run directory: {run_dir}  (log.jsonl, results.json, best/, checkpoints/)",
              f"next: weirdnet eval {run_dir} | weirdnet plot {run_dir}"]
    if summary["task"] == "lm":
        lines[-1] += f" | weirdnet generate {run_dir} --prompt \"...\""
    return "\n".join(lines)


class Window:
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
