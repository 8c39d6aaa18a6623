"""Atomic file writes: a temporary file in the same folder, flushed, then renamed.

A reader (or a crash) sees either the old file or the complete new one, never a
half-written file.  Used for checkpoints, model files, caches and benchmark reports.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes | Iterable[bytes]) -> Path:
    """Write ``data`` (text as UTF-8, bytes, or an iterable of byte chunks) to ``path``
    via a temporary file and ``os.replace``; creates the parent folder.  Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = [data.encode()] if isinstance(data, str) else [data] if isinstance(
        data, bytes | bytearray) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_png(figure, path: str | os.PathLike, dpi: float | None = None) -> Path:
    """Render a matplotlib ``figure`` to PNG in memory, then :func:`write_atomic` it."""
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return write_atomic(path, buffer.getvalue())
