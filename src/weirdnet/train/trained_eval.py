"""The evaluation entry point for code built on weirdnet (the lab's ``bench context``):
a trained language model's bits per byte by context length, read at several window
lengths, and its truncation test, in one call.

It puts together what ``weirdnet eval --positions --truncation`` runs: the trained model
(:func:`weirdnet.train.trained.load_trained`), a split read as evaluation reads it
(:func:`weirdnet.train.setup.eval_dataset`, at another window length), and the
measurements of :mod:`weirdnet.train.positions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from weirdnet.train.positions import BOUNDS, SPAN, evaluate_positions, evaluate_truncation


def evaluate_trained(path: str | Path, data, split: str, device: str | torch.device = "cpu",
                     *, windows: Sequence[int] = (), bounds: Sequence[int] = BOUNDS,
                     truncation: Sequence[int] = (), span: int = SPAN,
                     batch_size: int = 1) -> dict[str, Any]:
    """Evaluate the trained model at ``path`` (a run directory, its ``best/`` or a
    checkpoint) on split ``split`` of ``data`` (a run's ``config.data``):

    - ``"positions"``: for each window length of ``windows``, the split read in windows
      of that many tokens, in order (no random crops), and the rows of
      :func:`~weirdnet.train.positions.evaluate_positions` (bits per byte in each bucket
      of context length of ``bounds``), keyed by the window;
    - ``"truncation"`` (when ``truncation`` names contexts): the split read in windows of
      max(truncation) + ``span`` tokens and
      :func:`~weirdnet.train.positions.evaluate_truncation` at those contexts.

    Every window of the split is read (no limit), ``batch_size`` at a time."""
    from weirdnet.run.processes import Processes
    from weirdnet.train.setup import eval_dataset
    from weirdnet.train.trained import load_trained

    device = torch.device(device)
    model = load_trained(Path(path), device)[0]
    out: dict[str, Any] = {"positions": {}}
    for window in windows:
        dataset = eval_dataset(data, split, seq_len=int(window), random_crops=False)
        out["positions"][int(window)] = evaluate_positions(
            model, dataset, batch_size, Processes(device=device), bounds)[1]
    if truncation:
        dataset = eval_dataset(data, split, seq_len=max(truncation) + span,
                               random_crops=False)
        out["truncation"] = evaluate_truncation(model, dataset, device, truncation, span)
    return out
