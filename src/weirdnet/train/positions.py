"""Bits per byte by position: does a language model use long context?

A target byte's *context* is the number of bytes before it that the model can see: its
index in the evaluation window plus one, or, in a packed window (``doc_ids``), the bytes
of its own document before it.  Averaging the loss over the targets whose context falls
in each bucket (0–128, 128–1K, 1K–4K, 4K–16K, ... by default; a bucket holds the contexts
above its lower edge up to and including its upper one, so the last target of a 16K window
is in 4K–16K) shows whether a model keeps
improving as it sees more: one that uses long context has lower bits per byte in the
later buckets (Mamba and Hyena's long-context evaluations).  Evaluating at a longer window
than the model trained at (``--set data.eval_options.seq_len=...``) measures length
extrapolation in the same buckets.

The buckets hold different bytes (a work's opening lines sit in the first one), so they
compare models with each other, not a model's buckets with each other.  The truncation
test (:func:`evaluate_truncation`, Khandelwal et al. 2018's design) holds the bytes fixed:
the same last ``span`` bytes of each window are scored with only the ``c`` bytes before
them visible, for several ``c``.  If their loss still falls from ``c`` = 4K to 12K, the
model uses context beyond 4K.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from weirdnet.models.lm import token_nll
from weirdnet.ops.packing import positions_in_document

from . import tasks

BOUNDS = (0, 128, 1024, 4096, 16384, 32768, 65536)
"""Bucket edges (context lengths); the last bucket is open above."""
TRUNCATIONS = (128, 1024, 4096, 12288)
"""Contexts of the truncation test: bytes visible before the first scored byte."""
SPAN = 1024
"""Bytes scored per window in the truncation test."""


def check_bounds(bounds: Sequence[int]) -> tuple[int, ...]:
    """Increasing non-negative edges starting at 0 (ValueError otherwise)."""
    edges = tuple(int(b) for b in bounds)
    if not edges or edges[0] != 0 or any(b >= c for b, c in zip(edges, edges[1:])):
        raise ValueError(f"position buckets must start at 0 and increase, got {list(bounds)}")
    return edges


def target_context(batch: dict[str, Any]) -> torch.Tensor:
    """(B, L) context length of every target of an LM batch (see the module docstring)."""
    tokens = batch["tokens"]
    doc_ids = batch.get("doc_ids")
    if doc_ids is None:
        return torch.arange(1, tokens.shape[1], device=tokens.device).expand(
            tokens.shape[0], -1)
    return positions_in_document(doc_ids)[:, 1:]


@torch.no_grad()
def position_sums(model, batch: dict[str, Any], bounds: Sequence[int]) -> dict[str, float]:
    """Summed nats and counted targets per bucket of one LM batch: keys ``nll@<lo>`` and
    ``targets@<lo>`` for each bucket's lower edge."""
    out, targets, counted = tasks.get("lm").forward(model, batch, with_loss=False)
    nll = token_nll(out.logits, targets)
    counted = torch.ones_like(targets, dtype=torch.bool) if counted is None else counted
    context = target_context(batch)
    edges = torch.tensor(bounds, device=context.device)
    bucket = (torch.bucketize(context.contiguous(), edges) - 1).clamp(min=0)  # (lo, hi]
    sums = {}
    for index, low in enumerate(bounds):
        chosen = counted & (bucket == index)
        sums[f"nll@{low}"] = float((nll * chosen).sum())
        sums[f"targets@{low}"] = float(chosen.sum())
    return sums


def bucket_table(sums: dict[str, float], bounds: Sequence[int]) -> list[dict[str, Any]]:
    """One row per bucket with targets: its edges, targets and bits per byte."""
    rows = []
    for index, low in enumerate(bounds):
        count = sums.get(f"targets@{low}", 0.0)
        if not count:
            continue
        high = bounds[index + 1] if index + 1 < len(bounds) else None
        rows.append({"from": low, "to": high, "targets": int(count),
                     "bpc": sums[f"nll@{low}"] / count / math.log(2)})
    return rows


def evaluate_positions(model, dataset, batch_size: int, processes,
                       bounds: Sequence[int] = BOUNDS, limit: int = 0,
                       progress: str | None = None
                       ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(the split's metrics, as :func:`~weirdnet.train.evaluation.evaluate` gives them;
    bits per byte in each bucket of context length) of ``model`` on ``dataset`` (an LM
    split), in one pass of the trainer's evaluation (the first ``limit`` windows, 0 =
    all; ``processes``: a :class:`~weirdnet.run.processes.Processes`)."""
    from functools import partial

    from .evaluation import evaluation_sums

    edges = check_bounds(bounds)
    sums = evaluation_sums(model, dataset, dataset.info, batch_size, processes, limit,
                           progress=progress, batch_sums=partial(position_sums, bounds=edges))
    totals = {"nll": sum(sums.get(f"nll@{low}", 0.0) for low in edges),  # buckets cover all
              "targets": sum(sums.get(f"targets@{low}", 0.0) for low in edges)}
    return tasks.get("lm").metrics(totals, dataset.info), bucket_table(sums, edges)


def format_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of :func:`evaluate_positions`' rows."""
    lines = ["| context | targets | bits per byte |", "|---|---|---|"]
    for row in rows:
        lines.append(f"| {span_label(row['from'], row['to'])} | {row['targets']:,} | "
                     f"{row['bpc']:.4f} |")
    return "\n".join(lines)


