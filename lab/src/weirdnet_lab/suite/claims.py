"""The orderings the papers claim, judged on our measured numbers with their intervals.

Each :class:`Claim` says where the paper makes it and returns a verdict with the numbers
behind it.  A comparison of two scores is decided only when the 95% interval of their
difference excludes 0 (standard errors from each score's interval, added in quadrature:
over seeds, or the test set's binomial interval for one seed; see
:class:`~.report.Score`):

- "holds": every comparison the claim needs is decided in its favour;
- "does not hold": enough are decided against it that it cannot hold;
- "undecided": neither (the gaps are inside the intervals, or a score has none, e.g.
  one seed of bits per byte);
- "not measured": a cell is missing.

A claim about an average over tasks (the LRA average) needs every task.  Where a budget
runs only some of them (the ``laptop`` budget runs ListOps and Image), it is judged on the
average over the tasks it ran, where the Transformer learned them, and its verdict says
so: "holds on the tasks run", "does not hold on the tasks run" or "undecided on the tasks
run".  That is evidence about those tasks, not the paper's five-task claim.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from weirdnet_lab.suite.numbers import LRA_COLUMNS, TABLE_X_TASKS, UEA_COLUMNS
from weirdnet_lab.suite.report import Results, Score
from weirdnet_lab.suite.tasks import get_task
from weirdnet_lab.sweep.intervals import Z95
from weirdnet_lab.variants import VARIANTS

Verdict = tuple[str, str]
BETTER, WORSE, UNDECIDED = "better", "worse", "undecided"


@dataclass(frozen=True)
class Claim:
    source: str
    text: str
    check: Callable[[Results], Verdict]


def _label(name: str) -> str:
    return VARIANTS[name].label


def difference(a: Score, b: Score) -> Score:
    """``a - b`` with the 95% interval of the difference: the standard errors of the two
    scores' intervals added in quadrature; no interval when either has none."""
    mean = a.mean - b.mean
    if a.se is None or b.se is None:
        return Score(mean, n=1)
    half = Z95 * math.sqrt(a.se ** 2 + b.se ** 2)
    return Score(mean, n=1, low=mean - half, high=mean + half)


def compare(a: Score, b: Score, higher_is_better: bool = True) -> str:
    """BETTER or WORSE when the 95% interval of a - b (:func:`difference`) excludes 0 (in
    the direction that is better or worse), else UNDECIDED; UNDECIDED when either has no
    interval."""
    if a.se is None or b.se is None:
        return UNDECIDED
    gap = difference(a, b) if higher_is_better else difference(b, a)
    if gap.low > 0:
        return BETTER
    if gap.high < 0:
        return WORSE
    return UNDECIDED


def _verdict(outcomes: list[str], need: int, detail: str) -> Verdict:
    """"holds" when at least ``need`` outcomes are BETTER, "does not hold" when so many
    are WORSE that ``need`` cannot be reached, else "undecided"."""
    if outcomes.count(BETTER) >= need:
        return "holds", detail
    if len(outcomes) - outcomes.count(WORSE) < need:
        return "does not hold", detail
    return "undecided", detail


def _scope(results: Results, tasks: tuple[str, ...], names: tuple[str, ...]):
    """(the tasks to average over, the verdict's suffix, the detail's prefix): all of
    ``tasks``, else the tasks run (:meth:`~.report.Results.common_tasks`) with a suffix
    and prefix saying so; None when no task is left."""
    run = results.common_tasks(tasks, names)
    if not run:
        return None
    if run == tuple(tasks):
        return run, "", ""
    labels = ", ".join(get_task(t).label for t in run)
    return run, " on the tasks run", f"{labels} only ({len(run)} of {len(tasks)} tasks): "


def _scoped(verdict: Verdict, suffix: str, prefix: str) -> Verdict:
    return verdict[0] + suffix, prefix + verdict[1]


def _best_average(subject: str, among: tuple[str, ...], tasks=LRA_COLUMNS):
    def check(results: Results) -> Verdict:
        present = tuple(n for n in among if any(results.score(t, n).mean is not None
                                                for t in tasks))
        scope = _scope(results, tasks, present) if subject in present else None
        if scope is None or len(present) < 2:
            return ("not measured", "")
        averaged, suffix, prefix = scope
        measured = {n: results.average(averaged, n) for n in present}
        ranked = sorted(measured, key=lambda n: measured[n].mean, reverse=True)
        detail = ", ".join(f"{_label(n)} {measured[n].with_interval()}" for n in ranked)
        outcomes = [compare(measured[subject], measured[n]) for n in measured
                    if n != subject]
        return _scoped(_verdict(outcomes, len(outcomes), f"averages: {detail}"), suffix,
                       prefix)
    return check


def _per_task(winner: str, others: tuple[str, ...], tasks, need: int | None = None):
    """``winner`` better than each of ``others`` on ``need`` of ``tasks`` (default all)."""
    def check(results: Results) -> Verdict:
        outcomes, parts, measured = [], [], 0
        for task in tasks:
            mine = results.score(task, winner)
            theirs = [results.score(task, o) for o in others]
            label = get_task(task).label
            if mine.mean is None or any(v.mean is None for v in theirs):
                outcomes.append(UNDECIDED)  # not run under this budget
                parts.append(f"{label} not run")
                continue
            measured += 1
            shown = f"{label} {mine.with_interval()} vs " + \
                "/".join(v.with_interval() for v in theirs)
            if results.learned(task) is False:  # not ranked: the baseline did not learn
                outcomes.append(UNDECIDED)
                parts.append(f"{shown} (not decided: the Transformer did not learn it)")
                continue
            each = [compare(mine, v, get_task(task).higher_is_better) for v in theirs]
            outcomes.append(WORSE if WORSE in each else
                            BETTER if all(e == BETTER for e in each) else UNDECIDED)
            parts.append(shown)
        if not measured:
            return ("not measured", "")
        target = len(tasks) if need is None else need
        summary = (f"better on {outcomes.count(BETTER)}, worse on {outcomes.count(WORSE)}, "
                   f"undecided on {outcomes.count(UNDECIDED)} of {len(tasks)}")
        return _verdict(outcomes, target, f"{summary}: " + "; ".join(parts))
    return check


