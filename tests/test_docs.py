"""Cheap checks of the documentation, without building it (`.ci/run` runs
`mkdocs build --strict`, which checks every link, anchor and API reference).

- every page that mkdocs.yml's nav names exists, and every page of docs/ (generated
  reports included) is in the nav, so none is reachable only by its address;
- every relative link in README.md points at a file or folder that exists;
- every table included from a generated report by line range
  (``--8<-- "lab/results/....md:START:END"``) is still exactly one whole table
  there, so a report rewritten with more or fewer lines fails here, not silently on the
  site;
- (the numbers of docs/papers.md's headline results, the README's former results table,
  are checked against their records in tests/test_docs_papers.py; the README's own
  results rows in tests/test_readme.py);
- the README and docs/index.md state the same test counts and time, and the counts add
  up to within 10% of what pytest collects (tests/test_readme.py checks they are the
  record's).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.docs import tier_claims

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS = ROOT / "mkdocs.yml"
SNIPPET = re.compile(r'^--8<-- "([^"]+?)(?::(\d+):(\d+))?"\s*$', re.M)


def _nav_pages() -> list[str]:
    """The .md paths of mkdocs.yml's nav (``- page.md`` or ``- Title: page.md``)."""
    text = MKDOCS.read_text(encoding="utf-8")
    nav = text[text.index("\nnav:"):]
    return re.findall(r"^\s*- (?:[^\n]*?: )?([\w./-]+\.md)\s*$", nav, re.M)


def _snippets() -> list[tuple[str, str, int | None, int | None]]:
    found = []
    for page in sorted(DOCS.glob("*.md")) + sorted(DOCS.glob("api/*.md")):
        for match in SNIPPET.finditer(page.read_text(encoding="utf-8")):
            start, end = match[2], match[3]
            found.append((page.name, match[1], start and int(start), end and int(end)))
    return found


def test_the_nav_lists_pages():
    assert len(_nav_pages()) >= 10


@pytest.mark.parametrize("page", _nav_pages())
def test_every_nav_page_exists(page):
    assert (DOCS / page).is_file(), f"mkdocs.yml's nav names docs/{page}, which is missing"


def test_every_page_is_in_the_nav():
    """docs/results links to lab/results: a new report folder needs a nav line."""
    pages = {str((Path(folder) / name).relative_to(DOCS))
             for folder, _, names in os.walk(DOCS, followlinks=True)
             for name in names if name.endswith(".md")}
    assert "results/lm/lm.md" in pages
    missing = sorted(pages - set(_nav_pages()))
    assert not missing, f"pages of docs/ that mkdocs.yml's nav does not list: {missing}"


def test_every_relative_link_in_the_readme_exists():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]
    assert relative, "README.md links to no file of the repository"
    missing = [t for t in relative if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_the_reports_are_pages_of_the_site():
    assert (DOCS / "results").resolve() == (ROOT / "lab" / "results").resolve()


@pytest.mark.parametrize("page,path,start,end", _snippets())
def test_every_included_table_is_one_whole_table(page, path, start, end):
    source = ROOT / path
    assert source.is_file(), f"docs/{page} includes {path}, which is missing"
    if start is None:
        return
    lines = source.read_text(encoding="utf-8").split("\n")
    chunk = lines[start - 1:end]
    where = f"docs/{page} includes {path}:{start}:{end}"
    assert chunk and all(line.startswith("|") for line in chunk), \
        f"{where}, but those lines are not all table rows; update the line numbers"
    assert len(chunk) >= 2 and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", chunk[1]), \
        f"{where}, but its second line is not a table's header separator"
    before = lines[start - 2] if start >= 2 else ""
    after = lines[end] if end < len(lines) else ""
    assert not before.startswith("|") and not after.startswith("|"), \
        f"{where}, which is only part of a table; update the line numbers"


def test_the_readme_and_the_home_page_state_one_test_count_and_time():
    """One source of the numbers: the README and docs/index.md say the same (issue 61)."""
    assert tier_claims(ROOT / "README.md") == tier_claims(DOCS / "index.md")


@pytest.mark.slow
def test_the_stated_test_count_is_what_pytest_collects():
    """The two tiers' stated counts add up to within 10% of what `pytest --slow
    --collect-only` finds (about 40 s)."""
    claims = tier_claims(ROOT / "README.md")
    about = int(claims[0].replace(",", "")) + int(claims[4].replace(",", ""))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--slow",
                           "-p", "no:cacheprovider"], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    collected = re.search(r"^(\d+) tests? collected", done.stdout, re.M)
    assert collected, done.stdout[-2000:] + done.stderr[-2000:]
    assert abs(about - int(collected[1])) <= 0.1 * int(collected[1]), \
        f"README.md says {about:,} tests in all; pytest collects {collected[1]}"
