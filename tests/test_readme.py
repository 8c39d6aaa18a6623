"""The README a newcomer reads (issue 63): short, its Python example runs, and every number
of its results rows is the stored record's.

- at most 150 lines, none over 300 characters; the two commands, the first exactly the
  main job's;
- the ```python block (at most 15 lines) runs as written;
- the results: at most 8 one-line rows, each linking to a docs page; every number of a
  row is a number of the record that row stands on (:data:`EVIDENCE`), and the docs page
  it links to links that record, so a record rewritten with other numbers fails here.

The records' folder is named once, :data:`helpers.docs.RESULTS`.
"""

import bisect
import importlib.util
import json
import re

import pytest

from helpers.docs import (
    RESULTS,
    ROOT,
    TIERS_RECORD,
    linked_records,
    numbers,
    section,
    table_rows,
    tier_claims,
)

README = ROOT / "README.md"

EVIDENCE = {
    "main job: validation bits per character": "quickstart_cpu.md",
    "byte LM, 10 CPU-minutes, 1024-byte context, test bits/byte": "lm/lm.md",
    "byte LM, 10 CPU-minutes, 4096-byte context, test bits/byte": "lm/lm.md",
    "MQAR at Zoology's recipe, L = 64, test accuracy %": "recall-zoology/recall-zoology.md",
    "Fashion-MNIST pixel by pixel, `laptop` budget, accuracy %": "suite-laptop/report.md",
    "`weird_scan` forward + backward at L = 16384, ms": "scan_cpu.md",
    "cached decoding at context 16384, batch 1, tokens/s": "decode_cpu.md",
    "training Weird-Net A at a 1024K-byte context, GiB and tokens/s": "speed_long_cpu.md",
}
"""Each README results row (by its first cell) and the record (under RESULTS) behind it."""

FIRST_COMMAND = 'pip install -e ".[dev]" -e ./lab && weirdnet train configs/quickstart.toml'


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _rows() -> list[list[str]]:
    """The cells of each row of the README's results table (after its header)."""
    return table_rows(section(README, "## Results"))


def _numbers(text: str) -> set[str]:
    """Every number written in ``text`` ("2,971", "2.397", "64"), as written."""
    return set(numbers(text))


def test_the_readme_is_short():
    lines = _text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150)"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 300]
    assert not long, f"README.md lines over 300 characters: {long}"


def test_the_readme_gives_the_two_commands():
    blocks = re.findall(r"^```\n(.*?)^```", _text(), re.M | re.S)
    assert blocks and blocks[0].splitlines() == [FIRST_COMMAND, "python -m pytest -q"]
    assert "pip install torch==" in _text()  # the CPU build first, where there is no GPU


def test_the_python_example_runs():
    """The README's ```python block, as written (a few seconds)."""
    code = re.findall(r"^```python\n(.*?)^```", _text(), re.M | re.S)
    assert len(code) == 1 and len(code[0].splitlines()) <= 15
    exec(compile(code[0], "README.md", "exec"), {})


def test_the_results_are_at_most_eight_rows_each_with_its_record():
    rows = _rows()
    assert 1 <= len(rows) <= 8
    assert [row[0] for row in rows] == list(EVIDENCE), \
        "the README's results rows and EVIDENCE (their records) must name the same rows"


@pytest.mark.parametrize("label", list(EVIDENCE))
def test_every_number_of_a_row_is_its_records(label):
    """Each number of the row (label and result) is written in the row's record, and the
    docs page the row links to links that record."""
    row = next(row for row in _rows() if row[0] == label)
    record = RESULTS / EVIDENCE[label]
    found = _numbers(record.read_text(encoding="utf-8"))
    cells = " ".join(row[:-1])
    missing = sorted(_numbers(cells) - found)
    assert not missing, f"README row {label!r}: {missing} are not numbers of {record}"
    link = re.fullmatch(r"\[[^]]+\]\((docs/[\w./-]+\.md)(#[\w-]+)?\)", row[-1])
    assert link, f"README row {label!r} must end with a link to a docs page"
    page = (ROOT / link[1]).read_text(encoding="utf-8")
    assert f"results/{EVIDENCE[label]}" in page, \
        f"{link[1]}, which README row {label!r} links to, does not link its record"


SPEED_PAGE = ROOT / "docs" / "speed.md"
SPEED_SECTION = "## The README's headline speed results, in full (ours)"


def _rounds_from(shown: str, written: list[float]) -> bool:
    """Whether ``shown`` ("7484", "12.1") is some number of ``written`` (sorted) rounded
    to the decimals it shows."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    value, half = float(shown), 0.5 * 10.0 ** -decimals
    i = bisect.bisect_left(written, value - half)
    return i < len(written) and written[i] <= value + half


def test_every_measured_number_of_the_speed_tables_is_in_their_records():
    """The table the README's speed rows came from (docs/speed.md): each number of three
    or more digits in a row is written in one of the records the section links (a
    measured number that drifts from its record fails here).  Smaller numbers (sizes,
    counts of layers) are conditions, not results."""
    speed = section(SPEED_PAGE, SPEED_SECTION)
    linked = linked_records(speed)
    assert linked, "the section links no records"
    texts = []
    for link in linked:
        path = RESULTS / link
        files = sorted(path.rglob("*")) if path.is_dir() else [path, *path.parent.glob("*.json")]
        texts += [f.read_text(encoding="utf-8", errors="ignore") for f in files
                  if f.suffix in (".md", ".json")]
    written = sorted({float(n.replace(",", "")) for n in _numbers(" ".join(texts))})
    rows = [" | ".join(cells) for cells in table_rows(speed)]
    assert rows, "the section has no table rows"
    missing = [n for row in rows for n in (m.replace(",", "") for m in _numbers(row))
               if len(n.replace(".", "")) >= 3 and not _rounds_from(n, written)]
    assert not missing, f"numbers of docs/speed.md's table in no linked record: {missing}"


def _tiers_script():
    spec = importlib.util.spec_from_file_location("tiers", ROOT / ".ci" / "tiers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_test_counts_and_times_are_the_records():
    """The README's test sentence (issue 74): the fast tier's count, CPU minutes and wall
    minutes and the slow tier's count and wall minutes on two workers are those of
    lab/results/test_tiers.json, whose page
    is rendered from it; the README's test command is the fast tier's command there and
    in .ci/tiers.py, which wrote it."""
    record = json.loads(TIERS_RECORD.read_text(encoding="utf-8"))
    fast, slow = record["tiers"]["fast"], record["tiers"]["slow"]
    count, cpu, wall, busy, slow_count, slow_wall = tier_claims(README)
    assert int(count.replace(",", "")) == fast["tests"]
    assert cpu == f"{fast['cpu_seconds'] / 60:.1f}"
    assert int(wall) == round(fast["seconds"] / 60)
    assert busy == ("busy" if fast["load_start"] > 1.5 else "quiet")
    assert int(slow_count.replace(",", "")) == slow["tests"]
    assert "-n 2" in slow["command"] and int(slow_wall) == round(slow["seconds"] / 60)
    tiers = _tiers_script()
    assert fast["command"] == " ".join(tiers.FAST) == "python -m pytest -q"
    assert TIERS_RECORD.with_suffix(".md").read_text(encoding="utf-8") == tiers.render(record)
