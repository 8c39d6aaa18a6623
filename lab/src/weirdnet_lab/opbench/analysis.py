"""Ratios between methods and a suite's targets, computed from measured rows.

A result row (see :mod:`.runner`) is a dict with at least ``method``, ``L``, ``fwd_ms``,
``fwdbwd_ms`` and ``mem_mib`` (each None when not measured).  The ratios and targets are
the suite's (:class:`~.opbench.OpBench`); without one, the scan suite's.
"""

from __future__ import annotations

import operator

from weirdnet_lab.opbench.spec import OpBench, Ratio, Target, get_opbench

__all__ = ["Ratio", "Target", "compute_ratios", "evaluate_targets", "ratio_specs"]

_OPS = {">=": operator.ge, "<=": operator.le, "<": operator.lt, ">": operator.gt}


def _suite(suite: OpBench | None) -> OpBench:
    return suite if suite is not None else get_opbench("scan")


def _value(rows: list[dict], method: str, L: int, metric: str) -> float | None:
    for row in rows:
        if row["method"] == method and row["L"] == L:
            return row.get(metric)
    return None


def ratio_specs(rows: list[dict], suite: OpBench | None = None) -> tuple[Ratio, ...]:
    """The suite's ratios for the methods of ``rows`` (in their order of appearance)."""
    methods = list(dict.fromkeys(row["method"] for row in rows))
    return _suite(suite).ratios(methods)


def compute_ratios(rows: list[dict], suite: OpBench | None = None) -> list[dict]:
    """One dict per length: ``L`` and each ratio key (None where a side is missing)."""
    specs = ratio_specs(rows, suite)
    out = []
    for L in sorted({row["L"] for row in rows}):
        entry: dict = {"L": L}
        for r in specs:
            num = _value(rows, r.num, L, r.metric)
            den = _value(rows, r.den, L, r.den_metric or r.metric)
            entry[r.key] = num / den if num is not None and den else None
        out.append(entry)
    return out


def evaluate_targets(ratios: list[dict], suite: OpBench | None = None) -> list[dict]:
    """PASS/FAIL of each target whose ratio was measured; unmeasured targets are left out.

    A target with fallbacks uses the first of its ratio keys that was measured at its
    length; the result records that key as ``ratio`` and, where the target describes it,
    what it compared against as ``baseline``.
    """
    by_length = {entry["L"]: entry for entry in ratios}
    results = []
    for t in _suite(suite).targets:
        entry = by_length.get(t.L, {})
        keys = (t.ratio, *t.fallbacks)
        found = next(((i, k) for i, k in enumerate(keys) if entry.get(k) is not None), None)
        if found is None:
            continue
        index, key = found
        value = entry[key]
        result = {"key": t.key, "text": t.text, "L": t.L, "ratio": key, "op": t.op,
                  "threshold": t.threshold, "value": value,
                  "passed": bool(_OPS[t.op](value, t.threshold))}
        if index < len(t.baselines):
            result["baseline"] = t.baselines[index]
        results.append(result)
    return results
