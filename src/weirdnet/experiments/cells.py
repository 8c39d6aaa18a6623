"""One suite cell: a (task, variant, seed) training run under a budget, and its record.

A cell's config is the task's config file, then the budget's overrides, then the variant's
backbone keys, then the run name, directory and seed.  Its record (``<results>/cells/
<task>--<variant>--s<seed>.json``) holds the metrics, speed, memory, the full config, the
commit and the machine.  A record whose config differs from the one the current code
builds is stale and is run again; a cell whose run directory has checkpoints but no
record was interrupted and is resumed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .tasks import Task, configs_dir
from .variants import Variant

if TYPE_CHECKING:  # budgets builds its tables at import; cells needs only the type
    from .budgets import Budget


@dataclass(frozen=True)
class Cell:
    """``task`` trained with ``variant`` and ``seed`` under ``budget``."""

    task: Task
    variant: Variant
    seed: int
    budget: Budget

    @property
    def key(self) -> str:
        """``<task>--<variant>--s<seed>``: the record's file stem and the run name."""
        return f"{self.task.name}--{self.variant.name}--s{self.seed}"

    @property
    def info(self) -> dict[str, Any]:
        """What identifies the cell in its record."""
        return {"task": self.task.name, "variant": self.variant.name, "seed": self.seed,
                "budget": self.budget.name}

    def unsupported(self) -> str | None:
        """Why this cell cannot run (None: it can)."""
        return self.variant.unsupported(self.task.group)

    def config_dict(self, work_dir: Path) -> dict[str, Any]:
        """The full training config of this cell (a dict ``TrainConfig.from_dict`` takes)."""
        from weirdnet.train.config import merge, read_toml

        name = self.task.paper_config if self.budget.paper_configs else self.task.small_config
        config = read_toml(configs_dir() / name)
        for table in self.budget.task_overrides(self.task.name):
            config = merge(config, table)
        if self.variant.peer:  # a transformers model in place of the task's model
            config["model"] = peer_model(self.variant, config["model"])
        else:
            config = merge(config, {"model": self.variant.model_overrides(self.task.name,
                                                                          self.task.group)})
        return merge(config, {"run": {"name": self.key, "out_dir": str(work_dir),
                                      "seed": self.seed}})


WIDTHS = ("dim", "depth", "d_ff", "heads")


def peer_model(variant: Variant, model: dict[str, Any]) -> dict[str, Any]:
    """The ``model`` table of the peer ``variant`` standing in for the task's ``model``
    table: the peer matched to the non-embedding parameters of the GPT-2-style
    Transformer with the task model's widths (its preset's, then its own keys)."""
    from weirdnet.models.presets import get_preset

    from .matching import matched_variant

    backbone = dict(get_preset(model["preset"]).config["backbone"]) if "preset" in model \
        else {}
    backbone.update(model.get("backbone", {}))
    widths = {key: backbone[key] for key in WIDTHS if backbone.get(key) is not None}
    return matched_variant(variant.name, widths)[0]


def config_hash(config: dict[str, Any]) -> str:
    """A short hash of a cell config, without where its run directory lives."""
    data = json.loads(json.dumps(config, sort_keys=True, default=str))
    data.get("run", {}).pop("out_dir", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def run_matches(run_dir: Path, config: dict[str, Any]) -> bool:
    """Whether ``run_dir`` holds checkpoints trained with ``config`` (compared as the
    trainer writes it, ``train_config.json`` of the newest checkpoint).  A run left by
    an older config of the cell must start afresh, never be resumed into the new one."""
    from weirdnet.train.checkpoint import TRAIN_CONFIG, list_checkpoints
    from weirdnet.train.config import TrainConfig

    saved = list_checkpoints(run_dir)
    if not saved:
        return False
    try:
        written = json.loads((saved[-1] / TRAIN_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    wanted = json.loads(json.dumps(TrainConfig.from_dict(config).to_dict(), default=str))
    return written == wanted


class CellStore:
    """Records under ``results_dir/cells`` and run directories under ``work_dir``."""

    def __init__(self, results_dir: Path, work_dir: Path):
        self.results_dir, self.work_dir = Path(results_dir), Path(work_dir)
        self.cells_dir = self.results_dir / "cells"

    def record_path(self, cell: Cell) -> Path:
        """Where the cell's record (JSON) lives."""
        return self.cells_dir / f"{cell.key}.json"

    def run_dir(self, cell: Cell) -> Path:
        """The cell's training run directory (checkpoints, log)."""
        return self.work_dir / cell.key

    def read(self, cell: Cell) -> dict[str, Any] | None:
        """The cell's record, or None (no record, or an unreadable one)."""
        path = self.record_path(cell)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def state(self, cell: Cell, config: dict[str, Any]) -> str:
        """"done", "stale" (recorded, or checkpointed, with another config than
        ``config``, the one ``cell.config_dict`` builds now), "failed", "interrupted"
        (checkpoints of this config but no record) or "pending"."""
        record = self.read(cell)
        if record is not None:
            if record.get("config_hash") != config_hash(config):
                return "stale"
            return "done" if record.get("status") == "done" else "failed"
        from weirdnet.train.checkpoint import list_checkpoints

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

    def write(self, cell: Cell, record: dict[str, Any]) -> Path:
        """Store ``record`` for ``cell`` atomically; returns its path."""
        from weirdnet._atomic import write_atomic

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
