"""What a suite cell changes in the model: a mechanism or an ablation variant.

A :class:`Variant` sets the backbone's mixer pattern, its direction and mixer options;
everything else (sizes, optimiser, steps) comes from the task's config and the budget,
so every variant of a task trains under the same budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weirdnet.config import TRANSFORMERPP

DBA_OPTIONS = {"form": "authors", "d_p": 16, "d_in": 24}
"""DBA's LRA setting (DBA paper Table 7) as its authors' code runs it, the default of the
DBA rows (the form is named, so a record says which reading it used)."""
DBA_LITERAL = {**DBA_OPTIONS, "form": "paper-literal"}
"""The same DBA read literally from eqs. 7–12 (docs/design.md §4)."""

DBA_POOLING = {"lra": "cls", "pathfinder": "mean"}
"""DBA's readout: DBA A.3 follows Luna's LRA settings, whose code reads a prepended [CLS]
token and mean-pools on Pathfinder; on UEA the paper is silent (mean, the default)."""
RELATION_POOLING = {"lra": "first", "uea": "first"}
"""Relation's readout: the first token (Relation §3.2.1 and its code, ``y[:, 0, :]``)."""


@dataclass(frozen=True)
class Variant:
    """One model variant of the suite.

    - ``name``: the cell key (``--mechanisms``); ``label``: the table row.
    - ``pattern``: backbone pattern ("A", "B" or mixer names); ``causal``: decoder form on
      classification tasks (language modelling is always causal).
    - ``mixer_options``: per-mixer constructor options merged over the task's.
    - ``pooling``: the classifier's readout as the mechanism's paper runs it, by task name
      or task group (the name wins); unset: "auto" (mean, or the last position when
      causal).  Language modelling has no readout.
    - ``backbone``: other backbone keys it sets (the Transformer++ options).
    - ``peer``: a ``transformers`` model instead of a weirdnet backbone (a key of
      :data:`weirdnet_lab.peers.PEERS`; causal LM tasks only), with ``peer_options`` (keys
      of its ``transformers`` config) and ``depth_factor`` (its layers per layer of the
      weirdnet models it is compared with: 2 for Mamba and Mamba-2, whose one block
      stands for attention and feed-forward).
    - ``matched``: in the suite, a weirdnet model whose feed-forward width is turned to
      the non-embedding parameters of the GPT-2-style Transformer with the task's
      widths, as the peers are (the today table's new rows; the papers' rows keep the
      papers' widths).
    """

    name: str
    label: str
    pattern: str
    causal: bool = False
    mixer_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    pooling: dict[str, str] = field(default_factory=dict)
    backbone: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    peer: str | None = None
    peer_options: dict[str, Any] = field(default_factory=dict)
    depth_factor: int = 1
    matched: bool = False

    @property
    def bidirectional_only(self) -> bool:
        """A mixer of the pattern has no causal form (Linformer, DBA), so the variant
        cannot be a language model: read from the mixers themselves."""
        if self.peer:
            return False
        # deferred: the layers import torch, and the command line reads this module
        from weirdnet.layers import has_causal_form
        from weirdnet.models import pattern_mixers

        return not all(has_causal_form(name) for name in pattern_mixers(self.pattern))

    def unsupported(self, group: str) -> str | None:
        """Why this variant cannot run a task of ``group`` (None: it can)."""
        if group == "lm" and self.bidirectional_only:
            return f"{self.label} has no causal form, so no language model"
        if self.peer and group != "lm":
            return f"{self.label} is a peer causal LM: language models only"
        return None

    def lm_model(self, widths: dict[str, Any]) -> dict[str, Any]:
        """The ``model`` table of this variant as a language model whose sizes are
        ``widths`` (backbone keys: dim, depth, d_ff, heads, ...).  A peer takes the width,
        depth (times ``depth_factor``), and the feed-forward width and heads where it
        has them; a weirdnet model takes every key."""
        if not self.peer:
            return {"backbone": {**widths, **self.backbone_overrides("lm")}}
        from weirdnet_lab.peers import PEERS

        reads = PEERS[self.peer][1]
        return self.peer_model(
            {"dim": widths["dim"], "depth": widths["depth"] * self.depth_factor,
             **{k: widths[k] for k in ("d_ff", "heads") if k in reads and k in widths}})

    def peer_model(self, backbone: dict[str, Any]) -> dict[str, Any]:
        """The ``model`` table of this ``transformers`` peer with the backbone keys
        ``backbone`` (dim, depth and those the peer reads), and its ``peer_options``."""
        table: dict[str, Any] = {"peer": self.peer, "backbone": backbone}
        if self.peer_options:
            table["options"] = dict(self.peer_options)
        return table

    def readout(self, task: str, group: str) -> str | None:
        """The ``model.pooling`` this variant sets on ``task`` of ``group`` (None: the
        task config's own)."""
        return self.pooling.get(task, self.pooling.get(group)) if group != "lm" else None

    def model_overrides(self, task: str, group: str) -> dict[str, Any]:
        """The ``model`` keys this variant sets on ``task`` of ``group``."""
        model: dict[str, Any] = {"backbone": self.backbone_overrides(group)}
        pooling = self.readout(task, group)
        if pooling:
            model["pooling"] = pooling
        return model

    def backbone_overrides(self, group: str) -> dict[str, Any]:
        """The ``model.backbone`` keys this variant sets on a task of ``group``."""
        backbone: dict[str, Any] = {"pattern": self.pattern,
                                    "causal": True if group == "lm" else self.causal}
        if self.mixer_options:
            backbone["mixer_options"] = {k: dict(v) for k, v in self.mixer_options.items()}
        return {**backbone, **self.backbone}