def _per_task_run(winner: str, other: str, tasks=(*LRA_COLUMNS, *UEA_COLUMNS)):
    """``winner`` better than ``other`` on every task where both were run."""
    def check(results: Results) -> Verdict:
        run = tuple(t for t in tasks if results.score(t, winner).mean is not None
                    and results.score(t, other).mean is not None)
        return _per_task(winner, (other,), run)(results) if run else ("not measured", "")
    return check


def _ordered_averages(names: tuple[str, ...], tasks=LRA_COLUMNS):
    """Averages decreasing in the order of ``names``."""
    def check(results: Results) -> Verdict:
        scope = _scope(results, tasks, names)
        if scope is None:
            return ("not measured", "")
        averaged, suffix, prefix = scope
        values = [results.average(averaged, n) for n in names]
        detail = " > ".join(f"{_label(n)} {v.with_interval()}" for n, v in zip(names, values))
        outcomes = [compare(a, b) for a, b in zip(values, values[1:])]
        return _scoped(_verdict(outcomes, len(outcomes), f"claimed {detail}"), suffix, prefix)
    return check


def _lower_bpc(better: str, worse: str):
    def check(results: Results) -> Verdict:
        a, b = results.score("lm", better), results.score("lm", worse)
        if a.mean is None or b.mean is None:
            return ("not measured", "")
        return _verdict([compare(a, b, higher_is_better=False)], 1,
                        f"{_label(better)} {a.with_interval(3)} bpc, {_label(worse)} "
                        f"{b.with_interval(3)} bpc")
    return check


def _faster_and_smaller(name: str):
    def check(results: Results) -> Verdict:
        speed, memory = results.relative_speed(name)
        if speed is None or memory is None:
            return ("not measured", "")
        ok = speed > 1 and memory < 1
        return ("holds" if ok else "does not hold",
                f"{speed:.2f}x the Transformer's steps/s, {memory:.2f}x its memory "
                f"({get_task(results.speed_task()).label}; mean over seeds, no interval)")
    return check


BASELINES = ("softmax", "linear", "linformer", "local")

CLAIMS = (
    Claim("Weird-Net Table III", "Weird-Net A has the best LRA average of all mechanisms",
          _best_average("weird-a", ("weird-a", "weird-b", "ps", "relation", "dba",
                                    *BASELINES))),
    Claim("Weird-Net Table III", "Weird-Net A beats the Transformer on every LRA task",
          _per_task("weird-a", ("softmax",), LRA_COLUMNS)),
    Claim("Weird-Net §IV.A", "the encoder (A) beats the decoder (B) on most LRA tasks",
          _per_task("weird-a", ("weird-b",), LRA_COLUMNS, need=3)),
    Claim("DBA §4.2", "DBA beats the Transformer on all five LRA tasks",
          _per_task("dba", ("softmax",), LRA_COLUMNS)),
    Claim("DBA Table 2", "DBA has a better LRA average than the Transformer, Linear, "
          "Linformer and Local", _best_average("dba", ("dba", *BASELINES))),
    Claim("DBA Table 3", "DBA beats the Transformer, Linformer and Linear on each UEA "
          "problem", _per_task("dba", ("softmax", "linformer", "linear"), UEA_COLUMNS)),
    Claim("DBA §4.1", "DBA is faster and smaller than the Transformer",
          _faster_and_smaller("dba")),
    Claim("Weird-Net Table IX", "W = exp(cumsum(w)) > exp(w) > 1 in LRA average",
          _ordered_averages(("weird-a", "weird-a-exp", "ps"))),
    Claim("Weird-Net Table X", "structure A beats structure B in the encoder",
          _ordered_averages(("weird-a", "weird-a-enc-b"), TABLE_X_TASKS)),
    Claim("Weird-Net Table XI", "structure B beats structure A in the decoder (LM)",
          _lower_bpc("weird-b", "weird-a")),
    Claim("Weird-Net Table VIII", "Weird-Net (B) beats the Transformer at language "
          "modelling", _lower_bpc("weird-b", "softmax")),
    Claim("DBA Table 12", "d_p = 16 beats d_p = 8 in LRA average",
          _ordered_averages(("dba", "dba-dp8"))),
    Claim("DBA Table 12", "d_in = 24 beats d_in = 12 in LRA average",
          _ordered_averages(("dba", "dba-din12"))),
    Claim("issue 29 (ours)", "DBA as its authors' code runs it beats DBA read literally "
          "from eqs. 7-12, on every task run", _per_task_run("dba", "dba-literal")),
)


def claim_lines(results: Results) -> list[str]:
    """A Markdown table: each claim, its source, the verdict and the numbers (with their
    95% intervals in brackets)."""
    lines = ["| paper | claim | under this budget | our numbers [95% interval] |",
             "|---|---|---|---|"]
    for claim in CLAIMS:
        verdict, detail = claim.check(results)
        shown = f"**{verdict}**" if verdict.startswith("does not hold") else verdict
        lines.append(f"| {claim.source} | {claim.text} | {shown} | {detail or '–'} |")
    return lines
