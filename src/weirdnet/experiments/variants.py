"""What a suite cell changes in the model: a mechanism or an ablation variant.

A :class:`Variant` sets the backbone's mixer pattern, its direction and mixer options;
everything else (sizes, optimiser, steps) comes from the task's config and the budget,
so every variant of a task trains under the same budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DBA_OPTIONS = {"d_p": 16, "d_in": 24}
"""DBA's LRA setting (DBA paper Table 7), the default of the DBA rows."""


@dataclass(frozen=True)
class Variant:
    """One model variant of the suite.

    - ``name``: the cell key (``--mechanisms``); ``label``: the table row.
    - ``pattern``: backbone pattern ("A", "B" or mixer names); ``causal``: decoder form on
      classification tasks (language modelling is always causal).
    - ``mixer_options``: per-mixer constructor options merged over the task's.
    - ``bidirectional_only``: the mixer has no causal form, so it cannot be a language
      model (Linformer, DBA).
    """

    name: str
    label: str
    pattern: str
    causal: bool = False
    mixer_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    bidirectional_only: bool = False
    note: str = ""

    def unsupported(self, group: str) -> str | None:
        """Why this variant cannot run a task of ``group`` (None: it can)."""
        if group == "lm" and self.bidirectional_only:
            return f"{self.label} has no causal form, so no language model"
        return None

    def backbone_overrides(self, group: str) -> dict[str, Any]:
        """The ``model.backbone`` keys this variant sets on a task of ``group``."""
        backbone: dict[str, Any] = {"pattern": self.pattern,
                                    "causal": True if group == "lm" else self.causal}
        if self.mixer_options:
            backbone["mixer_options"] = {k: dict(v) for k, v in self.mixer_options.items()}
        return backbone


MECHANISMS = (
    Variant("weird-a", "Weird-Net A", "A",
            note="structure A, bidirectional, mean pooling (the papers' encoder)"),
    Variant("weird-b", "Weird-Net B", "B", causal=True,
            note="structure B, causal, last-position pooling (the papers' decoder)"),
    Variant("ps", "PS-attention", "ps", note="Weird-attention with W = 1 in every layer"),
    Variant("relation", "Relation", "relation"),
    Variant("dba", "DBA", "dba", mixer_options={"dba": DBA_OPTIONS},
            bidirectional_only=True, note="d_p = 16, d_in = 24 (DBA paper Table 7)"),
    Variant("softmax", "Transformer", "softmax",
            note="softmax attention through scaled_dot_product_attention"),
    Variant("linear", "Linear Trans.", "linear"),
    Variant("linformer", "Linformer", "linformer", bidirectional_only=True),
    Variant("local", "Local Attention", "local"),
)
"""The mechanisms of the main table, in its row order."""

ABLATIONS = (
    Variant("weird-a-exp", "Weird-attention, W = exp(w)", "A",
            mixer_options={"weird": {"weights": "exp"}}),
    Variant("weird-a-enc-b", "encoder, structure B", "B",
            note="structure B, bidirectional (Table X)"),
    *(Variant(f"dba-dp{d_p}", f"DBA d_p = {d_p}", "dba",
              mixer_options={"dba": {"d_p": d_p, "d_in": 24}}, bidirectional_only=True)
      for d_p in (8, 64, 256)),
    *(Variant(f"dba-din{d_in}", f"DBA d_in = {d_in}", "dba",
              mixer_options={"dba": {"d_p": 16, "d_in": d_in}}, bidirectional_only=True)
      for d_in in (12, 64)),
)
"""The variants only the ablation tables use (the others reuse main-table cells)."""

VARIANTS = {v.name: v for v in (*MECHANISMS, *ABLATIONS)}


def get_variant(name: str) -> Variant:
    """The variant called ``name``; a clear error lists the known ones."""
    if name not in VARIANTS:
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[name]
