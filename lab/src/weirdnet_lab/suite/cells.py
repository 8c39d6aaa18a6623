"""One suite cell: a (task, variant, seed) training run under a budget.

A cell's config is the task's config file, then the budget's overrides, then the variant's
backbone keys, then the run name, directory and seed.  Its record (``<results>/cells/
<task>--<variant>--s<seed>.json``, kept by :mod:`weirdnet_lab.sweep.store`) holds the
metrics, speed, memory, the full config, the commit and the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weirdnet_lab.suite.tasks import Task, configs_dir
from weirdnet_lab.variants import Variant

if TYPE_CHECKING:  # budgets builds its tables at import; cells needs only the type
    from weirdnet_lab.suite.budgets import Budget


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
        """The full training config of this cell (a dict ``TrainConfig.from_dict`` takes);
        under a curriculum it starts from the weights of its last stage."""
        from weirdnet.config import merge

        config = self._own_config(work_dir)
        stages = self._stages(config)
        if stages:
            config = merge(config, {"train": {"init_from": str(_run_dir(stages[-1]))}})
        return config

    def stage_configs(self, work_dir: Path) -> list[dict[str, Any]]:
        """The configs of this cell's curriculum stages (``budget.stages``), in training
        order: the cell's own config with each stage's tables over it, each starting from
        the weights of the one before, run ``<key>--stage<i>-<hash of its config>`` (a
        changed stage is a new run, and a new config of the cell)."""
        return self._stages(self._own_config(work_dir))

    def _stages(self, own: dict[str, Any]) -> list[dict[str, Any]]:
        """:meth:`stage_configs` built on the cell's ``own`` config."""
        from weirdnet.config import merge
        from weirdnet_lab.sweep.store import config_hash

        stages: list[dict[str, Any]] = []
        for number, table in enumerate(self.budget.stages.get(self.task.name, ()), 1):
            config = merge(own, table)
            if stages:
                config = merge(config, {"train": {"init_from": str(_run_dir(stages[-1]))}})
            name = f"{self.key}--stage{number}-{config_hash(config)[:8]}"
            stages.append(merge(config, {"run": {"name": name}}))
        return stages

    def _own_config(self, work_dir: Path) -> dict[str, Any]:
        """The cell's config before any curriculum: task, budget, variant, run."""
        from weirdnet.config import merge, read_toml

        name = self.task.paper_config if self.budget.paper_configs else self.task.small_config
        config = read_toml(configs_dir() / name)
        for table in self.budget.task_overrides(self.task.name):
            config = merge(config, table)
        if self.variant.peer:  # a transformers model in place of the task's model
            config["model"] = peer_model(self.variant, config["model"])
        else:
            config = merge(config, {"model": self.variant.model_overrides(self.task.name,
                                                                          self.task.group)})
            if self.variant.matched:  # its sizes turned to the reference's count
                config = merge(config, {"model": {"backbone": matched_sizes(
                    self.variant, config["model"])}})
        return merge(config, {"run": {"name": self.key, "out_dir": str(work_dir),
                                      "seed": self.seed}})


def _run_dir(config: dict[str, Any]) -> Path:
    """Where the run of a training ``config`` dict lives."""
    return Path(config["run"]["out_dir"]) / config["run"]["name"]


WIDTHS = ("dim", "depth", "d_ff", "heads")


def full_backbone(model: dict[str, Any]) -> dict[str, Any]:
    """The backbone keys of a ``model`` table: its preset's, then its own."""
    from weirdnet.models import get_preset

    backbone = dict(get_preset(model["preset"]).config["backbone"]) if "preset" in model \
        else {}
    backbone.update(model.get("backbone", {}))
    return backbone


def _widths(model: dict[str, Any]) -> dict[str, Any]:
    """The sizes (:data:`WIDTHS`) of the task's ``model`` table."""
    backbone = full_backbone(model)
    return {key: backbone[key] for key in WIDTHS if backbone.get(key) is not None}


def peer_model(variant: Variant, model: dict[str, Any]) -> dict[str, Any]:
    """The ``model`` table of the peer ``variant`` standing in for the task's ``model``
    table: the peer matched to the non-embedding parameters of the GPT-2-style
    Transformer with the task model's widths."""
    from weirdnet_lab.matching import matched_variant

    return matched_variant(variant.name, _widths(model))[0]


def matched_sizes(variant: Variant, model: dict[str, Any]) -> dict[str, Any]:
    """The sizes (:data:`WIDTHS`) that match the weirdnet ``variant`` built on the task's
    ``model`` table to the non-embedding parameters of the GPT-2-style Transformer with
    the task model's widths, as the peers are matched (its feed-forward width)."""
    from weirdnet_lab.matching import matched_variant

    backbone = matched_variant(variant.name, _widths(model))[0]["backbone"]
    return {key: backbone[key] for key in WIDTHS if key in backbone}


