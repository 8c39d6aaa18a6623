"""Run the two test tiers under line coverage, time each, and check the coverage guard
(issue 74): one script for `.ci/run` and for a contributor.

    python .ci/tiers.py [--slow-workers N] [--record] [--fast-only] [--keep DIR]
                        [--slow-uncovered]

- the fast tier: the README's command, ``python -m pytest -q``, as written;
- the slow tier: ``python -m pytest -q -m slow`` (with ``-n N --dist loadgroup`` from
  pytest-xdist when N > 1);
- each under coverage, started by ``COVERAGE_PROCESS_START`` (pyproject.toml's
  ``[tool.coverage.*]``) in pytest and in every Python subprocess a test starts;
- then the line coverage of src/weirdnet by the fast tier and by both tiers, and the
  guard: the fast tier covers at least 90% of the lines both tiers cover.

Each tier's wall time, counts and the two coverage figures are printed; ``--record``
writes them, with the machine, versions and commit, to lab/results/test_tiers.json and
.md, the record the README's test paragraph quotes (tests/test_readme.py checks it).
``--fast-only`` runs the fast tier alone and reports its own coverage (no guard).
``--slow-uncovered`` (what ``.ci/run`` gives) runs the slow tier without coverage (the
line tracer costs the Triton interpreter's tests about 1.7 times their time) and holds
the fast tier's lines to the guard against the lines both tiers covered in the record
(lab/results/test_tiers.json, which ``--record`` rewrites with both tiers covered); a
record without them runs the slow tier under coverage as without the option.

Exit status: the first failing tier's pytest status, else 1 if the guard fails, else 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "lab" / "results" / "test_tiers.json"
FAST = ["python", "-m", "pytest", "-q"]
"""The README's test command (`.ci/run` checks the README still gives it)."""
SLOW = ["python", "-m", "pytest", "-q", "-m", "slow"]
GUARD = 0.90
"""The share of the lines both tiers cover that the fast tier must cover."""


def _counts(junit: Path) -> dict[str, int]:
    """passed, failed, errors and skipped tests of a pytest JUnit XML report."""
    suites = ET.parse(junit).getroot()
    suites = suites.findall("testsuite") if suites.tag == "testsuites" else [suites]
    total = {key: sum(int(s.get(key, 0)) for s in suites)
             for key in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"],
            "skipped": total["skipped"], "tests": total["tests"]}


def run_tier(name: str, command: list[str], work: Path, covered: bool = True) -> dict:
    """Run one tier, under coverage unless ``covered`` is false (data in work/name/); its
    status, time and counts."""
    data = work / name
    data.mkdir()
    junit = work / f"{name}.xml"
    env = dict(os.environ)
    if covered:
        env.update(COVERAGE_PROCESS_START=str(ROOT / "pyproject.toml"),
                   COVERAGE_FILE=str(data / ".coverage"))
    else:
        env.pop("COVERAGE_PROCESS_START", None)
    if "-n" in command:  # one thread a worker: N workers share N cores (unless set)
        env.setdefault("OMP_NUM_THREADS", "1")
    args = [sys.executable if command[0] == "python" else command[0], *command[1:],
            "-p", "no:cacheprovider", f"--junitxml={junit}"]
    print(f"--- {name} tier: {' '.join(command)}"
          f"{'' if covered else ' (without coverage)'}", flush=True)
    start, load, cpu = time.monotonic(), os.getloadavg()[0], _children_cpu()
    status = subprocess.run(args, cwd=ROOT, env=env).returncode
    seconds, cpu = time.monotonic() - start, _children_cpu() - cpu
    counts = _counts(junit) if junit.is_file() else {}
    print(f"--- {name} tier: {counts.get('tests', 0)} tests in {seconds / 60:.1f} min, "
          f"{cpu / 60:.1f} CPU min (status {status}, load average {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end)", flush=True)
    return {"command": " ".join(command), "status": status, "covered": covered,
            "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu, 1), "load_start": round(load, 2),
            "load_end": round(os.getloadavg()[0], 2), **counts}


