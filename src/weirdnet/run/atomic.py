"""Atomic file writes: a temporary file in the same folder, flushed, then renamed.

A reader (or a crash) sees either the old file or the complete new one, never a
half-written file.  Used for checkpoints, model files, caches and benchmark reports.

``tempfile`` makes its files 0600 and folders 0700 whatever the umask; what is written
here is given the mode a plain ``open``/``mkdir`` would give it instead (0666 or 0777
less the umask), so colleagues on a shared machine read a run as the umask allows.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

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
    into a temporary folder of weirdnet's own beside it (:func:`weirdnet.run.temps.make`, so
    that a crash's leftover is recognised), flushed, then moved onto ``path`` (``os.replace``)
    (a symlink at ``path`` is replaced, never followed); creates the parent folder.  The
    file's mode is 0666 less the umask.  Returns the path."""
    from weirdnet.run import temps as _temps

    path = Path(path)
    chunks = [data.encode()] if isinstance(data, str) else [data] if isinstance(
        data, bytes | bytearray) else data
    folder = _temps.make(path.parent, path.name)
    try:
        tmp = folder / path.name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _temps.NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _temps.remove(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return path


def write_png(figure, path: str | os.PathLike, dpi: float | None = None) -> Path:
    """Render a matplotlib ``figure`` to PNG in memory, then :func:`write_atomic` it."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return write_atomic(path, buffer.getvalue())
