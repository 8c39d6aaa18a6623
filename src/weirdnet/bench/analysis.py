"""Ratios between methods and the benchmark's targets, computed from measured rows.

A result row (see :mod:`.scan`) is a dict with at least ``method``, ``L``, ``fwd_ms``,
``fwdbwd_ms`` and ``mem_mib`` (each None when not measured).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ratio:
    """``metric`` of method ``num`` divided by that of method ``den``, per length."""

    key: str
    label: str
    metric: str
    num: str
    den: str


RATIOS: tuple[Ratio, ...] = (
    Ratio("fwdbwd_speedup_causal", "fwd+bwd: SDPA causal / scan", "fwdbwd_ms", "sdpa-causal",
          "scan"),
    Ratio("fwdbwd_speedup_reverse", "fwd+bwd: SDPA / scan reverse", "fwdbwd_ms", "sdpa",
          "scan-rev"),
    Ratio("fwdbwd_speedup_bidir", "fwd+bwd: SDPA / scan bidir", "fwdbwd_ms", "sdpa",
          "scan-bidir"),
    Ratio("fwd_speedup_causal", "fwd: SDPA causal / scan", "fwd_ms", "sdpa-causal", "scan"),
    Ratio("fwd_speedup_reverse", "fwd: SDPA / scan reverse", "fwd_ms", "sdpa", "scan-rev"),
    Ratio("mem_causal", "memory: scan / SDPA causal", "mem_mib", "scan", "sdpa-causal"),
    Ratio("mem_reverse", "memory: scan reverse / SDPA", "mem_mib", "scan-rev", "sdpa"),
    Ratio("mem_bidir", "memory: scan bidir / SDPA", "mem_mib", "scan-bidir", "sdpa"),
)
"""Speed ratios are "how many times faster the scan is"; memory ratios "how many times more
memory the scan takes"."""


@dataclass(frozen=True)
class Target:
    """Requirement ``ratio`` at length ``L`` ``op`` ``threshold`` (op is ">=" or "<=")."""

    key: str
    text: str
    L: int
    ratio: str
    op: str
    threshold: float


TARGETS: tuple[Target, ...] = (
    Target("speed_16k", "fwd+bwd at L=16384 at least 10x faster than SDPA causal", 16384,
           "fwdbwd_speedup_causal", ">=", 10.0),
    Target("parity_1k", "fwd+bwd at L=1024 no slower than SDPA causal", 1024,
           "fwdbwd_speedup_causal", ">=", 1.0),
    Target("memory_16k", "peak extra memory of fwd+bwd at L=16384 at most 3x SDPA causal's",
           16384, "mem_causal", "<=", 3.0),
)


def _value(rows: list[dict], method: str, L: int, metric: str) -> float | None:
    for row in rows:
        if row["method"] == method and row["L"] == L:
            return row.get(metric)
    return None


def compute_ratios(rows: list[dict]) -> list[dict]:
    """One dict per length: ``L`` and each ratio key (None where a side is missing)."""
    out = []
    for L in sorted({row["L"] for row in rows}):
        entry: dict = {"L": L}
        for r in RATIOS:
            num, den = _value(rows, r.num, L, r.metric), _value(rows, r.den, L, r.metric)
            entry[r.key] = num / den if num is not None and den else None
        out.append(entry)
    return out


def evaluate_targets(ratios: list[dict]) -> list[dict]:
    """PASS/FAIL of each target whose ratio was measured; unmeasured targets are left out."""
    by_length = {entry["L"]: entry for entry in ratios}
    results = []
    for t in TARGETS:
        value = by_length.get(t.L, {}).get(t.ratio)
        if value is None:
            continue
        passed = value >= t.threshold if t.op == ">=" else value <= t.threshold
        results.append({"key": t.key, "text": t.text, "L": t.L, "ratio": t.ratio, "op": t.op,
                        "threshold": t.threshold, "value": value, "passed": passed})
    return results
