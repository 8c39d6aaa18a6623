"""A run's files: written atomically, in temporaries weirdnet can prove it made, by one
writer per folder.

**Atomic writes.** A temporary file in the same folder, flushed, then renamed.

A reader (or a crash) sees either the old file or the complete new one, never a
half-written file.  Used for checkpoints, model files, caches and benchmark reports.

``tempfile`` makes its files 0600 and folders 0700 whatever the umask; what is written
here is given the mode a plain ``open``/``mkdir`` would give it instead (0666 or 0777
less the umask), so colleagues on a shared machine read a run as the umask allows.

**Temporaries.** Only those that weirdnet can prove it made are removed after a crash.

Every temporary weirdnet makes is a folder ``.NAME.KIND-PID-TOKEN`` beside the ``NAME``
it stands for (``KIND`` is ``tmp``: being written, ``old``: the previous ``NAME`` while a
new one takes its place, ``del``: being deleted; ``PID`` the writer's process, ``TOKEN``
8 random hex digits), and it holds a marker file :data:`TEMP_MARKER` whose text names that
exact folder (``weirdnet temporary .NAME.KIND-PID-TOKEN``).  A file is written as one
entry of such a folder and renamed out of it (:func:`write_atomic`).

:func:`is_own_temp` is the proof: the name matches, it is a real folder (not a symlink), its
marker is a plain file with that text, and the process that made it is no longer running.
A user's ``.notes.v2.tmp``, ``.backup.old.tmp/`` or ``.results.tmp-2024/`` never passes.
The marker moves with a folder that is renamed into place; :func:`unmark_temp` removes it
there, and :func:`stale_marker` recognises one that a crash left behind (its text names
another folder).

**One writer per folder.** An advisory lock file held for a whole run.

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

import io
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from weirdnet.run.faults import fault_point

__all__ = ["LOCK_FILE", "NOFOLLOW", "TEMP_MARKER", "DirectoryBusyError",
           "DirectoryLock", "UnsafeLockFileError", "apply_umask", "clear_temps",
           "current_umask", "discard", "is_empty_leftover", "is_own_temp", "make_temp",
           "make_temp_dir", "mark_temp", "obstacle", "parse_temp_name", "remove_temp",
           "stale_marker", "temp_name", "unmark_temp", "write_atomic", "write_png"]

# ---- atomic writes ------------------------------------------------------------------

_umask_lock = threading.Lock()


def current_umask() -> int:
    """This process's umask, read without changing it where Linux's /proc tells it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:  # elsewhere: set and restore it (briefly the stricter 0o077)
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def apply_umask(path: str | os.PathLike, executable: bool = False) -> None:
    """Give ``path`` (made by ``tempfile``, so 0600 or 0700) the mode a plain
    ``open``/``mkdir`` would: 0666 (files) or 0777 (folders, and ``executable`` files such
    as a linker's output) less the umask."""
    full = 0o777 if executable or os.path.isdir(path) else 0o666
    os.chmod(path, full & ~current_umask())


