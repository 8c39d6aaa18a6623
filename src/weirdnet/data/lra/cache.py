"""Cache directories for generated LRA data: keyed by the generation parameters, built atomically.

A generated set lives in ``data_root()/<name>/generated/<key>/`` where ``<key>`` is a readable
prefix plus a hash of every generation parameter (and the generator version), so changing any
parameter or the seed gives a new directory.  The directory is built under a temporary name
and renamed into place only when complete, so an interrupted run never leaves a half-written
set behind and two processes generating the same set at once do not corrupt each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from weirdnet.data.registry import data_root

__all__ = ["build_dir_atomically", "cache_dir"]


def cache_dir(name: str, prefix: str, params: Mapping[str, Any]) -> Path:
    """``data_root()/name/generated/<prefix>-<hash of params>``; params must be JSON-able."""
    blob = json.dumps(dict(params), sort_keys=True, default=str).encode()
    digest = hashlib.sha256(blob).hexdigest()[:12]
    return data_root() / name / "generated" / f"{prefix}-{digest}"


def build_dir_atomically(target: Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp_dir)`` and rename ``tmp_dir`` to ``target``; return ``target``.

    Does nothing when ``target`` already exists.  On failure the temporary directory is
    removed and the error re-raised; if another process finished ``target`` first, its copy
    is kept and ours is discarded.
    """
    target = Path(target)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