def short_bytes(n: int) -> str:
    """A byte count as the tables write it: "128", "1K", "16K"."""
    return f"{n // 1024}K" if n and n % 1024 == 0 else str(n)


def span_label(low: int, high: int | None) -> str:
    """A bucket's name: "128–1K", or "16K+" for the open last one."""
    return f"{short_bytes(low)}–{short_bytes(high)}" if high else f"{short_bytes(low)}+"


@torch.no_grad()
def truncated_nll(model, tokens: torch.Tensor, contexts: Sequence[int], span: int
                  ) -> dict[int, float]:
    """Mean nats of the last ``span`` targets of ``tokens`` (W + 1,), one document, when
    the model reads only the ``c`` bytes before the first of them (and those between), for
    each ``c`` of ``contexts`` (W >= max(contexts) + span).  The output head runs at the
    scored positions only."""
    width = tokens.numel() - 1
    if width < max(contexts) + span:
        raise ValueError(f"a window of {width} bytes cannot hold {max(contexts)} bytes of "
                         f"context and {span} scored ones")
    means = {}
    for context in contexts:
        piece = tokens[width - span - context:].unsqueeze(0)  # (1, c + span + 1)
        scored = torch.zeros(1, context + span, dtype=torch.bool, device=tokens.device)
        scored[:, -span:] = True
        logits = model(piece[:, :-1], logits_at=scored).logits  # (span, V)
        means[context] = float(token_nll(logits, piece[0, -span:]).mean())
    return means


def evaluate_truncation(model, dataset, device: torch.device,
                        contexts: Sequence[int] = TRUNCATIONS, span: int = SPAN,
                        progress: str | None = None, limit: int = 0) -> dict[str, Any]:
    """The truncation test on an LM split read at windows of max(contexts) + span bytes:
    for every whole window that lies inside one document, the bits per byte of its last
    ``span`` bytes at each context.  Returns {"contexts", "span", "windows", "bpc": {c:
    [bits per byte of each window]}} (per window, so a report can pair contexts).  Only
    the first ``limit`` windows are read (0 = all).  The model is in eval mode meanwhile;
    its mode is restored afterwards."""
    from tqdm.auto import tqdm

    contexts = sorted({int(c) for c in contexts})
    if not contexts or contexts[0] < 1 or span < 1:
        raise ValueError("truncation contexts and span must be >= 1")
    per_context: dict[int, list[float]] = {c: [] for c in contexts}
    count = len(dataset) if limit <= 0 else min(limit, len(dataset))
    was_training = model.training
    model.eval()
    try:
        for index in tqdm(range(count), desc=progress, disable=progress is None):
            item = dataset[index]
            doc_ids = item.get("doc_ids")
            if item["tokens"].numel() < contexts[-1] + span + 1:
                continue  # the split's short last window
            if doc_ids is not None and bool((doc_ids != doc_ids[0]).any()):
                continue  # a document starts inside: its bytes would not see every context
            means = truncated_nll(model, item["tokens"].to(device), contexts, span)
            for context, nats in means.items():
                per_context[context].append(nats / math.log(2))
    finally:
        model.train(was_training)
    windows = len(per_context[contexts[0]])
    if not windows:
        raise ValueError("no window of the split lies inside one document")
    return {"contexts": contexts, "span": span, "windows": windows,
            "bpc": {str(c): values for c, values in per_context.items()}}


def truncation_rows(bpc: dict[str, list[float]], contexts: Sequence[int]
                    ) -> list[dict[str, Any]]:
    """Rows of a truncation test from its bits per byte per window (``bpc[str(c)]``, the
    windows in the same order at every context): each context's mean, its difference from
    the longest context and that difference's 95% t interval over windows (each window
    paired with itself)."""
    from weirdnet.train.intervals import mean_interval

    contexts = sorted(int(c) for c in contexts)
    longest = bpc[str(contexts[-1])]
    rows = []
    for context in contexts:
        values = bpc[str(context)]
        diff, low, high = mean_interval([a - b for a, b in zip(values, longest)])
        rows.append({"context": context, "windows": len(values),
                     "bpc": sum(values) / len(values), "minus_longest": diff,
                     "low": low, "high": high})
    return rows


def format_truncation(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of :func:`truncation_rows`."""
    lines = ["| bytes visible | windows | bits per byte | minus the longest [95%] |",
             "|---|---|---|---|"]
    for row in rows:
        gap = "–" if row is rows[-1] else \
            f"{row['minus_longest']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}]"
        lines.append(f"| {short_bytes(row['context'])} | {row['windows']} | "
                     f"{row['bpc']:.4f} | {gap} |")
    return "\n".join(lines)