def make_temp_dir(prefix: str, parent: str | os.PathLike) -> Path:
    """A new folder in ``parent`` like ``tempfile.mkdtemp`` (unique name, created
    atomically) but with the umask's mode, as ``mkdir`` would give it."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    apply_umask(folder)
    return folder


def obstacle(parts: Iterable[Path]) -> tuple[Path, str] | None:
    """Whether a file or folder can be made below ``parts`` (a path and its parents,
    nearest first): the nearest part that exists decides.  ``(part, "file")`` when it is
    not a folder, ``(part, "not writable")`` when it is a folder this process may not
    write to, None when nothing is in the way.  Nothing is created."""
    for part in parts:
        if not os.path.lexists(part):
            continue
        if not part.is_dir():
            return part, "file"
        if not os.access(part, os.W_OK | os.X_OK):
            return part, "not writable"
        return None
    return None


def write_atomic(path: str | os.PathLike, data: str | bytes | Iterable[bytes]) -> Path:
    """Write ``data`` (text as UTF-8, bytes, or an iterable of byte chunks) to ``path``:
    into a temporary folder of weirdnet's own beside it (:func:`make_temp`, so
    that a crash's leftover is recognised), flushed, then moved onto ``path`` (``os.replace``)
    (a symlink at ``path`` is replaced, never followed); creates the parent folder.  The
    file's mode is 0666 less the umask.  Returns the path."""
    path = Path(path)
    chunks = [data.encode()] if isinstance(data, str) else [data] if isinstance(
        data, bytes | bytearray) else data
    folder = make_temp(path.parent, path.name)
    try:
        tmp = folder / path.name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        remove_temp(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return path


def write_png(figure, path: str | os.PathLike, dpi: float | None = None) -> Path:
    """Render a matplotlib ``figure`` to PNG in memory, then :func:`write_atomic` it."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return write_atomic(path, buffer.getvalue())


# ---- temporaries --------------------------------------------------------------------

TEMP_MARKER = ".weirdnet-temp"
"""The marker file in every temporary folder (and, for a moment, in a folder renamed from
one)."""

_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|del)-(?P<pid>\d+)-[0-9a-f]{8}$")
_MAX_MARKER = 4096
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
"""``os.O_NOFOLLOW`` where the system has it: open a path only if it is not a symlink."""


def temp_name(name: str, kind: str) -> str:
    """``.NAME.KIND-PID-TOKEN`` for this process."""
    return f".{name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def parse_temp_name(name: str) -> tuple[str, str, int] | None:
    """(NAME, KIND, PID) of a temporary's folder name, or None when it is not one."""
    match = _NAME.match(name)
    return None if match is None else (match["name"], match["kind"], int(match["pid"]))


def _marker_text(name: str) -> bytes:
    return f"weirdnet temporary {name}\n".encode()


def _read_marker(folder: Path) -> bytes | None:
    """The marker's bytes, or None unless it is a plain file (a link is never followed)."""
    try:
        fd = os.open(folder / TEMP_MARKER, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _MAX_MARKER)
    finally:
        os.close(fd)


def _write_marker(folder: Path, name: str) -> None:
    fd = os.open(folder / TEMP_MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(_marker_text(name))


def _running(pid: int) -> bool:
    """Whether another process with this PID runs now (this one's temporaries are never
    a crash's leftovers while it runs: the caller decides)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def is_own_temp(path: Path) -> bool:
    """Whether ``path`` is a temporary that weirdnet made (see the module doc), left by a
    process that no longer runs."""
    path = Path(path)
    parsed = parse_temp_name(path.name)
    if parsed is None or path.is_symlink() or not path.is_dir() or _running(parsed[2]):
        return False
    return _read_marker(path) == _marker_text(path.name)


def is_empty_leftover(path: Path) -> bool:
    """An empty real folder with a temporary's name: all a writer killed between
    ``mkdir`` and its marker (or a remover between the marker and ``rmdir``) leaves."""
    parsed = parse_temp_name(Path(path).name)
    return (parsed is not None and not path.is_symlink() and path.is_dir()
            and not _running(parsed[2]) and not any(path.iterdir()))


def stale_marker(folder: Path) -> bool:
    """Whether ``folder`` holds a marker that names another folder: a temporary renamed
    into place (or about to be renamed away) when its writer was killed."""
    text = _read_marker(folder)
    return text is not None and text.startswith(b"weirdnet temporary ") \
        and text != _marker_text(folder.name)


def make_temp(parent: Path, name: str) -> Path:
    """A new temporary folder ``parent/.NAME.tmp-PID-TOKEN`` with its marker, mode 0777
    less the umask, as ``mkdir`` gives it (``parent`` is created if missing)."""
    parent.mkdir(parents=True, exist_ok=True)
    while True:
        folder = parent / temp_name(name, "tmp")
        try:
            folder.mkdir()
        except FileExistsError:  # the same random token twice: draw again
            continue
        _write_marker(folder, folder.name)
        return folder


def mark_temp(folder: Path, kind: str) -> Path:
    """Write into the real folder ``folder`` the marker of the temporary it is about to
    become (``.NAME.KIND-PID-TOKEN`` beside it) and return that path; the caller renames
    ``folder`` there."""
    target = folder.parent / temp_name(folder.name, kind)
    _write_marker(folder, target.name)
    return target


def unmark_temp(folder: Path) -> None:
    """Remove the marker of a temporary renamed into place."""
    (Path(folder) / TEMP_MARKER).unlink(missing_ok=True)


def clear_temps(folder: Path, keep: str) -> None:
    """Delete every entry of ``folder`` but the one named ``keep`` (a link is removed,
    never followed)."""
    for entry in Path(folder).iterdir():
        if entry.name == keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def remove_temp(folder: Path) -> None:
    """Delete a temporary folder of ours: everything but the marker first, then the
    marker, then the folder, so that a kill at any moment leaves it recognisable."""
    clear_temps(folder, keep=TEMP_MARKER)
    unmark_temp(folder)
    os.rmdir(folder)


def discard(folder: Path) -> None:
    """Rename the real folder ``folder`` to a ``del`` temporary of ours, then delete it:
    a kill mid-way never leaves a half-deleted folder under its real name."""
    doomed = mark_temp(folder, "del")
    os.rename(folder, doomed)
    fault_point("checkpoint-prune")
    remove_temp(doomed)


# ---- one writer per folder ----------------------------------------------------------

LOCK_FILE = ".lock"


class DirectoryBusyError(RuntimeError):
    """Another process holds the directory's lock."""


class UnsafeLockFileError(DirectoryBusyError):
    """The lock file is a symlink, not a plain file, or has another hard link: weirdnet
    does not write through it (the directory cannot be locked)."""


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO planted as the lock never blocks


def open_lock_file(path: Path, create: bool) -> int | None:
    """A descriptor of the lock file ``path`` (read-write, made if ``create`` and missing,
    atomically with ``O_EXCL``), never through a symlink; None when it is missing and not
    to be made.  :class:`UnsafeLockFileError` unless it is a plain file without other
    hard links."""
    fd = None
    if create:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
        except FileExistsError:
            pass
    if fd is None:
        try:
            fd = os.open(path, (os.O_RDWR if create else os.O_RDONLY) | NOFOLLOW | _NONBLOCK)
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
