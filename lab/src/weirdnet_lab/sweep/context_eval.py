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
    (:func:`weirdnet.train.positions.evaluate_truncation`)."""
    from weirdnet.train.distributed import Processes
    from weirdnet.train.positions import evaluate_positions, evaluate_truncation
    from weirdnet.train.trained import load_trained

    model = load_trained(run_dir, device)[0]
    curves = {}
    for context in request["contexts"]:
        dataset = _test_split(config, int(context))
        curves[str(context)] = evaluate_positions(model, dataset, 1, Processes(device=device),
                                                  request["bounds"])[1]
    out: dict[str, Any] = {"positions_bpc": curves}
    truncation = request.get("truncation")
    if truncation:
        contexts, span = truncation["contexts"], int(truncation["span"])
        dataset = _test_split(config, max(contexts) + span)
        out["truncation_bpc"] = evaluate_truncation(model, dataset, device, contexts, span)
    return out


def _test_split(config, window: int):
    """The cell's test split read in windows of ``window`` bytes, in order."""
    from weirdnet.train.setup import eval_dataset

    return eval_dataset(config.data, config.data.test_split, seq_len=window,
                        random_crops=False)
