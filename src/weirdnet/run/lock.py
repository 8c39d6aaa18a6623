"""One writer per output directory: an advisory lock file held for a whole run.

:class:`DirectoryLock` takes an exclusive ``fcntl.flock`` on ``DIR/.lock`` and writes its
holder's PID, command and start time into it.  A second writer fails at once with
:class:`DirectoryBusyError`, whose message names the holder's PID.  The operating system
drops the lock when the holder's process ends, however it ends (even SIGKILL), so a
stale lock file never blocks the next run; the file itself stays (it is recognised as
weirdnet's own by its name).  The lock file is never opened through a symlink, and only
written when it is a plain file with no other hard link
(:class:`UnsafeLockFileError` otherwise), so a planted ``.lock`` link cannot make weirdnet
overwrite a file outside the directory.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

__all__ = ["LOCK_FILE", "DirectoryBusyError", "DirectoryLock", "UnsafeLockFileError"]

LOCK_FILE = ".lock"


class DirectoryBusyError(RuntimeError):
    """Another process holds the directory's lock."""


class UnsafeLockFileError(DirectoryBusyError):
    """The lock file is a symlink, not a plain file, or has another hard link: weirdnet
    does not write through it (the directory cannot be locked)."""


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted as the lock never blocks


def open_lock_file(path: Path, create: bool) -> int | None:
    """A descriptor of the lock file ``path`` (read-write, made if ``create`` and missing,
    atomically with ``O_EXCL``), never through a symlink; None when it is missing and not
    to be made.  :class:`UnsafeLockFileError` unless it is a plain file without other
    hard links."""
    fd = None
    if create:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
        except FileExistsError:
            pass
    if fd is None:
        try:
            fd = os.open(path, (os.O_RDWR if create else os.O_RDONLY) | _NOFOLLOW | _NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:  # ELOOP: a symlink; EISDIR: a folder
            if not os.path.lexists(path):
                raise
            what = "is a symbolic link" if os.path.islink(path) else "is not a plain file"
            raise UnsafeLockFileError(_unsafe(path, what)) from None
    info = os.fstat(fd)
    problem = ("is not a plain file" if not stat.S_ISREG(info.st_mode)
               else "has another hard link" if info.st_nlink > 1 else None)
    if problem:
        os.close(fd)
        raise UnsafeLockFileError(_unsafe(path, problem))
    return fd


def _unsafe(path: Path, problem: str) -> str:
    return (f"{path.parent} cannot be locked: {path} {problem}, not weirdnet's lock file "
            "(weirdnet never writes through it); remove it")


class DirectoryLock:
    """Exclusive advisory lock on ``directory`` (created if missing) for ``purpose``
    (e.g. "weirdnet train").  Use as a context manager, or :meth:`acquire` /
    :meth:`release`.  Where ``fcntl`` is missing (Windows), the lock is a no-op."""

    def __init__(self, directory: str | os.PathLike, purpose: str):
        self.directory = Path(directory)
        self.purpose = purpose
        self.path = self.directory / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> DirectoryLock:
        """Take the lock or raise :class:`DirectoryBusyError` naming the holder."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = open_lock_file(self.path, create=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            busy = self._busy(fd)
            os.close(fd)
            raise busy from None
        record = {"pid": os.getpid(), "purpose": self.purpose,
                  "argv": sys.argv, "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd
        return self

    def check_free(self) -> None:
        """Raise :class:`DirectoryBusyError` naming the holder when another process holds
        the lock; changes nothing (the lock file, if any, is only opened for reading)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return
        fd = open_lock_file(self.path, create=False)
        if fd is None:
            return  # no lock file: nobody holds it
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise self._busy(fd) from None
        finally:
            os.close(fd)  # also drops the lock if it was taken

    def _busy(self, fd: int) -> DirectoryBusyError:
        return DirectoryBusyError(f"{self.directory} is in use by {_read_holder(fd)}; wait "
                                  "for it to end, or write somewhere else")

    def release(self) -> None:
        """Drop the lock (the file stays)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    """'process PID (purpose, since TIME)' from a lock file, as far as it can be read."""
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        record = {}
    pid = record.get("pid", "?")
    detail = ", ".join(str(record[k]) for k in ("purpose", "since") if k in record)
    return f"process {pid}" + (f" ({detail})" if detail else "")
