"""Run directories that cannot lose data: recognised before they are replaced, one
writer at a time, and repaired after a crash.

A run directory ``RUN = run.out_dir/run.name`` holds only files that weirdnet writes
(:data:`RUN_FILES`).  :func:`claim_run_dir` opens it for one ``weirdnet train``:

- ``run.name`` must be a plain name (no ``/``, ``..``, absolute paths), ``run.out_dir`` a
  folder or a path where one can be made (no part of it a file);
- a directory that exists, is not empty and is not a weirdnet run (no readable
  ``train_config.json``) is refused, whatever the flags: nothing in it is touched;
- ``--overwrite`` removes an existing run only if every entry in it, at every level
  (``best/``, ``checkpoints/step-*/``, ``tensorboard/`` included), is one weirdnet writes
  (:func:`foreign_entries`); it removes those entries one by one, never the directory of
  someone else;
- an advisory lock (:class:`weirdnet.run.files.DirectoryLock`) is held for the whole run, so a
  second writer fails at once with the holder's PID;
- leftovers of a crash are removed, and a ``best/`` or checkpoint caught between its two
  renames is put back: only temporaries weirdnet can prove it made
  (:func:`weirdnet.run.files.is_own_temp`: exact name with a PID, marker inside), never a user's
  file that merely looks like one;
- resuming and overwriting exclude each other (:func:`check_flags`).

:func:`check_run_dir` makes every check that changes nothing (the busy lock included), so
the trainer runs them before it builds its data and model, and claims the directory only
when everything else has been checked too.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from weirdnet.run.files import (
    LOCK_FILE,
    TEMP_MARKER,
    DirectoryBusyError,
    DirectoryLock,
    clear_temps,
    is_empty_leftover,
    is_own_temp,
    obstacle,
    parse_temp_name,
    remove_temp,
    stale_marker,
    unmark_temp,
)

__all__ = ["MODEL_DIR_FILES", "RUN_FILES", "Claim", "RunDirError", "check_flags", "check_out_dir",
           "check_run_dir", "check_run_name", "claim_run_dir",
           "clean_stale", "foreign_entries", "is_run_dir"]


class RunDirError(RuntimeError):
    """A run directory that may not be used as asked (not a run, busy, bad name)."""


RUN_FILES = frozenset({"train_config.json", "data_info.json", "data_fingerprint.json",
                       "log.jsonl", "results.json", "checkpoints", "best", "tensorboard",
                       "curves.png", LOCK_FILE})
"""Every entry weirdnet writes directly in a run directory."""

_STEP_DIR = re.compile(r"^step-\d+$")


def check_run_name(name: str) -> None:
    """Raise :class:`RunDirError` unless ``name`` is a plain directory name: not empty,
    no path separator, no leading dot (so no ``..`` and no hidden names), no control
    characters, at most 200 characters."""
    bad = (not name or name.startswith(".") or len(name) > 200 or name != name.strip()
           or any(c in "/\\" or ord(c) < 32 for c in name))
    if bad:
        raise RunDirError(
            f"run.name={name!r} is not a plain name: no '/', no leading '.', no '..', no "
            "absolute path (put the folder in run.out_dir)")


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a readable weirdnet ``train_config.json``."""
    try:
        config = json.loads((Path(path) / "train_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and {"run", "data", "train"} <= config.keys()


def _is_own_temp(path: Path) -> bool:
    """A crash's leftover temporary of weirdnet's (see :mod:`weirdnet.run.files`)."""
    return is_own_temp(path) or is_empty_leftover(path)


MODEL_DIR_FILES = frozenset({"config.json", "model.safetensors", "train_config.json",
                             "data_info.json", "manifest.json"})
"""The files of every model directory weirdnet writes in a run (``best/``,
``checkpoints/step-*``); ``best/`` adds ``metrics.json``, a checkpoint ``trainer.pt``."""

_RUN_DIRS = frozenset({"checkpoints", "best", "tensorboard"})
_TB_EVENTS = re.compile(r"^events\.out\.tfevents\.[^/]+$")


def foreign_entries(path: Path) -> list[str]:
    """Entries of run directory ``path``, at every level, that weirdnet did not write
    (paths relative to ``path``; a foreign folder is named once, not its contents).

    weirdnet writes, and nothing else counts as its own: the files of :data:`RUN_FILES`
    (as files) and its folders (as folders, never symlinks); in ``checkpoints/`` only
    ``step-N`` folders, in them and in ``best/`` only the files of a model directory
    (those of :data:`MODEL_DIR_FILES`, ``trainer.pt``/``metrics.json`` and whatever the
    folder's manifest lists); in ``tensorboard/`` only ``events.out.tfevents.*`` files;
    anywhere, the temporaries of an interrupted write that are provably weirdnet's
    (:mod:`weirdnet.run.files`)."""
    path = Path(path)
    found: list[str] = []
    for entry in path.iterdir():
        name = entry.name
        if _is_own_temp(entry):
            continue
        if name not in RUN_FILES or entry.is_symlink() \
                or entry.is_dir() != (name in _RUN_DIRS):
            found.append(name)
        elif name == "checkpoints":
            found += _foreign_checkpoints(entry)
        elif name == "best":
            found += _foreign_model_files(entry, "best")
        elif name == "tensorboard":
            found += [f"tensorboard/{p.name}" for p in entry.iterdir()
                      if not (_TB_EVENTS.match(p.name) and _plain_file(p))]
    return sorted(found)


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _foreign_checkpoints(folder: Path) -> list[str]:
    found = []
    for entry in folder.iterdir():
        if _is_own_temp(entry):
            continue
        where = f"checkpoints/{entry.name}"
        if _STEP_DIR.match(entry.name) and entry.is_dir() and not entry.is_symlink():
            found += _foreign_model_files(entry, where)
        else:
            found.append(where)
    return found


def _foreign_model_files(folder: Path, where: str) -> list[str]:
    """Entries of a model directory (``best/`` or a checkpoint) that are not its files."""
    own = MODEL_DIR_FILES | {"trainer.pt", "metrics.json"} | _manifest_names(folder)
    if stale_marker(folder):
        own |= {TEMP_MARKER}
    return [f"{where}/{p.name}" for p in folder.iterdir()
            if not (_is_own_temp(p) or (p.name in own and _plain_file(p)))]


def _manifest_names(folder: Path) -> set[str]:
    """The plain file names that the folder's ``manifest.json`` lists (none if unreadable)."""
    try:
        files = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    if not isinstance(files, dict):
        return set()
    return {name for name in files if isinstance(name, str) and "/" not in name
            and not name.startswith(".")}


def _has_content(path: Path) -> bool:
    return path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir())


@dataclass
class Claim:
    """The outcome of :func:`claim_run_dir`: the locked directory and what was done."""

    run_dir: Path
    lock: DirectoryLock | None
    existed: bool
    cleaned: list[str] = field(default_factory=list)
    created: bool = False  # the directory did not exist before the claim

    def release(self) -> None:
        """Drop the lock (at the end of the run)."""
        if self.lock is not None:
            self.lock.release()

    def abandon(self) -> None:
        """Drop the lock of a run that could not start; a directory the claim created
        and that holds nothing but the lock file is removed again."""
        self.release()
        if self.created and self.lock is not None:
            entries = list(self.run_dir.iterdir()) if self.run_dir.is_dir() else []
            if [p.name for p in entries] == [LOCK_FILE]:
                entries[0].unlink()
                self.run_dir.rmdir()


def check_out_dir(out_dir: str) -> None:
    """Raise :class:`RunDirError` unless ``run.out_dir`` is a folder, or a path where one
    can be made: no part of it is a file, and the nearest part that exists is a writable
    folder.  Nothing is created."""
    path = Path(out_dir)
    found = obstacle((path, *path.parents))
    if found is None:
        return
    part, problem = found
    if problem == "file":
        what = "is" if part == path else f"names {part}, which is"
        raise RunDirError(f"run.out_dir={out_dir!r} {what} a file, not a folder; point "
                          "run.out_dir at a folder (--set run.out_dir=DIR)")
    raise RunDirError(f"run.out_dir={out_dir!r}: {part} is not writable; point "
                      "run.out_dir at a folder you may write to")


def check_flags(resume: bool, overwrite: bool, run_dir_given: bool = False) -> None:
    """Raise :class:`RunDirError` when the flags contradict each other: ``--resume`` (or
    a run directory as CONFIG, which implies it) continues a run, ``--overwrite`` deletes
    it; nothing is touched."""
    if not overwrite:
        return
    if run_dir_given:
        raise RunDirError("--overwrite with a run directory as CONFIG: a run directory is "
                          "continued where it is, never deleted; to start it over, give its "
                          "train_config.json as CONFIG with --overwrite")
    if resume:
        raise RunDirError("--resume and --overwrite exclude each other: --resume continues "
                          "the run, --overwrite deletes it and starts over; give one")


def _check_lock_file(run_dir: Path) -> None:
    """A ``.lock`` that is not a plain file (a symlink, say) is never written through."""
    lock = run_dir / LOCK_FILE
    if os.path.lexists(lock) and (lock.is_symlink() or not lock.is_file()):
        kind = "a symbolic link" if lock.is_symlink() else "not a plain file"
        raise RunDirError(f"{lock} is {kind}, not weirdnet's lock file (weirdnet never "
                          "writes through it); remove it")


def check_run_dir(out_dir: str, name: str, *, resume: bool, overwrite: bool,
                  is_main: bool = True) -> Path:
    """The checks of :func:`claim_run_dir` that change nothing (run before a run builds
    its data and model, so a run that cannot start fails at once and leaves nothing
    behind): a plain name, a usable ``run.out_dir``, no foreign directory, no existing run
    without ``--resume``/``--overwrite``, nothing foreign for ``--overwrite`` to delete,
    no other writer (asked by the main process only: in a torchrun job the others would
    find the main one's lock), flags that exclude each other, a lock file that is not a
    plain file.  Returns ``out_dir/name``."""
    check_flags(resume, overwrite)
    check_run_name(name)
    check_out_dir(out_dir)
    run_dir = Path(out_dir) / name
    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise RunDirError(f"{run_dir} exists and is not a directory; pick another run.name "
                          "or run.out_dir")
    _check_lock_file(run_dir)
    if not _has_content(run_dir):
        return run_dir
    if not is_run_dir(run_dir):
        entries = sorted(p.name for p in run_dir.iterdir())
        raise RunDirError(
            f"{run_dir} exists and is not a weirdnet run (no readable train_config.json; it "
            f"holds {_listing(entries)}); nothing was changed: pick another run.name or "
            "run.out_dir")
    if not (resume or overwrite):
        raise RunDirError(f"run directory {run_dir} already exists; continue it with "
                          "--resume, start over with --overwrite, or pick another name "
                          "with --set run.name=NAME")
    if is_main:
        _check_not_busy(run_dir)
    if overwrite:
        _refuse_foreign(run_dir)
    else:
        _check_kinds(run_dir)
    return run_dir


def claim_run_dir(out_dir: str, name: str, *, resume: bool, overwrite: bool,
                  is_main: bool = True) -> Claim:
    """Open ``out_dir/name`` for one training run (see the module doc and
    :func:`check_run_dir`).  Only the main process locks, removes and cleans; the others
    get the path (they made :func:`check_run_dir`'s checks before; now the main process
    may be changing the directory)."""
    if not is_main:
        run_dir = Path(out_dir) / name
        return Claim(run_dir, None, _has_content(run_dir))
    run_dir = check_run_dir(out_dir, name, resume=resume, overwrite=overwrite)
    existed = _has_content(run_dir)
    created = not run_dir.exists()
    lock = DirectoryLock(run_dir, "weirdnet train")
    try:
        lock.acquire()
    except DirectoryBusyError as error:
        raise RunDirError(f"run directory {error}") from None
    except OSError as error:
        raise RunDirError(f"cannot create run directory {run_dir}: {error.strerror} "
                          f"({error.filename}); pick another run.out_dir") from None
    try:
        if existed and overwrite:
            _remove_run(run_dir)
        cleaned = clean_stale(run_dir)
    except BaseException:
        lock.release()
        raise
    return Claim(run_dir, lock, existed, cleaned, created)


def _check_kinds(run_dir: Path) -> None:
    """A run to continue has its folders as folders and its files as files."""
    for name in sorted(RUN_FILES):
        entry = run_dir / name
        if os.path.lexists(entry) and (entry.is_symlink()
                                       or entry.is_dir() != (name in _RUN_DIRS)):
            kind = "folder" if name in _RUN_DIRS else "file"
            raise RunDirError(f"{entry} is not the {kind} weirdnet writes there; move it "
                              "away to continue the run")


def _check_not_busy(run_dir: Path) -> None:
    """Raise :class:`RunDirError` naming the holder when another process holds the run's
    lock (nothing is written)."""
    try:
        DirectoryLock(run_dir, "weirdnet train").check_free()
    except DirectoryBusyError as error:
        raise RunDirError(f"run directory {error}") from None


def _listing(entries: list[str], most: int = 5) -> str:
    shown = ", ".join(entries[:most])
    return shown + (f" and {len(entries) - most} more" if len(entries) > most else "")


def _refuse_foreign(run_dir: Path) -> None:
    foreign = foreign_entries(run_dir)
    if foreign:
        raise RunDirError(f"--overwrite refused: {run_dir} is a weirdnet run but also holds "
                          f"files weirdnet did not write ({_listing(foreign)}); move them "
                          "away or pick another run.name")


def _remove_run(run_dir: Path) -> None:
    """Delete the entries of a recognised run (the directory and its lock file stay);
    refuse if anything in it, at any level, is not weirdnet's."""
    _refuse_foreign(run_dir)
    clear_temps(run_dir, keep=LOCK_FILE)


def clean_stale(run_dir: Path) -> list[str]:
    """Repair what a killed writer left (the caller holds the run's lock): put back a
    directory caught between the two renames of ``save_directory``, delete the
    temporaries that are provably weirdnet's (:func:`weirdnet.run.files.is_own_temp`; anything
    else, however it is named, stays), drop a marker left in a folder renamed into
    place.  Returns what it did, one phrase each."""
    done: list[str] = []
    checkpoints = run_dir / "checkpoints"
    steps = sorted(p for p in checkpoints.iterdir() if _STEP_DIR.match(p.name)) \
        if checkpoints.is_dir() and not checkpoints.is_symlink() else []
    for folder in (run_dir, checkpoints, run_dir / "best"):
        if folder.is_dir() and not folder.is_symlink():
            done += filter(None, map(_clean_entry, sorted(folder.iterdir())))
    for folder in (run_dir / "best", *steps):
        if folder.is_dir() and not folder.is_symlink() and stale_marker(folder):
            unmark_temp(folder)
    return done


def _clean_entry(entry: Path) -> str | None:
    """Remove or put back one leftover temporary; what was done, or None (not ours)."""
    if is_empty_leftover(entry):
        entry.rmdir()
        return f"removed {entry} (empty)"
    if not is_own_temp(entry):
        return None
    name, kind, _ = parse_temp_name(entry.name)
    target = entry.parent / name
    if kind == "old" and not os.path.lexists(target):
        entry.rename(target)
        unmark_temp(target)
        return f"restored {target}"
    remove_temp(entry)
    return f"removed {entry}"
