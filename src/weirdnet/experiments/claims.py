"""The orderings the papers claim, checked on our measured numbers.

Each :class:`Claim` says where the paper makes it and returns a verdict ("holds", "does
not hold", or "not measured") with the numbers behind it, so the report can say plainly
where a paper's ordering does not hold under the budget that was run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .numbers import LRA_COLUMNS, TABLE_X_TASKS
from .report import SPEED_TASK, Results
from .tasks import get_task
from .variants import VARIANTS

UEA_TASKS = ("jv", "scp1", "scp2")
Verdict = tuple[str, str]


@dataclass(frozen=True)
class Claim:
    source: str
    text: str
    check: Callable[[Results], Verdict]


def _label(name: str) -> str:
    return VARIANTS[name].label


def _avg(results: Results, name: str, tasks=LRA_COLUMNS) -> float | None:
    return results.average(tasks, name).mean


def _verdict(ok: bool, detail: str) -> Verdict:
    return ("holds" if ok else "does not hold", detail)


def _best_average(subject: str, among: tuple[str, ...], tasks=LRA_COLUMNS):
    def check(results: Results) -> Verdict:
        averages = {n: _avg(results, n, tasks) for n in among}
        measured = {n: v for n, v in averages.items() if v is not None}
        if subject not in measured or len(measured) < 2:
            return ("not measured", "")
        ranked = sorted(measured, key=measured.get, reverse=True)
        detail = ", ".join(f"{_label(n)} {measured[n]:.1f}" for n in ranked)
        return _verdict(ranked[0] == subject, f"averages: {detail}")
    return check


def _per_task(winner: str, others: tuple[str, ...], tasks, need: int | None = None):
    """``winner`` better than each of ``others`` on ``need`` of ``tasks`` (default all)."""
    def check(results: Results) -> Verdict:
        wins, parts = 0, []
        for task in tasks:
            mine = results.score(task, winner).mean
            theirs = [results.score(task, o).mean for o in others]
            if mine is None or any(v is None for v in theirs):
                return ("not measured", "")
            higher = get_task(task).higher_is_better
            won = all((mine > v) if higher else (mine < v) for v in theirs)
            wins += won
            parts.append(f"{get_task(task).label} {mine:.1f} vs "
                         + "/".join(f"{v:.1f}" for v in theirs))
        target = len(tasks) if need is None else need
        return _verdict(wins >= target, f"better on {wins} of {len(tasks)}: "
                        + "; ".join(parts))
    return check


def _ordered_averages(names: tuple[str, ...], tasks=LRA_COLUMNS):
    """Averages strictly decreasing in the order of ``names``."""
    def check(results: Results) -> Verdict:
        values = [_avg(results, n, tasks) for n in names]
        if any(v is None for v in values):
            return ("not measured", "")
        detail = " > ".join(f"{_label(n)} {v:.1f}" for n, v in zip(names, values))
        return _verdict(all(a > b for a, b in zip(values, values[1:])),
                        f"claimed {detail}")
    return check


def _lower_bpc(better: str, worse: str):
    def check(results: Results) -> Verdict:
        a, b = results.score("lm", better).mean, results.score("lm", worse).mean
        if a is None or b is None:
            return ("not measured", "")
        return _verdict(a < b, f"{_label(better)} {a:.3f} bpc, {_label(worse)} {b:.3f} bpc")
    return check


def _faster_and_smaller(name: str):
    def check(results: Results) -> Verdict:
        speed, memory = results.relative_speed(name)
        if speed is None or memory is None:
            return ("not measured", "")
        return _verdict(speed > 1 and memory < 1, f"{speed:.2f}x the Transformer's "
                        f"steps/s, {memory:.2f}x its memory ({get_task(SPEED_TASK).label})")
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
          "problem", _per_task("dba", ("softmax", "linformer", "linear"), UEA_TASKS)),
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
)


def claim_lines(results: Results) -> list[str]:
    """A Markdown table: each claim, its source, the verdict and the numbers."""
    lines = ["| paper | claim | under this budget | our numbers |", "|---|---|---|---|"]
    for claim in CLAIMS:
        verdict, detail = claim.check(results)
        shown = {"holds": "holds", "does not hold": "**does not hold**"}.get(verdict,
                                                                               verdict)
        lines.append(f"| {claim.source} | {claim.text} | {shown} | {detail or '–'} |")
    return lines
