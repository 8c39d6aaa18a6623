"""The presets' table (models/presets.py, issue 63): one row per preset builds exactly the
presets the code before the table built (``presets_snapshot.json``, taken from that code:
names, order, model classes, configs, sources, stated counts and notes)."""

import dataclasses
import json
from pathlib import Path

import pytest

from weirdnet.models.presets import DATA, PRESETS, ROWS

SNAPSHOT = json.loads((Path(__file__).with_name("presets_snapshot.json")).read_text())


def _as_json(preset) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(preset)))


def test_the_table_names_the_presets_in_the_order_they_had():
    assert list(PRESETS) == [name for name, _ in SNAPSHOT]
    assert len(ROWS) == len(PRESETS)  # one row each, no name twice


@pytest.mark.parametrize("name,before", SNAPSHOT, ids=[name for name, _ in SNAPSHOT])
def test_every_preset_is_as_before(name, before):
    assert _as_json(PRESETS[name]) == before


def test_every_row_says_where_its_sizes_come_from():
    for row in ROWS:
        assert bool(row.source) != bool(row.cpu_of), row.name
        if row.cpu_of:
            assert row.cpu_of in PRESETS and row.name == f"{row.cpu_of}-cpu", row.name
            base = next(r for r in ROWS if r.name == row.cpu_of)
            assert (row.family, DATA[row.data].model) == (base.family, DATA[base.data].model)
        assert row.data in DATA, row.name
