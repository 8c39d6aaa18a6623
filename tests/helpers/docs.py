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


COMMAND_PAGES = ("README.md", "configs/README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
"""The pages whose command blocks a user runs (paths under :data:`ROOT`)."""

SHELL_LANGUAGES = ("", "bash", "sh", "shell", "console")
"""The languages of a fenced block of shell commands (none, or a shell's)."""


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """Every fenced block of a Markdown ``text``: (its language, the line number of its
    first line, its lines); an indented fence (inside a list item) counts too."""
    blocks, current = [], None
    for number, line in enumerate(text.split("\n"), 1):
        fence = re.fullmatch(r"\s*```\s*([\w+-]*)\s*", line)
        if current is None and fence:
            current = (fence[1], number + 1, [])
        elif current is not None and re.fullmatch(r"\s*```\s*", line):
            blocks.append(current)
            current = None
        elif current is not None:
            current[2].append(line)
    return blocks


PROGRAMS = ("weirdnet", "python", "pip", "torchrun", "nohup", "apt-get", "mkdocs")
"""The programs a command line of the docs starts with (other lines of a block without a
language are listings: a folder tree, printed output)."""


def shell_commands(page: str) -> list[tuple[int, int, list[str]]]:
    """Every command of the shell blocks of ``page``: (block number on the page, line
    number of the command, its words as the shell splits them, comments left out).  A
    line ending in a backslash goes on; ``a && b`` is two commands; a line that does not
    start with one of :data:`PROGRAMS` is not a command."""
    import shlex

    found = []
    text = (ROOT / page).read_text(encoding="utf-8")
    shell = [b for b in fenced_blocks(text) if b[0] in SHELL_LANGUAGES]
    for number, (_, first, lines) in enumerate(shell):
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            i += 1
            if line.split()[:1] and line.split()[0] not in PROGRAMS:
                continue
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                found.append((number, first + start, words[:cut]))
                words = words[cut + 1:]
    return [entry for entry in found if entry[2]]


# "The second line runs the fast tier of the tests: 1,234 tests, 8.5 CPU minutes (21 min
# on the clock on a busy 2-core machine); `--slow` adds the slow tier's 3,456 (...), 31
# min on the clock on two workers ..."
TEST_TIERS = re.compile(
    r"runs the fast tier of the tests: ([\d,]+) tests, ([\d.]+) CPU minutes \((\d+) min on "
    r"the clock on a (busy|quiet) 2-core machine\); `--slow` adds the slow tier's ([\d,]+) "
    r"\([^)]*\), (\d+) min on the clock on two workers")
"""The README's (and docs/index.md's) sentence on the tests: fast count, CPU minutes,
wall minutes, busy or quiet, slow count, slow wall minutes on two pytest-xdist workers
(from lab/results/test_tiers.json)."""
TIERS_RECORD = RESULTS / "test_tiers.json"


def tier_claims(path: Path) -> tuple[str, ...]:
    """The groups of :data:`TEST_TIERS` in ``path`` (line breaks read as spaces)."""
    found = TEST_TIERS.search(" ".join(path.read_text(encoding="utf-8").split()))
    assert found, f"{path.name} no longer says how many tests each tier has and how long " \
                  "the fast one takes"
    return found.groups()
