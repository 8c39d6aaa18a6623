"""Training checkpoints: written atomically, the last N kept, verified when read.

A checkpoint is a directory ``RUN/checkpoints/step-00001200/``:

- ``config.json`` + ``model.safetensors``: the model, as ``model.save`` writes it (so
  ``weirdnet eval``/``generate`` and ``weirdnet.models.load`` take it directly);
- ``trainer.pt``: optimizer, scheduler, loss-scaler and RNG states, data position, best
  metric so far (``torch.load(weights_only=True)``: no pickled code);
- ``train_config.json``, ``data_info.json``: the run's configuration and what the model
  needs to know of its data (vocabulary, text encoding, special ids);
- ``manifest.json``: the SHA-256 of every other file, written last.

It is written into a temporary directory of weirdnet's own (:mod:`weirdnet.run.files`) which
is renamed into place, so a crash leaves either no checkpoint or a complete one (the
leftovers of a killed writer are removed, or put back, when the run is next opened:
:func:`weirdnet.run.rundir.clean_stale`).  :func:`load_latest` verifies the manifest; a
damaged checkpoint is reported and the one before it is used.
``RUN/best/`` (the best model so far) is replaced the same way.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import random
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from weirdnet.run.faults import fault_point
from weirdnet.run.files import (
    TEMP_MARKER,
    discard,
    make_temp,
    mark_temp,
    remove_temp,
    unmark_temp,
    write_atomic,
)
from weirdnet.run.safetensors_io import load_file
from weirdnet.run.warnings import WeirdnetWarning, warn

__all__ = ["DISK_FULL", "WEIGHTS_FILE", "CheckpointError", "DamagedCheckpointWarning",
           "DiskFullError", "capture_rng", "check_state_fits", "disk_full_is_an_error",
           "list_checkpoints", "load_latest", "read_checkpoint", "restore_rng",
           "save_checkpoint", "save_directory", "seed_everything"]

_STEP_DIR = re.compile(r"^step-(\d+)$")
WEIGHTS_FILE = "model.safetensors"
"""A saved model's weights (beside its ``config.json``: :mod:`weirdnet.models.base`)."""
MANIFEST, TRAINER_STATE = "manifest.json", "trainer.pt"
TRAIN_CONFIG, DATA_INFO = "train_config.json", "data_info.json"


class CheckpointError(ValueError):
    """A saved model that is missing, corrupted or does not match its class or config."""


class DamagedCheckpointWarning(WeirdnetWarning):
    """A damaged checkpoint was skipped (printed as one line: see :mod:`weirdnet.run.warnings`)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_directory(target: Path, write_files: Callable[[Path], None],
                   needed: int | None = None) -> Path:
    """Write a directory atomically: ``write_files(tmp)`` fills a temporary sibling of
    weirdnet's own (:mod:`weirdnet.run.files`), a manifest of checksums is added, then it
    replaces ``target`` (the old one is renamed to an ``old`` temporary first, and put
    back if the new one cannot take its place).  A full disk is a :class:`DiskFullError`
    naming the folder and ``needed`` (bytes; default: what was written when it filled)."""
    target = Path(target)
    tmp = make_temp(target.parent, target.name)
    old = None
    try:
        write_files(tmp)
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir())
                 if p.is_file() and p.name != TEMP_MARKER}
        write_atomic(tmp / MANIFEST, json.dumps({"files": files}, indent=1) + "\n")
        fault_point("checkpoint-write")
        if target.is_dir() and not target.is_symlink():
            old = mark_temp(target, "old")
            target.rename(old)
            fault_point("checkpoint-rename")
        tmp.rename(target)
        unmark_temp(target)
    except BaseException as error:
        written = _tree_bytes(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not os.path.lexists(target):
            old.rename(target)  # the new one never took its place: the old one stays
            unmark_temp(target)
        if isinstance(error, OSError) and error.errno in DISK_FULL:
            raise DiskFullError(target, needed or written) from None
        raise
    if old is not None:
        remove_temp(old)
    return target


DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
"""The ``errno`` values of a full disk (or a full quota)."""


class DiskFullError(CheckpointError):
    """No space was left on the device for ``target`` (a checkpoint, ``best/``, a run
    file): nothing of it was kept, and what was there before stays as it was."""

    def __init__(self, target: Path, needed: int | None = None):
        target = Path(target)
        free = shutil.disk_usage(target.parent).free if target.parent.is_dir() else 0
        need = f"it needs about {_size(needed)}, " if needed else ""
        super().__init__(f"no space left on the device of {target.parent} for "
                         f"{target.name}: {need}{_size(free)} are free; free some space "
                         "(what was written before is intact) and run the same command "
                         "again")


def _size(count: int) -> str:
    """'1.3 MB' (decimal units)."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"  # pragma: no cover - unreachable


