"""The evaluation a context cell adds to its record after training (the sweep engine's
cell child, :mod:`.cell`, calls :func:`context_measurements` when the cell asks for it):
test bits per byte by context length at each window of the cell's ``positions`` request, and the
truncation test (the same bytes scored with less context visible)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def context_measurements(run_dir: Path, config, request: dict[str, Any], device
                         ) -> dict[str, Any]:
    """The record's ``positions_bpc`` (for each window of ``request["contexts"]``, keyed by
    the window as a string: the best model's test bits per byte in the buckets
    ``request["bounds"]``, rows of :func:`weirdnet.train.positions.evaluate_positions`) and,
    when ``request["truncation"]`` names contexts and a span, ``truncation_bpc``
    (:func:`weirdnet.train.positions.evaluate_truncation`): the core's
    :func:`weirdnet.train.trained_eval.evaluate_trained` on the cell's test split."""
    from weirdnet.train import evaluate_trained

    truncation = request.get("truncation") or {}
    found = evaluate_trained(run_dir, config.data, config.data.test_split, device,
                             windows=[int(c) for c in request["contexts"]],
                             bounds=request["bounds"],
                             truncation=truncation.get("contexts") or (),
                             span=int(truncation.get("span", 0)))
    out: dict[str, Any] = {"positions_bpc": {str(window): rows for window, rows
                                             in found["positions"].items()}}
    if "truncation" in found:
        out["truncation_bpc"] = found["truncation"]
    return out
