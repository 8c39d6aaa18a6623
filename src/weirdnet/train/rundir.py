"""Run directories that cannot lose data: recognised before they are replaced, one
writer at a time, and repaired after a crash.

A run directory ``RUN = run.out_dir/run.name`` holds only files that weirdnet writes
(:data:`RUN_FILES`).  :func:`claim_run_dir` opens it for one ``weirdnet train``:

- ``run.name`` must be a plain name (no ``/``, ``..``, absolute paths);
- a directory that exists, is not empty and is not a weirdnet run (no readable
  ``train_config.json``) is refused, whatever the flags: nothing in it is touched;
- ``--overwrite`` removes an existing run only if every entry in it is one weirdnet
  writes; it removes those entries one by one, never the directory of someone else;
- an advisory lock (:class:`weirdnet._lock.DirectoryLock`) is held for the whole run, so a
  second writer fails at once with the holder's PID;
- leftovers of a crash (hidden temporary checkpoint directories and files) are removed,
  and a ``best/`` or checkpoint caught between its two renames is put back.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from weirdnet._lock import LOCK_FILE, DirectoryBusyError, DirectoryLock

__all__ = ["RUN_FILES", "Claim", "RunDirError", "check_run_name", "claim_run_dir",
           "clean_stale", "foreign_entries", "is_run_dir"]


class RunDirError(RuntimeError):
    """A run directory that may not be used as asked (not a run, busy, bad name)."""


RUN_FILES = frozenset({"train_config.json", "data_info.json", "log.jsonl", "results.json",
                       "checkpoints", "best", "tensorboard", "curves.png", LOCK_FILE})
"""Every entry weirdnet writes directly in a run directory."""

_STEP_DIR = re.compile(r"^step-\d+$")
# save_directory's temporaries (.NAME.tmp-PID, .NAME.old-PID) and write_atomic's
# (.NAME.RANDOM.tmp)
_DIR_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-\d+$")
_FILE_TEMP = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]+\.tmp$")


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


def _is_own_temp(name: str) -> bool:
    return bool(_DIR_TEMP.match(name) or _FILE_TEMP.match(name))


def foreign_entries(path: Path) -> list[str]:
    """Entries of run directory ``path`` that weirdnet did not write (relative names)."""
    path = Path(path)
    found = [p.name for p in path.iterdir() if p.name not in RUN_FILES
             and not _is_own_temp(p.name)]
    checkpoints = path / "checkpoints"
    if checkpoints.is_dir():
        found += [f"checkpoints/{p.name}" for p in checkpoints.iterdir()
                  if not (_STEP_DIR.match(p.name) or _is_own_temp(p.name))]
    return sorted(found)


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


def claim_run_dir(out_dir: str, name: str, *, resume: bool, overwrite: bool,
                  is_main: bool = True) -> Claim:
    """Open ``out_dir/name`` for one training run (see the module doc).  Only the main
    process locks, removes and cleans; the others get the path."""
    check_run_name(name)
    run_dir = Path(out_dir) / name
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{run_dir} exists and is not a directory")
    existed = _has_content(run_dir)
    created = not run_dir.exists()
    if existed and not is_run_dir(run_dir):
        entries = sorted(p.name for p in run_dir.iterdir())
        raise RunDirError(
            f"{run_dir} exists and is not a weirdnet run (no readable train_config.json; it "
            f"holds {_listing(entries)}); nothing was changed: pick another run.name or "
            "run.out_dir")
    if existed and not (resume or overwrite):
        raise RunDirError(f"run directory {run_dir} already exists; continue it with "
                          "--resume, start over with --overwrite, or pick another name "
                          "with --set run.name=NAME")
    if not is_main:
        return Claim(run_dir, None, existed)
    lock = DirectoryLock(run_dir, "weirdnet train")
    try:
        lock.acquire()
    except DirectoryBusyError as error:
        raise RunDirError(f"run directory {error}") from None
    try:
        if existed and overwrite:
            _remove_run(run_dir)
        cleaned = clean_stale(run_dir)
    except BaseException:
        lock.release()
        raise
    return Claim(run_dir, lock, existed, cleaned, created)


def _listing(entries: list[str], most: int = 5) -> str:
    shown = ", ".join(entries[:most])
    return shown + (f" and {len(entries) - most} more" if len(entries) > most else "")


def _remove_run(run_dir: Path) -> None:
    """Delete the entries of a recognised run (the directory and its lock file stay);
    refuse if anything in it is not weirdnet's."""
    foreign = foreign_entries(run_dir)
    if foreign:
        raise RunDirError(f"--overwrite refused: {run_dir} is a weirdnet run but also holds "
                          f"files weirdnet did not write ({_listing(foreign)}); move them "
                          "away or pick another run.name")
    for entry in run_dir.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def clean_stale(run_dir: Path) -> list[str]:
    """Repair what a killed writer left (the caller holds the run's lock): restore a
    directory caught between the two renames of ``save_directory``, delete the hidden
    temporaries.  Returns what it did, one phrase each."""
    done: list[str] = []
    for folder in (run_dir, run_dir / "checkpoints", run_dir / "best"):
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            match = _DIR_TEMP.match(entry.name) or _FILE_TEMP.match(entry.name)
            if match is None:
                continue
            target = folder / match.group("name")
            if entry.is_dir() and match.groupdict().get("kind") == "old" \
                    and not target.exists():
                entry.rename(target)
                done.append(f"restored {target}")
            elif entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
                done.append(f"removed {entry}")
            else:
                entry.unlink(missing_ok=True)
                done.append(f"removed {entry}")
    return done
