"""One writer per output directory: an advisory lock file held for a whole run.

:class:`DirectoryLock` takes an exclusive ``fcntl.flock`` on ``DIR/.lock`` and writes its
holder's PID, command and start time into it.  A second writer fails at once with
:class:`DirectoryBusyError`, whose message names the holder's PID.  The operating system
drops the lock when the holder's process ends, however it ends (even SIGKILL), so a
stale lock file never blocks the next run; the file itself stays (it is recognised as
weirdnet's own by its name).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

__all__ = ["LOCK_FILE", "DirectoryBusyError", "DirectoryLock"]

LOCK_FILE = ".lock"


class DirectoryBusyError(RuntimeError):
    """Another process holds the directory's lock."""


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
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
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
