"""What a model that ignores its input scores on a test split, and whether a trained model
clearly beat it: the bar a budget must clear before its numbers rank anything.

- classification and retrieval: the majority class's share of the split (accuracy, %), and
  the shortcut classifiers of :mod:`weirdnet_lab.suite.shortcuts` (the first operator of
  ListOps, a linear probe on order-free features); a model has learned the task when its
  accuracy is at least ``ACCURACY_MARGIN`` points above the best of them;
- lm: the unigram entropy of the split's bytes (bits per byte, the best a model that
  ignores context can do); learned when the model's bits per byte are at least
  ``BPB_MARGIN`` below it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

ACCURACY_MARGIN = 10.0  # points above the majority class
BPB_MARGIN = 1.0  # bits per byte below the unigram entropy


def trivial_baseline(split: Any, task: str, items: int | None = None) -> dict[str, Any] | None:
    """``{"kind": "majority", "value": %}`` or ``{"kind": "unigram", "value": bits}`` on
    the first ``items`` items of the dataset ``split`` of ``task`` ("classification",
    "retrieval", "lm"; all items when None): the items an evaluation reads.  None for
    other tasks.  Labels come from the split's ``labels`` array when it has one, else from
    its items; an LM split's bytes from its ``data`` array (``items`` windows of
    ``seq_len``)."""
    if task in ("classification", "retrieval"):
        count = len(split) if items is None else min(items, len(split))
        labels = getattr(split, "labels", None)
        labels = labels[:count] if labels is not None else \
            [split[i]["label"] for i in range(count)]
        counts = Counter(int(label) for label in labels)
        if not counts:
            return None
        return {"kind": "majority", "value": 100.0 * max(counts.values()) / sum(counts.values())}
    if task == "lm":
        data = getattr(split, "data", None)
        if data is None or len(data) == 0:
            return None
        if items is not None and hasattr(split, "seq_len"):
            data = data[: items * split.seq_len + 1]
        counts = np.bincount(np.asarray(data, dtype=np.uint8).ravel(), minlength=256)
        p = counts[counts > 0] / counts.sum()
        return {"kind": "unigram", "value": float(-(p * np.log2(p)).sum())}
    return None


NAMES = {"majority": "majority class", "first-operator": "first operator only",
         "bag-of-tokens": "bag of tokens", "channel-statistics": "channel statistics"}
"""How the report names each kind of accuracy baseline."""


def is_accuracy(baseline: dict[str, Any]) -> bool:
    """An accuracy baseline (%), as opposed to an LM's unigram entropy (bits per byte)."""
    return baseline["kind"] != "unigram"


def best(baselines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The strongest of a task's baselines (the highest accuracy, or the lowest bits
    per byte); None for none."""
    if not baselines:
        return None
    if is_accuracy(baselines[0]):
        return max(baselines, key=lambda b: b["value"])
    return min(baselines, key=lambda b: b["value"])


def bar(baseline: dict[str, Any]) -> float:
    """The score a model must reach to count as having learned the task."""
    if is_accuracy(baseline):
        return baseline["value"] + ACCURACY_MARGIN
    return baseline["value"] - BPB_MARGIN


def learned(baseline: dict[str, Any], score: float) -> bool:
    """Whether ``score`` (accuracy % or bits per byte) clears :func:`bar`."""
    if is_accuracy(baseline):
        return score >= bar(baseline)
    return score <= bar(baseline)


def describe(baseline: dict[str, Any]) -> str:
    """``majority class 17.9%``, ``first operator only 36.0%`` or ``unigram entropy 5.08
    bits/byte``."""
    if is_accuracy(baseline):
        return f"{NAMES.get(baseline['kind'], baseline['kind'])} {baseline['value']:.1f}%"
    return f"unigram entropy {baseline['value']:.2f} bits/byte"
