"""The models of ``weirdnet bench lm``: the sizes every model starts from, the reference
they are matched to, and each mechanism's matched ``model`` table (one module that the
command, its SDPA probe and ``bench context`` / ``bench decode`` import, so none of them
imports the command)."""

from __future__ import annotations

from typing import Any

from weirdnet_lab import matching

MODEL = {"dim": 128, "depth": 4, "d_ff": 512, "heads": 4, "dropout": 0.0}
"""The sizes every model starts from before its parameters are matched."""
REFERENCE_MODEL = matching.reference(MODEL)
"""The model whose non-embedding parameters every model matches: the GPT-2-style
Transformer at :data:`MODEL`."""


def reference_parameters() -> int:
    """Non-embedding parameters of :data:`REFERENCE_MODEL`."""
    return matching.matched_variant("softmax", MODEL)[2]


def model_table(name: str) -> tuple[dict[str, Any], int]:
    """(the ``model`` table of mechanism ``name``, matched to the reference; its
    non-embedding parameters).  ValueError when it cannot be matched within 5%."""
    return matching.matched_variant(name, MODEL)[:2]