MECHANISMS = (
    Variant("weird-a", "Weird-Net A", "A",
            note="structure A, bidirectional, mean pooling (the papers' encoder)"),
    Variant("weird-b", "Weird-Net B", "B", causal=True,
            note="structure B, causal, last-position pooling (the papers' decoder)"),
    Variant("ps", "PS-attention", "ps", note="Weird-attention with W = 1 in every layer"),
    Variant("relation", "Relation", "relation", pooling=RELATION_POOLING,
            note="first-token readout (Relation §3.2.1)"),
    Variant("dba", "DBA", "dba", mixer_options={"dba": DBA_OPTIONS}, pooling=DBA_POOLING,
            note="the authors' code; d_p = 16, d_in = 24 (DBA paper Table 7); [CLS] "
                 "readout on LRA (mean on Pathfinder), mean on UEA"),
    Variant("softmax", "Transformer", "softmax",
            note="softmax attention through scaled_dot_product_attention"),
    Variant("linear", "Linear Trans.", "linear"),
    Variant("linformer", "Linformer", "linformer"),
    Variant("local", "Local Attention", "local"),
)
"""The mechanisms of the main table, in its row order."""

ABLATIONS = (
    Variant("weird-a-exp", "Weird-attention, W = exp(w)", "A",
            mixer_options={"weird": {"weights": "exp"}}),
    Variant("weird-a-enc-b", "encoder, structure B", "B",
            note="structure B, bidirectional (Table X)"),
    *(Variant(f"dba-dp{d_p}", f"DBA d_p = {d_p}", "dba",
              mixer_options={"dba": {**DBA_OPTIONS, "d_p": d_p}},
              pooling=DBA_POOLING)
      for d_p in (8, 64, 256)),
    *(Variant(f"dba-din{d_in}", f"DBA d_in = {d_in}", "dba",
              mixer_options={"dba": {**DBA_OPTIONS, "d_in": d_in}},
              pooling=DBA_POOLING)
      for d_in in (12, 64)),
    Variant("dba-literal", "DBA, paper-literal", "dba", mixer_options={"dba": DBA_LITERAL},
            pooling=DBA_POOLING,
            note="eqs. 7-12 read literally (docs/design.md §4), otherwise as DBA"),
)
"""The variants only the ablation tables use (the others reuse main-table cells)."""