def _children_cpu() -> float:
    """CPU seconds (user + system) of the ended child processes waited for: pytest and
    every process it waited for.  On a busy machine the wall time grows with the load;
    this stays what the tier itself computed."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def collected(command: list[str]) -> int:
    """How many tests ``command`` would run (pytest --collect-only)."""
    done = subprocess.run([sys.executable, *command[1:], "--collect-only", "-p",
                           "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    found = re.search(r"^(\d+)/\d+ tests collected|^(\d+) tests? collected", done.stdout, re.M)
    if not found:
        raise SystemExit(f"could not count the tests of {' '.join(command)}:\n"
                         + done.stdout[-2000:] + done.stderr[-2000:])
    return int(found[1] or found[2])


def covered_lines(folder: Path) -> dict[str, set[int]]:
    """src/weirdnet's file (relative to src/) -> its statements covered, over a tier's data
    files.  Only this tree's files count: a child that imported weirdnet from elsewhere
    (another checkout on its path) measured other code."""
    from coverage import Coverage, CoverageData

    source = (ROOT / "src").resolve()
    analysis = Coverage(data_file=None, config_file=False)
    lines: dict[str, set[int]] = {}
    for path in folder.glob(".coverage*"):
        data = CoverageData(str(path))
        data.read()
        for file in data.measured_files():
            resolved = Path(file).resolve()
            if not resolved.is_relative_to(source / "weirdnet"):
                continue
            rel = resolved.relative_to(source).as_posix()
            if rel not in _STATEMENTS:
                _STATEMENTS[rel] = set(analysis.analysis2(str(resolved))[1])
            lines.setdefault(rel, set()).update(set(data.lines(file) or ()) & _STATEMENTS[rel])
    return lines


_STATEMENTS: dict[str, set[int]] = {}
"""Each measured file's executable lines (coverage's parse), read once."""


def statements() -> int:
    """Executable lines of src/weirdnet (coverage's own count)."""
    from coverage import Coverage

    cov = Coverage(data_file=None, config_file=str(ROOT / "pyproject.toml"))
    total = 0
    for path in sorted((ROOT / "src" / "weirdnet").rglob("*.py")):
        total += len(cov.analysis2(str(path))[1])
    return total


def coverage_figures(fast: dict[str, set[int]], slow: dict[str, set[int]]) -> dict:
    both = {f: fast.get(f, set()) | slow.get(f, set()) for f in {*fast, *slow}}
    n_fast = sum(map(len, fast.values()))
    n_both = sum(map(len, both.values()))
    total = statements()
    return {"statements": total, "fast_lines": n_fast, "both_lines": n_both,
            "fast_percent": round(100 * n_fast / total, 1),
            "both_percent": round(100 * n_both / total, 1),
            "fast_share_of_both": round(n_fast / n_both, 4) if n_both else 0.0,
            "only_slow": {f: len(both[f] - fast.get(f, set())) for f in sorted(both)
                          if len(both[f] - fast.get(f, set())) >= 20}}


def recorded_both_lines() -> tuple[int, str] | None:
    """The lines both tiers covered in the record and the record's commit; None (and a
    line saying so) when the record holds no coverage of both tiers."""
    try:
        record = json.loads(RECORD.read_text(encoding="utf-8"))
        return int(record["coverage"]["both_lines"]), record["machine"]["commit"]
    except (OSError, ValueError, KeyError, TypeError):
        print(f"--- {RECORD.relative_to(ROOT)} holds no coverage of both tiers (`python "
              ".ci/tiers.py --slow-workers 2 --record` writes it): the slow tier runs under "
              "coverage after all", flush=True)
        return None


def against_record(figures: dict, recorded: tuple[int, str]) -> dict:
    """The guard's figures with the record's both-tier lines (the slow tier ran without
    coverage): the fast tier's lines now over the lines both tiers covered then."""
    both, commit = recorded
    print(f"--- the slow tier ran without coverage: both tiers' lines are the record's "
          f"({both}, commit {commit[:12]})")
    both = max(both, figures["fast_lines"])
    return {**figures, "both_lines": both,
            "both_percent": round(100 * both / figures["statements"], 1),
            "fast_share_of_both": round(figures["fast_lines"] / both, 4), "only_slow": {}}


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) \
        if Path("/proc/cpuinfo").is_file() else platform.processor()
    import torch

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=ROOT, capture_output=True, text=True).stdout.strip())
    if not commit:  # an exported copy of a commit (git archive), measured outside the repo
        commit, dirty = os.environ.get("WEIRDNET_TIERS_COMMIT", "unknown"), False
    return {"cpu": cpu, "cores": os.cpu_count(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "(not set)"),
            "python": platform.python_version(),
            "torch": torch.__version__, "commit": commit + (" (with changes)" if dirty else ""),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")}


def write_record(record: dict) -> None:
    RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    RECORD.with_suffix(".md").write_text(render(record), encoding="utf-8")


def render(record: dict) -> str:
    """The record as the markdown page next to it (regenerated from the JSON)."""
    m, c = record["machine"], record["coverage"]
    rows = [f"| {name} | `{t['command']}` | {t['tests']:,} | not run in this record "
            "| | | | | |" if t.get("not_run") else
            f"| {name} | `{t['command']}` | {t['tests']:,} | {t['passed']:,} | "
            f"{t['skipped']:,} | {t['failed'] + t['errors']:,} | {t['seconds'] / 60:.1f} | "
            f"{t['cpu_seconds'] / 60:.1f} | {t['load_start']:.1f} / {t['load_end']:.1f} |"
            for name, t in record["tiers"].items()]
    both = (f"both tiers {c['both_lines']:,} ({c['both_percent']}%): the fast tier covers "
            f"{100 * c['fast_share_of_both']:.1f}% of the lines both tiers cover (the "
            f"guard: at least {100 * GUARD:.0f}%)." if c.get("both_lines") else
            "the slow tier was not run in this record.")
    return "\n".join([
        "# The test tiers, measured",
        "",
        f"Recorded by `{record['command']}` ({m['date']}, commit {m['commit']}) on a "
        f"{m['cores']}-core {m['cpu']}, Python {m['python']}, torch {m['torch']}, "
        f"OMP_NUM_THREADS {m['OMP_NUM_THREADS']}; under line coverage "
        "(pyproject.toml's `[tool.coverage.*]`, subprocesses included). Regenerate with "
        "the same command; lab/results/test_tiers.json holds the numbers.",
        "",
        "| tier | command | tests | passed | skipped | failed | minutes | CPU minutes | "
        "load average (start / end) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Line coverage of src/weirdnet ({c['statements']:,} statements): the fast tier "
        f"{c['fast_lines']:,} lines ({c['fast_percent']}%); " + both,
        "",
        "CPU minutes: user and system time of pytest and every process it waited for; "
        "on a busy machine the wall time grows with the load average, the CPU time "
        "hardly (the tests run one thread per process).",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow-workers", type=int, default=1,
                        help="pytest-xdist workers for the slow tier (1: none)")
    parser.add_argument("--record", action="store_true",
                        help=f"write {RECORD.relative_to(ROOT)} and its .md")
    parser.add_argument("--fast-only", action="store_true", help="the fast tier alone")
    parser.add_argument("--slow-uncovered", action="store_true",
                        help="run the slow tier without coverage and guard the fast tier "
                             "against the lines both tiers covered in the record")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the coverage data files (DIR/fast, DIR/slow) and the "
                             "JUnit reports (per-test times) there")
    args = parser.parse_args(argv)
    if args.slow_uncovered and (args.record or args.fast_only):
        parser.error("--slow-uncovered measures no both-tier coverage to record; "
                     "--record runs both tiers under coverage")
    recorded = recorded_both_lines() if args.slow_uncovered else None
    slow = SLOW + (["-n", str(args.slow_workers), "--dist", "loadgroup"]
                   if args.slow_workers > 1 else [])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiers = {"fast": run_tier("fast", FAST, work)}
        if not args.fast_only:
            tiers["slow"] = run_tier("slow", slow, work, covered=recorded is None)
        else:
            tiers["slow"] = {"command": " ".join(SLOW), "tests": collected(SLOW),
                             "not_run": True}
        fast_lines = covered_lines(work / "fast")
        slow_lines = covered_lines(work / "slow") if tiers["slow"].get("covered") else {}
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
    figures = coverage_figures(fast_lines, slow_lines)
    if recorded is not None:
        figures = against_record(figures, recorded)
    print(f"--- line coverage of src/weirdnet ({figures['statements']} statements): fast "
          f"tier {figures['fast_lines']} ({figures['fast_percent']}%), both tiers "
          f"{figures['both_lines']} ({figures['both_percent']}%); the fast tier covers "
          f"{100 * figures['fast_share_of_both']:.1f}% of both tiers' lines")
    for file, n in figures["only_slow"].items():
        print(f"    {n:5d} lines only the slow tier covers: {file}")
    status = next((t["status"] for t in tiers.values() if t.get("status")), 0)
    guard_ok = args.fast_only or figures["fast_share_of_both"] >= GUARD
    if not guard_ok:
        print(f"the coverage guard failed: the fast tier covers "
              f"{100 * figures['fast_share_of_both']:.1f}% of the lines both tiers cover "
              f"(at least {100 * GUARD:.0f}%)", file=sys.stderr)
    if args.record:
        figures.pop("only_slow")
        if args.fast_only:
            for key in ("both_lines", "both_percent", "fast_share_of_both"):
                figures.pop(key)
        given = sys.argv[1:] if argv is None else argv
        write_record({"command": " ".join(["python .ci/tiers.py", *given]),
                      "machine": machine(), "tiers": tiers, "coverage": figures})
        print(f"--- wrote {RECORD.relative_to(ROOT)} and its .md")
    return status or (0 if guard_ok else 1)


if __name__ == "__main__":
    sys.exit(main())
