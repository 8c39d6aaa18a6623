"""The evaluation a context cell adds to its record after training: test bits per byte by
context length, at each window of the cell's ``positions`` request (the sweep engine's
cell child calls :func:`position_curves` when the cell asks for it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def position_curves(run_dir: Path, config, request: dict[str, Any], device
                    ) -> dict[str, list[dict[str, Any]]]:
    """For each window of ``request["contexts"]``: the best model's test bits per byte in
    the buckets ``request["bounds"]`` (rows of :func:`weirdnet.train.positions.
    evaluate_positions`), keyed by the window as a string (JSON)."""
    from weirdnet.data.registry import get
    from weirdnet.train.distributed import Processes
    from weirdnet.train.positions import evaluate_positions
    from weirdnet.train.trained import load_trained

    model = load_trained(run_dir, device)[0]
    data = config.data
    curves = {}
    for context in request["contexts"]:
        options = {**data.options, **data.eval_options, "seq_len": int(context),
                   "random_crops": False}
        dataset = get(data.dataset, data.test_split, root=data.root or None, **options)
        curves[str(context)] = evaluate_positions(model, dataset, 1, Processes(device=device),
                                                  request["bounds"])[1]
    return curves
