"""What the checks of the docs' numbers against the stored records share: where the
records are, the numbers written in a text, a page's section and the records it links."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "lab" / "results"
"""Where the stored records are (the one line to change when they move)."""

NUMBER = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w.]\d|\d)")


def numbers(text: str) -> list[str]:
    """Every number written in ``text`` ("2,971", "2.397", "64"), as written, in order."""
    return NUMBER.findall(text)


def section(page: Path, heading: str) -> str:
    """The text of ``page`` under ``heading`` (a whole line, "## ..."), up to the next
    heading of level 2."""
    return page.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def linked_records(text: str) -> list[str]:
    """The paths under :data:`RESULTS` that ``text`` links (as a docs page does:
    ``results/...``, docs/results being a link to lab/results)."""
    return re.findall(r"\]\(results/([^)#]+)\)", text)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every body row of the Markdown tables in ``text`` (header and rule
    rows left out)."""
    lines = text.splitlines()
    body = [line for i, line in enumerate(lines) if line.startswith("|")
            and not line.startswith("|---")
            and not (i + 1 < len(lines) and lines[i + 1].startswith("|---"))]
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in body]


# "The second line runs the fast tier of the tests: 1,234 tests, 8.5 CPU minutes (21 min
# on the clock on a busy 2-core machine); `--slow` adds the slow tier's 3,456 ..."
TEST_TIERS = re.compile(
    r"runs the fast tier of the tests: ([\d,]+) tests, ([\d.]+) CPU minutes \((\d+) min on "
    r"the clock on a (busy|quiet) 2-core machine\); `--slow` adds the slow tier's ([\d,]+)")
"""The README's (and docs/index.md's) sentence on the tests: fast count, CPU minutes,
wall minutes, busy or quiet, slow count (from lab/results/test_tiers.json)."""
TIERS_RECORD = RESULTS / "test_tiers.json"


def tier_claims(path: Path) -> tuple[str, ...]:
    """The groups of :data:`TEST_TIERS` in ``path`` (line breaks read as spaces)."""
    found = TEST_TIERS.search(" ".join(path.read_text(encoding="utf-8").split()))
    assert found, f"{path.name} no longer says how many tests each tier has and how long " \
                  "the fast one takes"
    return found.groups()