def _tree_bytes(folder: Path) -> int:
    """The bytes of the plain files below ``folder`` (0 if it is gone)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*")
               if p.is_file() and not p.is_symlink()) if Path(folder).is_dir() else 0


def verify_directory(directory: Path) -> None:
    """Raise :class:`CheckpointError` unless every file of the manifest is intact."""
    manifest = directory / MANIFEST
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{manifest} is missing or unreadable ({error})") from None
    for name, expected in files.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path} is missing")
        if _sha256(path) != expected:
            raise CheckpointError(f"{path} is corrupted (its SHA-256 differs from the "
                                  "manifest's)")


def save_checkpoint(run_dir: Path, step: int, write_model: Callable[[Path], None],
                    trainer_state: dict[str, Any], keep_last: int,
                    model_bytes: int = 0) -> Path:
    """Write ``RUN/checkpoints/step-<step>`` (``write_model(dir)`` writes the model, of
    about ``model_bytes``, and the run's description files) and delete all but the newest
    ``keep_last``, each renamed to a temporary first (:func:`weirdnet.run.files.discard`)."""
    buffer = io.BytesIO()
    torch.save(trainer_state, buffer)
    state = buffer.getvalue()

    def write_files(tmp: Path) -> None:
        write_model(tmp)
        write_atomic(tmp / TRAINER_STATE, state)

    path = save_directory(Path(run_dir) / "checkpoints" / f"step-{step:08d}", write_files,
                          needed=model_bytes + len(state) if model_bytes else None)
    for old in list_checkpoints(run_dir)[:-keep_last]:
        discard(old)
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoint directories, oldest first (real folders only: a symlink
    named like one is never read or deleted)."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir() or folder.is_symlink():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if p.is_dir() and not p.is_symlink() and (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


_STATE_KEYS = ("progress", "optimizer", "scheduler", "scaler", "rng")


def read_checkpoint(directory: Path, map_location: str | torch.device = "cpu"
                    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(model state dict, trainer state) of a verified checkpoint directory.  A file that
    its checksum passes but that cannot be read (a garbage or malicious pickle, which
    ``weights_only`` refuses; a state without the trainer's keys) is a
    :class:`CheckpointError` naming it, like any other damage."""
    verify_directory(directory)
    try:
        tensors, _ = load_file(directory / WEIGHTS_FILE, map_location)
    except (ValueError, RuntimeError, OSError) as error:
        raise CheckpointError(f"{directory} cannot be read: {error}") from None
    path = directory / TRAINER_STATE
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unpickling failure is damage
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise CheckpointError(f"{path} cannot be read ({type(error).__name__}: "
                              f"{reason})") from None
    if not (isinstance(state, dict) and all(key in state for key in _STATE_KEYS)):
        raise CheckpointError(f"{path} is not a trainer state (expected a dict with "
                              f"{', '.join(_STATE_KEYS)})")
    return tensors, state


def load_latest(run_dir: Path, map_location: str | torch.device = "cpu"
                ) -> tuple[Path, dict[str, torch.Tensor], dict[str, Any]] | None:
    """The newest intact checkpoint of the run: (directory, model state, trainer state),
    or None if there is none.  Damaged ones are reported (a one-line
    :class:`DamagedCheckpointWarning`) and skipped."""
    checkpoints = list_checkpoints(run_dir)
    problems = []
    for directory in reversed(checkpoints):
        try:
            tensors, state = read_checkpoint(directory, map_location)
        except CheckpointError as error:
            problems.append(str(error))
            warn(f"weirdnet: checkpoint {directory.name} is damaged and is skipped: {error}",
                 DamagedCheckpointWarning)
            continue
        return directory, tensors, state
    if problems:
        raise CheckpointError(f"every checkpoint of {run_dir} is damaged: "
                              + "; ".join(problems))
    return None


def capture_rng() -> dict[str, Any]:
    """This process's random states (Python, NumPy, torch CPU and CUDA) as tensors and
    plain values, loadable with ``weights_only=True``."""
    numpy_state = np.random.get_state()
    state = {"python": list(random.getstate()[1]), "python_pos": random.getstate()[2],
             "numpy": torch.from_numpy(numpy_state[1].astype(np.int64)),
             "numpy_pos": int(numpy_state[2]), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Set the random states captured by :func:`capture_rng`."""
    random.setstate((3, tuple(state["python"]), state["python_pos"]))
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32),
                         state["numpy_pos"], 0, 0.0))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def check_state_fits(model: torch.nn.Module, state: dict[str, torch.Tensor], directory: Path,
                      changed: str = "was model.* changed since?") -> None:
    """Raise :class:`CheckpointError` naming the tensors that differ in name or shape
    between ``model`` and a checkpoint's ``state``."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    problems = [f"{k}: checkpoint {found[k]}, model {expected[k]}"
                for k in sorted(expected.keys() & found.keys()) if expected[k] != found[k]]
    problems += [f"{k} missing from the checkpoint" for k in sorted(expected.keys() - found.keys())]
    problems += [f"{k} not in the model" for k in sorted(found.keys() - expected.keys())]
    if problems:
        more = f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""
        raise CheckpointError(
            f"{directory} does not fit the model of this config ({changed}): "
            f"{'; '.join(problems[:4])}{more}")


@contextmanager
def disk_full_is_an_error(run_dir: Path) -> Iterator[None]:
    """A full disk anywhere in the run (the log, a run file) is a one-line
    :class:`DiskFullError` naming what could not be written."""
    try:
        yield
    except OSError as error:
        if error.errno not in DISK_FULL:
            raise
        raise DiskFullError(Path(error.filename or run_dir / "log.jsonl")) from None
