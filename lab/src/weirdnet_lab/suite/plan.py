"""Which cells the suite runs: the tables asked for, filtered by task and mechanism."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from weirdnet_lab.suite.budgets import Budget
from weirdnet_lab.suite.cells import Cell
from weirdnet_lab.suite.numbers import LRA_COLUMNS, TABLE_X_TASKS, UEA_COLUMNS
from weirdnet_lab.suite.tasks import TASKS, get_task
from weirdnet_lab.variants import MECHANISMS, get_variant


@dataclass(frozen=True)
class Table:
    """A table of the report: its (task, variant) pairs."""

    name: str
    title: str
    tasks: tuple[str, ...]
    variants: tuple[str, ...]


TABLES = (
    Table("main", "LRA (Weird-Net Table III, DBA Table 2), UEA (DBA Table 3) and "
          "byte-level LM", tuple(t.name for t in TASKS), tuple(m.name for m in MECHANISMS)),
    Table("table9", "W modes (Weird-Net Table IX)", LRA_COLUMNS,
          ("weird-a", "weird-a-exp", "ps")),
    Table("table10", "structures in the encoder (Weird-Net Table X)", TABLE_X_TASKS,
          ("weird-a", "weird-a-enc-b")),
    Table("table11", "structures in the decoder (Weird-Net Table XI)", ("lm",),
          ("weird-a", "weird-b")),
    Table("table12", "DBA d_p and d_in (DBA Table 12)", LRA_COLUMNS,
          ("dba", "dba-dp8", "dba-dp64", "dba-dp256", "dba-din12", "dba-din64")),
    Table("today", "The baselines the field uses today: the Transformer++ and the "
          "transformers peers, with Weird-Net with and without the Transformer++ options, "
          "on byte-level LM (issue 30)", ("lm",),
          ("weird-a", "weird-b", "weird-a-matched", "weird-b-matched", "weird-a-pp",
           "weird-b-pp", "softmax", "transformerpp",
           "llama", "mamba", "mamba2", "rwkv", "qwen3-next", "recurrent-gemma",
           "xlstm")),
    Table("dba-forms", "DBA as its authors' code runs it against eqs. 7-12 read literally "
          "(docs/design.md §4)", (*LRA_COLUMNS, *UEA_COLUMNS), ("dba", "dba-literal")),
)
TABLES_BY_NAME = {t.name: t for t in TABLES}
OPT_IN_TABLES = ("today",)
"""Tables run only when named: the ``transformers`` peers' CPU paths take hours a cell."""
DEFAULT_TABLES = tuple(name for name in TABLES_BY_NAME if name not in OPT_IN_TABLES)


def plan_cells(budget: Budget, tables: Sequence[str], tasks: Sequence[str] | None = None,
               variants: Sequence[str] | None = None,
               seeds: Sequence[int] | None = None) -> list[Cell]:
    """Every cell of ``tables`` (deduplicated: a cell shared by two tables runs once),
    restricted to ``tasks`` and ``variants`` when given; unsupported cells and the tasks
    the budget excludes are left out.  Seeds: ``seeds``, else the budget's per variant."""
    for name in tables:
        if name not in TABLES_BY_NAME:
            raise ValueError(f"unknown table {name!r}; known: {', '.join(TABLES_BY_NAME)}")
    for name in tasks or ():
        get_task(name)
    for name in variants or ():
        get_variant(name)
    cells: dict[str, Cell] = {}
    for table in (TABLES_BY_NAME[n] for n in tables):
        for task in table.tasks:
            if (tasks and task not in tasks) or task in budget.excluded:
                continue
            for variant in table.variants:
                if variants and variant not in variants:
                    continue
                for seed in seeds or budget.seeds_for(variant):
                    cell = Cell(get_task(task), get_variant(variant), seed, budget)
                    if cell.unsupported() is None:
                        cells.setdefault(cell.key, cell)
    return list(cells.values())
