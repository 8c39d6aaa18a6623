"""The records of a sweep's cells and the state of each: done, stale, interrupted, pending.

A cell is any object with a ``key`` and an ``info`` (the suite's (task, variant, seed)
cells, ``bench lm``'s and ``bench recall``'s); its record is ``<results>/cells/<key>.json``
and its run directory ``<work>/<key>``.  A record whose config differs from the one the
current code builds is stale and is run again (:func:`config_hash`); a cell whose run
directory has checkpoints but no record was interrupted and is resumed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Protocol


class SweepCell(Protocol):
    """What the store needs of a cell: its ``key`` (file and folder names) and ``info``
    (what its record says about it)."""

    key: str
    info: dict[str, Any]


def config_hash(config: dict[str, Any]) -> str:
    """A short hash of a cell config, without where its run directory lives (a
    ``train.init_from`` naming another run of the same folder counts by its name)."""
    data = json.loads(json.dumps(config, sort_keys=True, default=str))
    out_dir = data.get("run", {}).pop("out_dir", None)
    init_from = data.get("train", {}).get("init_from")
    if out_dir and init_from and Path(init_from).parent == Path(out_dir):
        data["train"]["init_from"] = Path(init_from).name
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def run_matches(run_dir: Path, config: dict[str, Any]) -> bool:
    """Whether ``run_dir`` holds checkpoints trained with ``config`` (compared as the
    trainer writes it, ``train_config.json`` of the newest checkpoint).  A run left by
    an older config of the cell must start afresh, never be resumed into the new one."""
    from weirdnet.train import TRAIN_CONFIG, TrainConfig, list_checkpoints

    saved = list_checkpoints(run_dir)
    if not saved:
        return False
    try:  # read by today's code: a key added since, at its default, changes nothing
        written = TrainConfig.from_dict(json.loads(
            (saved[-1] / TRAIN_CONFIG).read_text(encoding="utf-8"))).to_dict()
    except (OSError, ValueError):  # unreadable, or a key today's code does not know
        return False
    wanted = TrainConfig.from_dict(config).to_dict()
    return json.loads(json.dumps(written, default=str)) == \
        json.loads(json.dumps(wanted, default=str))


class CellStore:
    """Records under ``results_dir/cells`` and run directories under ``work_dir``."""

    def __init__(self, results_dir: Path, work_dir: Path):
        self.results_dir, self.work_dir = Path(results_dir), Path(work_dir)
        self.cells_dir = self.results_dir / "cells"

    def record_path(self, cell: SweepCell) -> Path:
        """Where the cell's record (JSON) lives."""
        return self.cells_dir / f"{cell.key}.json"

    def run_dir(self, cell: SweepCell) -> Path:
        """The cell's training run directory (checkpoints, log)."""
        return self.work_dir / cell.key

    def read(self, cell: SweepCell) -> dict[str, Any] | None:
        """The cell's record, or None (no record, or an unreadable one)."""
        path = self.record_path(cell)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def state(self, cell: SweepCell, config: dict[str, Any]) -> str:
        """"done", "stale" (recorded, or checkpointed, with another config than
        ``config``, the one ``cell.config_dict`` builds now), "failed", "interrupted"
        (checkpoints of this config but no record) or "pending"."""
        record = self.read(cell)
        if record is not None:
            if record.get("config_hash") != config_hash(config):
                return "stale"
            return "done" if record.get("status") == "done" else "failed"
        from weirdnet.train import list_checkpoints

        if run_matches(self.run_dir(cell), config):
            return "interrupted"
        return "stale" if list_checkpoints(self.run_dir(cell)) else "pending"

    def finished(self, cells) -> dict[str, dict[str, Any]]:
        """The records of ``cells`` (any with ``key`` and ``config_dict``) that are done
        with the config the code builds now, by key."""
        done = {}
        for cell in cells:
            record = self.read(cell)
            if record and record.get("status") == "done" and self.current(cell, record):
                done[cell.key] = record
        return done

    def current(self, cell, record: dict[str, Any]) -> bool:
        """Whether ``record`` was made with the config ``cell`` builds now (else its
        numbers answer another question: the record is stale)."""
        return record.get("config_hash") == config_hash(cell.config_dict(self.work_dir))

    def write(self, cell: SweepCell, record: dict[str, Any]) -> Path:
        """Store ``record`` for ``cell`` atomically; returns its path."""
        from weirdnet.run import write_atomic

        self.cells_dir.mkdir(parents=True, exist_ok=True)
        return write_atomic(self.record_path(cell), json.dumps(record, indent=2) + "\n")

    def all_records(self) -> list[dict[str, Any]]:
        """Every record stored (for reports), in file-name order."""
        if not self.cells_dir.is_dir():
            return []
        out = []
        for path in sorted(self.cells_dir.glob("*.json")):
            try:
                out.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
        return out