TODAY = (
    Variant("transformerpp", "Transformer++", "softmax", backbone=dict(TRANSFORMERPP),
            matched=True,
            note="rotary positions, SwiGLU, RMSNorm, no biases (Llama's blocks)"),
    Variant("weird-a-matched", "Weird-Net A, matched", "A", matched=True,
            note="structure A as in the papers, its feed-forward width matched as the "
                 "peers' are"),
    Variant("weird-b-matched", "Weird-Net B, matched", "B", causal=True, matched=True,
            note="structure B as in the papers, its feed-forward width matched as the "
                 "peers' are"),
    Variant("weird-a-pp", "Weird-Net A++", "A", backbone=dict(TRANSFORMERPP),
            matched=True,
            note="structure A with the Transformer++ options (no positional table: "
                 "rotary positions act only inside softmax heads, and A has none)"),
    Variant("weird-b-pp", "Weird-Net B++", "B", causal=True, backbone=dict(TRANSFORMERPP),
            matched=True,
            note="structure B with the Transformer++ options (rotary positions in its "
                 "softmax layers)"),
    Variant("llama", "Llama (transformers)", "softmax", peer="llama",
            note="transformers' LlamaForCausalLM"),
    Variant("mamba", "Mamba (transformers)", "mamba", peer="mamba", depth_factor=2,
            note="transformers' MambaForCausalLM; on CPU its pure-PyTorch reference path"),
    Variant("mamba2", "Mamba-2 (transformers)", "mamba2", peer="mamba2", depth_factor=2,
            note="transformers' Mamba2ForCausalLM; on CPU its pure-PyTorch reference path"),
    Variant("rwkv", "RWKV-4 (transformers)", "rwkv", peer="rwkv",
            note="transformers' RwkvForCausalLM; on CPU its pure-PyTorch path"),
    Variant("qwen3-next", "Qwen3-Next (transformers)", "qwen3-next", peer="qwen3-next",
            note="transformers' Qwen3NextForCausalLM, dense: Gated DeltaNet layers with "
                 "gated softmax attention every fourth layer; on CPU its pure-PyTorch "
                 "Gated DeltaNet path"),
    Variant("recurrent-gemma", "RecurrentGemma (transformers)", "recurrent-gemma",
            peer="recurrent-gemma",
            note="transformers' RecurrentGemmaForCausalLM (Griffin): two RG-LRU blocks, "
                 "then one local-attention block"),
    Variant("xlstm", "xLSTM (transformers)", "xlstm", peer="xlstm",
            note="transformers' xLSTMForCausalLM (mLSTM blocks, xLSTM-7B's); on CPU its "
                 "native PyTorch kernels"),
    Variant("fla-gated-deltanet", "Gated DeltaNet (fla)", "fla-gated-deltanet",
            peer="fla-gated-deltanet",
            note="flash-linear-attention's GatedDeltaNetForCausalLM; GPU only (Triton)"),
    Variant("fla-mamba2", "Mamba-2 (fla)", "fla-mamba2", peer="fla-mamba2", depth_factor=2,
            note="flash-linear-attention's Mamba2ForCausalLM; GPU only (Triton)"),
)
"""The baselines the field uses today (issue 30): the Transformer++, Weird-Net with its
options, and the ``transformers`` and flash-linear-attention peers (language models
only)."""

LONG = (
    Variant("weird-a-long", "Weird-Net A, no positions", "A", backbone={"positions": "none"},
            note="structure A with no position embedding (its relative weights are its "
                 "positions), so nothing limits the length: the million-byte model"),
)
"""Long-context variants (issue 33): models whose size does not grow with the length."""

VARIANTS = {v.name: v for v in (*MECHANISMS, *ABLATIONS, *TODAY, *LONG)}


def get_variant(name: str) -> Variant:
    """The variant called ``name``; a clear error lists the known ones."""
    if name not in VARIANTS:
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[name]
