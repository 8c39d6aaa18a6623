"""Temporaries that weirdnet can prove it made, and only those removed after a crash.

Every temporary weirdnet makes is a folder ``.NAME.KIND-PID-TOKEN`` beside the ``NAME``
it stands for (``KIND`` is ``tmp``: being written, ``old``: the previous ``NAME`` while a
new one takes its place, ``del``: being deleted; ``PID`` the writer's process, ``TOKEN``
8 random hex digits), and it holds a marker file :data:`MARKER` whose text names that
exact folder (``weirdnet temporary .NAME.KIND-PID-TOKEN``).  A file is written as one
entry of such a folder and renamed out of it (:func:`weirdnet.run.atomic.write_atomic`).

:func:`is_ours` is the proof: the name matches, it is a real folder (not a symlink), its
marker is a plain file with that text, and the process that made it is no longer running.
A user's ``.notes.v2.tmp``, ``.backup.old.tmp/`` or ``.results.tmp-2024/`` never passes.
The marker moves with a folder that is renamed into place; :func:`unmark` removes it
there, and :func:`stale_marker` recognises one that a crash left behind (its text names
another folder).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
from pathlib import Path

__all__ = ["MARKER", "NOFOLLOW", "clear", "discard", "is_empty_leftover", "is_ours", "make", "mark",
           "parse", "remove", "stale_marker", "temp_name", "unmark"]

MARKER = ".weirdnet-temp"
"""The marker file in every temporary folder (and, for a moment, in a folder renamed from
one)."""

_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old|del)-(?P<pid>\d+)-[0-9a-f]{8}$")
_MAX_MARKER = 4096
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
"""``os.O_NOFOLLOW`` where the system has it: open a path only if it is not a symlink."""


def temp_name(name: str, kind: str) -> str:
    """``.NAME.KIND-PID-TOKEN`` for this process."""
    return f".{name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def parse(name: str) -> tuple[str, str, int] | None:
    """(NAME, KIND, PID) of a temporary's folder name, or None when it is not one."""
    match = _NAME.match(name)
    return None if match is None else (match["name"], match["kind"], int(match["pid"]))


def _marker_text(name: str) -> bytes:
    return f"weirdnet temporary {name}\n".encode()


def _read_marker(folder: Path) -> bytes | None:
    """The marker's bytes, or None unless it is a plain file (a link is never followed)."""
    try:
        fd = os.open(folder / MARKER, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _MAX_MARKER)
    finally:
        os.close(fd)


def _write_marker(folder: Path, name: str) -> None:
    fd = os.open(folder / MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o644)
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


def is_ours(path: Path) -> bool:
    """Whether ``path`` is a temporary that weirdnet made (see the module doc), left by a
    process that no longer runs."""
    path = Path(path)
    parsed = parse(path.name)
    if parsed is None or path.is_symlink() or not path.is_dir() or _running(parsed[2]):
        return False
    return _read_marker(path) == _marker_text(path.name)


def is_empty_leftover(path: Path) -> bool:
    """An empty real folder with a temporary's name: all a writer killed between
    ``mkdir`` and its marker (or a remover between the marker and ``rmdir``) leaves."""
    parsed = parse(Path(path).name)
    return (parsed is not None and not path.is_symlink() and path.is_dir()
            and not _running(parsed[2]) and not any(path.iterdir()))


def stale_marker(folder: Path) -> bool:
    """Whether ``folder`` holds a marker that names another folder: a temporary renamed
    into place (or about to be renamed away) when its writer was killed."""
    text = _read_marker(folder)
    return text is not None and text.startswith(b"weirdnet temporary ") \
        and text != _marker_text(folder.name)


def make(parent: Path, name: str) -> Path:
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


def mark(folder: Path, kind: str) -> Path:
    """Write into the real folder ``folder`` the marker of the temporary it is about to
    become (``.NAME.KIND-PID-TOKEN`` beside it) and return that path; the caller renames
    ``folder`` there."""
    target = folder.parent / temp_name(folder.name, kind)
    _write_marker(folder, target.name)
    return target


def unmark(folder: Path) -> None:
    """Remove the marker of a temporary renamed into place."""
    (Path(folder) / MARKER).unlink(missing_ok=True)


def clear(folder: Path, keep: str) -> None:
    """Delete every entry of ``folder`` but the one named ``keep`` (a link is removed,
    never followed)."""
    for entry in Path(folder).iterdir():
        if entry.name == keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def remove(folder: Path) -> None:
    """Delete a temporary folder of ours: everything but the marker first, then the
    marker, then the folder, so that a kill at any moment leaves it recognisable."""
    clear(folder, keep=MARKER)
    unmark(folder)
    os.rmdir(folder)


def discard(folder: Path) -> None:
    """Rename the real folder ``folder`` to a ``del`` temporary of ours, then delete it:
    a kill mid-way never leaves a half-deleted folder under its real name."""
    from weirdnet.run.faults import fault_point

    doomed = mark(folder, "del")
    os.rename(folder, doomed)
    fault_point("checkpoint-prune")
    remove(doomed)
