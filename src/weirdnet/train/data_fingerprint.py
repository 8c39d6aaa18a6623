"""What a run's data were read from, recorded in ``RUN/data_fingerprint.json`` so that a
resumed run refuses a source that changed since the run started (exact resume assumes
the same data).

The record covers ``data.root`` when the config names one:

- a file: its size and SHA-256 (the bytes the dataset reads), under the name ".";
- a folder of at most :data:`MAX_HASHED_FILES` files and :data:`MAX_HASHED_BYTES` bytes:
  each file's path under the folder, size and SHA-256;
- a larger folder (e.g. Pathfinder's images): each file's path, size and modification
  time, in one digest: a change names the folder, not the file.

A dataset without ``data.root`` is generated from its options and the seed, or read
from a source that the dataset's own cache keys by its fingerprint (e.g. python-stdlib);
its options are part of the config, whose changes a resumed run reports.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from weirdnet.data.sources.fingerprint import file_sha256
from weirdnet.run.files import write_atomic

__all__ = ["FILE", "check_source", "data_change", "read_record", "record", "write_record"]

FILE = "data_fingerprint.json"
MAX_HASHED_FILES = 10_000
MAX_HASHED_BYTES = 4 << 30


def record(dataset: str, root: str) -> dict[str, Any]:
    """The fingerprint of dataset ``dataset``'s source ``root`` ("" = none): a JSON-ready
    dict (see the module doc)."""
    out: dict[str, Any] = {"dataset": dataset, "root": None}
    if not root:
        return out
    path = Path(root).expanduser().resolve()
    out["root"] = str(path)
    if path.is_file():
        out["files"] = {".": _file_entry(path)}  # "." : the root itself
        return out
    if not path.is_dir():
        return out
    files = sorted(p for p in path.rglob("*") if p.is_file())
    sizes = [p.stat().st_size for p in files]
    if len(files) <= MAX_HASHED_FILES and sum(sizes) <= MAX_HASHED_BYTES:
        out["files"] = {p.relative_to(path).as_posix(): _file_entry(p) for p in files}
        return out
    digest = hashlib.sha256()
    for file, size in zip(files, sizes, strict=True):
        name = file.relative_to(path).as_posix()
        digest.update(f"{name}\0{size}\0{file.stat().st_mtime_ns}\0".encode())
    out["stat_digest"], out["count"] = digest.hexdigest(), len(files)
    return out


def _file_entry(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": file_sha256(path)}


def data_change(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What differs between the recorded source ``old`` and ``new``, in words naming the
    file (None: the same data)."""
    if old.get("dataset") != new.get("dataset"):
        return f"data.dataset was {old.get('dataset')!r}, now {new.get('dataset')!r}"
    if (old.get("root") is None) != (new.get("root") is None):
        return f"data.root was {old.get('root')!r}, now {new.get('root')!r}"
    root = Path(new["root"]) if new.get("root") else None
    if "stat_digest" in old or "stat_digest" in new:
        if old.get("stat_digest") != new.get("stat_digest"):
            return (f"the files under {root} changed (their names, sizes or modification "
                    f"times: {old.get('count', '?')} files then, {new.get('count', '?')} now)")
        return None
    before, after = old.get("files", {}), new.get("files", {})
    for name in sorted(before.keys() | after.keys()):
        where = root if name == "." else root / name
        if name not in after:
            return f"{where} was removed"
        if name not in before:
            return f"{where} was added"
        if before[name] != after[name]:
            return (f"{where} changed ({before[name]['size']:,} bytes, sha256 "
                    f"{before[name]['sha256'][:12]}... then; {after[name]['size']:,} bytes, "
                    f"sha256 {after[name]['sha256'][:12]}... now)")
    return None


def read_record(run_dir: Path) -> dict[str, Any] | None:
    """The record of the run in ``run_dir`` (None: none, as in runs of older versions,
    or unreadable)."""
    try:
        found = json.loads((Path(run_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def write_record(run_dir: Path, fingerprint: dict[str, Any]) -> None:
    """Write ``fingerprint`` as the run's record (atomically)."""
    write_atomic(Path(run_dir) / FILE, json.dumps(fingerprint, indent=2) + "\n")


def check_source(data, run_dir: Path, resumed: bool, allow_change: bool
                 ) -> tuple[dict[str, Any], str | None]:
    """Fingerprint the source of the config's ``data`` table; a ``resumed`` run (one with
    a checkpoint: only it has trained on the data it recorded) whose recorded source
    changed is a :class:`~weirdnet.train.setup.RunError` naming the file, unless
    ``allow_change`` (then the new source is recorded).  (the fingerprint, the line that
    says the data changed, or None)."""
    from weirdnet.train.setup import RunError

    fingerprint = record(data.dataset, data.root)
    recorded = read_record(run_dir) if resumed else None
    change = None if recorded is None else data_change(recorded, fingerprint)
    if change is None:
        return fingerprint, None
    if not allow_change:
        raise RunError(f"the data changed since {run_dir} started: {change}; resuming "
                       "would not continue the run it was; restore the data, or "
                       "continue on the new data with --allow-data-change")
    return fingerprint, (f"the data changed since {run_dir} started: {change}; continuing "
                         "on the new data (--allow-data-change), which is recorded now")
