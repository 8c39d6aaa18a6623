"""Named model configurations: the papers' sizes and small CPU versions of each.

:data:`ROWS` is the table: one row per preset, with its sizes written out (a ``-cpu`` row
is a preset of its own, naming the preset it is the small CPU version of).  A row names
its :class:`Family` (the mixer pattern and the options a group of presets shares) and its
:data:`DATA` entry (the model class and what the data fixes: vocabulary or input channels,
classes, longest item).  ``weirdnet configs show NAME`` prints what a training config
builds from a preset, every dimension included.

- ``lra-<task>`` / ``lra-<task>-decoder``: Weird-Net on Long Range Arena (Table II), the
  encoder (structure A, mean pooling) and the decoder (structure B, last position).
- ``dba-lra-<task>``: DBA on Long Range Arena (DBA paper Table 7: depth, heads, d, d_ffn,
  d_p = 16, d_in = 24).
- ``weirdnet-{small,medium,large}``: the GPT-2-size language models of Weird-Net Table VII
  (structure B, GPT-2's 50,257-token vocabulary and 1,024 positions);
  ``gpt2-{small,medium,large}``: the all-softmax models of the same sizes.
- ``transformerpp-{small,medium,large}``: the Transformer++ the field compares against
  today (rotary positions, SwiGLU of width 8·D/3, RMSNorm, no biases: Llama's blocks) at
  the same widths and depths.
- ``moss-lra-<task>``: Moss (the first version of Weird-Net: Leaky-ReLU FFN, biases on
  the A and V projections) on Long Range Arena (Moss paper Table II).
- ``dba-uea-<problem>``: DBA on the UEA time-series problems (DBA paper Table 8).
- ``relation-imdb-<mechanism>``: the one-layer models of the Relation paper's IMDb timing
  (Table 2): softmax attention, linear attention and Relation at width d = 128.
- ``weirdnet-recall``: the recall diagnostics' model (structure B, causal, D=64).
- ``<name>-cpu``: a small version of each, quick to train on a laptop CPU (LRA: D <= 64,
  N <= 2, d_ff <= 128, heads <= 4; UEA: N = 1, 4 heads, D = 64, d_ff = 128; the LMs: bytes,
  D = 128, N = 4, 4 heads, a 16K context).

The training configs (``configs/``) take their model sizes from here (``[model] preset``);
only ``configs/demo/seq2seq-reverse.toml`` sets them inline, to show how, and the three
UEA configs the suite trains keep theirs inline (equal to their preset, which a test
checks) while the suite's records are keyed by those files.

Task constants: ListOps has 16 token ids and 10 classes; Text and Retrieval are bytes
shifted by one (257 ids, 0 = padding); Image and Pathfinder are pixel intensities (256
ids); lengths are LRA's (2,000; 4,000; 4,000 per document; 1,024; 1,024; 16,384).
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from weirdnet.config.recipes import TRANSFORMERPP


@dataclass(frozen=True)
class Preset:
    """A model class name, its config (a JSON-ready dict) and where the sizes come from;
    ``paper_parameters`` is the count a paper states for this model, if any."""

    name: str
    model: str
    config: dict[str, Any]
    source: str
    paper_parameters: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def swiglu_width(dim: int, multiple: int) -> int:
    """A SwiGLU FFN width with the parameters of a 4·D two-matrix FFN: 8·D/3, rounded up
    to a multiple of ``multiple`` (Llama's rule)."""
    return -(-(8 * dim // 3) // multiple) * multiple


# ---- what the data fixes ------------------------------------------------------------------

@dataclass(frozen=True)
class Data:
    """What a preset takes from the data it is sized for: the model class, the longest
    item, the vocabulary (token data) or the channels (``input_dim``, a continuous series),
    and the classes (None: an LM)."""

    model: str
    max_len: int
    vocab_size: int | None = None
    input_dim: int | None = None
    num_classes: int | None = None


CLASSIFIER, DUAL, LM = "WeirdNetClassifier", "WeirdNetDualEncoder", "WeirdNetLM"
DATA: dict[str, Data] = {
    # Long Range Arena (lengths, ids and classes as LRA's)
    "listops": Data(CLASSIFIER, max_len=2000, vocab_size=16, num_classes=10),
    "text": Data(CLASSIFIER, max_len=4000, vocab_size=257, num_classes=2),
    "retrieval": Data(DUAL, max_len=4000, vocab_size=257, num_classes=2),
    "image": Data(CLASSIFIER, max_len=1024, vocab_size=256, num_classes=10),
    "pathfinder": Data(CLASSIFIER, max_len=1024, vocab_size=256, num_classes=2),
    "pathx": Data(CLASSIFIER, max_len=16384, vocab_size=256, num_classes=2),
    # UEA: the problem's channels, classes and longest series (TRAIN and TEST)
    "uea/ethanol-concentration": Data(CLASSIFIER, max_len=1751, input_dim=3, num_classes=4),
    "uea/face-detection": Data(CLASSIFIER, max_len=62, input_dim=144, num_classes=2),
    "uea/handwriting": Data(CLASSIFIER, max_len=152, input_dim=3, num_classes=26),
    "uea/heartbeat": Data(CLASSIFIER, max_len=405, input_dim=61, num_classes=2),
    "uea/japanese-vowels": Data(CLASSIFIER, max_len=29, input_dim=12, num_classes=9),
    "uea/pems-sf": Data(CLASSIFIER, max_len=144, input_dim=963, num_classes=7),
    "uea/self-regulation-scp1": Data(CLASSIFIER, max_len=896, input_dim=6, num_classes=2),
    "uea/self-regulation-scp2": Data(CLASSIFIER, max_len=1152, input_dim=7, num_classes=2),
    "uea/spoken-arabic-digits": Data(CLASSIFIER, max_len=93, input_dim=13, num_classes=10),
    "uea/uwave-gesture-library": Data(CLASSIFIER, max_len=315, input_dim=3, num_classes=8),
    # IMDb as the Relation paper reads it: bytes shifted by one, 4,000 of them
    "imdb": Data(CLASSIFIER, max_len=4000, vocab_size=257, num_classes=2),
    # language models: GPT-2's tokens and positions; bytes at 16K and at 1M positions
    "gpt2-tokens": Data(LM, max_len=1024, vocab_size=50257),
    "bytes-16k": Data(LM, max_len=16384, vocab_size=256),
    "bytes-1m": Data(LM, max_len=1 << 20, vocab_size=256),
    # the recall diagnostics (`weirdnet bench recall`)
    "recall": Data(LM, max_len=128, vocab_size=64),
}


# ---- what a group of presets shares -------------------------------------------------------

@dataclass(frozen=True)
class Family:
    """The backbone keys a group of presets shares besides its sizes: the mixer pattern,
    ``causal`` (None: not set, the model's default) and any further keys."""

    pattern: str
    causal: bool | None = None
    backbone: Mapping[str, Any] = field(default_factory=dict)


ENCODER_A = Family("A", causal=False)           # Weird-Net's encoder: Weird-attention only
CAUSAL_A = Family("A", causal=True)
CAUSAL_B = Family("B", causal=True)             # Weird and softmax attention alternating
LONG_A = Family("A", causal=True, backbone={"positions": "none"})
MOSS = Family("A", causal=False, backbone={"activation": "leaky_relu",
                                           "mixer_options": {"weird": {"bias": True}}})
DBA_ENCODER = Family("dba", causal=False)
DBA = Family("dba")
GPT2 = Family("softmax", causal=True)
TRANSFORMER_PP = Family("softmax", causal=True, backbone=TRANSFORMERPP)
SOFTMAX = Family("softmax")
LINEAR = Family("linear")
RELATION = Family("relation")
DBA_D_P = 16
"""DBA's d_p in every DBA preset (its d_in is a column of the table)."""


# ---- the table ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One preset: its name, :class:`Family`, :data:`DATA` entry and sizes (N = depth,
    D = dim, the FFN's d_ff, attention heads, DBA's d_in), and where they come from:
    ``source``, or ``cpu_of`` for the small CPU version of that preset."""

    name: str
    family: Family
    data: str
    depth: int
    dim: int
    d_ff: int
    heads: int | None = None
    d_in: int | None = None
    source: str = ""
    cpu_of: str = ""
    paper_parameters: int | None = None
    notes: tuple[str, ...] = ()


TABLE_II_A, TABLE_II_B = (f"Weird-Net Table II (structure {s})" for s in "AB")
MOSS_II = ("Moss paper Table II (structure A; Leaky-ReLU FFN, biases on the A and V "
           "projections)")
TABLE_VII_B = "Weird-Net Table VII (structure B)"
TABLE_VII_GPT2 = "GPT-2 size of Weird-Net Table VII"
RELATION_2 = "Relation paper Table 2 (one layer, d = 128; FFN as wide as d)"
TPP = ("Transformer++ (rotary positions, SwiGLU, RMSNorm, no biases: Llama's blocks) at the "
       "GPT-2 {} width and depth")
WEIRDNET_NOTES = (
    "why the counts differ: GPT-2's own stated sizes (117M/345M/762M) are below the",
    "actual counts of those models (124.4M/354.8M/774.0M, as gpt2-* builds here).",
    "The paper's 110M/320M/704M equal the stated GPT-2 sizes minus one D x D matrix",
    "per layer (117 - 12*0.59 = 109.9; 345 - 24*1.05 = 319.8; 762 - 36*1.64 = 703.0):",
    "what removing one of softmax attention's four projections from EVERY layer saves.",
    "Structure B has Weird-attention (3 projections) only in every other layer, so it",
    "saves half of that from the actual GPT-2 count: e.g. small = 124.4M - 6*0.59M",
    "+ the w levels (10 x D per Weird layer) - biases = 120.9M.")
GPT2_NOTES = (
    "GPT-2's paper states 117M/345M/762M; the actual GPT-2 weights have",
    "124,439,808 / 354,823,168 / 774,030,080 parameters, which this build matches.",)

ROWS: tuple[Row, ...] = (
    # Weird-Net Table II: N, D, d_ff; the encoder (A) and the decoder (B) on each LRA task
    Row("lra-listops", ENCODER_A, "listops", depth=4, dim=512, d_ff=1024, source=TABLE_II_A),
    Row("lra-listops-cpu", ENCODER_A, "listops", depth=2, dim=64, d_ff=128,
        cpu_of="lra-listops"),
    Row("lra-listops-decoder", CAUSAL_B, "listops", depth=4, dim=512, d_ff=1024,
        source=TABLE_II_B),
    Row("lra-listops-decoder-cpu", CAUSAL_B, "listops", depth=2, dim=64, d_ff=128,
        cpu_of="lra-listops-decoder"),
    Row("lra-text", ENCODER_A, "text", depth=4, dim=256, d_ff=1024, source=TABLE_II_A),
    Row("lra-text-cpu", ENCODER_A, "text", depth=2, dim=64, d_ff=128, cpu_of="lra-text"),
    Row("lra-text-decoder", CAUSAL_B, "text", depth=4, dim=256, d_ff=1024, source=TABLE_II_B),
    Row("lra-text-decoder-cpu", CAUSAL_B, "text", depth=2, dim=64, d_ff=128,
        cpu_of="lra-text-decoder"),
    # (no decoder for Retrieval: its dual encoder reads two documents)
    Row("lra-retrieval", ENCODER_A, "retrieval", depth=4, dim=128, d_ff=512, source=TABLE_II_A),
    Row("lra-retrieval-cpu", ENCODER_A, "retrieval", depth=2, dim=64, d_ff=128,
        cpu_of="lra-retrieval"),
    Row("lra-image", ENCODER_A, "image", depth=1, dim=64, d_ff=128, source=TABLE_II_A),
    Row("lra-image-cpu", ENCODER_A, "image", depth=1, dim=64, d_ff=128, cpu_of="lra-image"),
    Row("lra-image-decoder", CAUSAL_B, "image", depth=1, dim=64, d_ff=128, source=TABLE_II_B),
    Row("lra-image-decoder-cpu", CAUSAL_B, "image", depth=1, dim=64, d_ff=128,
        cpu_of="lra-image-decoder"),
    Row("lra-pathfinder", ENCODER_A, "pathfinder", depth=2, dim=32, d_ff=64, source=TABLE_II_A),
    Row("lra-pathfinder-cpu", ENCODER_A, "pathfinder", depth=2, dim=32, d_ff=64,
        cpu_of="lra-pathfinder"),
    Row("lra-pathfinder-decoder", CAUSAL_B, "pathfinder", depth=2, dim=32, d_ff=64,
        source=TABLE_II_B),
    Row("lra-pathfinder-decoder-cpu", CAUSAL_B, "pathfinder", depth=2, dim=32, d_ff=64,
        cpu_of="lra-pathfinder-decoder"),
    Row("lra-pathx", ENCODER_A, "pathx", depth=1, dim=16, d_ff=32, source=TABLE_II_A),
    Row("lra-pathx-cpu", ENCODER_A, "pathx", depth=1, dim=16, d_ff=32, cpu_of="lra-pathx"),
    Row("lra-pathx-decoder", CAUSAL_B, "pathx", depth=1, dim=16, d_ff=32, source=TABLE_II_B),
    Row("lra-pathx-decoder-cpu", CAUSAL_B, "pathx", depth=1, dim=16, d_ff=32,
        cpu_of="lra-pathx-decoder"),
    # DBA paper Table 7: depth, heads, d, d_ffn (d_p = 16, d_in = 24)
    Row("dba-lra-listops", DBA_ENCODER, "listops", depth=6, dim=512, d_ff=2048, heads=8,
        d_in=24, source="DBA Table 7"),
    Row("dba-lra-listops-cpu", DBA_ENCODER, "listops", depth=2, dim=64, d_ff=128, heads=4,
        d_in=24, cpu_of="dba-lra-listops"),
    Row("dba-lra-text", DBA_ENCODER, "text", depth=4, dim=256, d_ff=1024, heads=4, d_in=24,
        source="DBA Table 7"),
    Row("dba-lra-text-cpu", DBA_ENCODER, "text", depth=2, dim=64, d_ff=128, heads=4, d_in=24,
        cpu_of="dba-lra-text"),
    Row("dba-lra-retrieval", DBA_ENCODER, "retrieval", depth=4, dim=128, d_ff=512, heads=4,
        d_in=24, source="DBA Table 7"),
    Row("dba-lra-retrieval-cpu", DBA_ENCODER, "retrieval", depth=2, dim=64, d_ff=128, heads=4,
        d_in=24, cpu_of="dba-lra-retrieval"),
    Row("dba-lra-image", DBA_ENCODER, "image", depth=1, dim=64, d_ff=128, heads=8, d_in=24,
        source="DBA Table 7"),
    Row("dba-lra-image-cpu", DBA_ENCODER, "image", depth=1, dim=64, d_ff=128, heads=4, d_in=24,
        cpu_of="dba-lra-image"),
    Row("dba-lra-pathfinder", DBA_ENCODER, "pathfinder", depth=1, dim=128, d_ff=128, heads=4,
        d_in=24, source="DBA Table 7"),
    Row("dba-lra-pathfinder-cpu", DBA_ENCODER, "pathfinder", depth=1, dim=64, d_ff=128,
        heads=4, d_in=24, cpu_of="dba-lra-pathfinder"),
    # Moss paper Table II: N, D, d_ff (ListOps, Text, Retrieval as Weird-Net's Table II)
    Row("moss-lra-listops", MOSS, "listops", depth=4, dim=512, d_ff=1024, source=MOSS_II),
    Row("moss-lra-listops-cpu", MOSS, "listops", depth=2, dim=64, d_ff=128,
        cpu_of="moss-lra-listops"),
    Row("moss-lra-text", MOSS, "text", depth=4, dim=256, d_ff=1024, source=MOSS_II),
    Row("moss-lra-text-cpu", MOSS, "text", depth=2, dim=64, d_ff=128, cpu_of="moss-lra-text"),
    Row("moss-lra-retrieval", MOSS, "retrieval", depth=4, dim=128, d_ff=512, source=MOSS_II),
    Row("moss-lra-retrieval-cpu", MOSS, "retrieval", depth=2, dim=64, d_ff=128,
        cpu_of="moss-lra-retrieval"),
    Row("moss-lra-image", MOSS, "image", depth=1, dim=32, d_ff=64, source=MOSS_II),
    Row("moss-lra-image-cpu", MOSS, "image", depth=1, dim=32, d_ff=64, cpu_of="moss-lra-image"),
    Row("moss-lra-pathfinder", MOSS, "pathfinder", depth=1, dim=32, d_ff=64, source=MOSS_II),
    Row("moss-lra-pathfinder-cpu", MOSS, "pathfinder", depth=1, dim=32, d_ff=64,
        cpu_of="moss-lra-pathfinder"),
    Row("moss-lra-pathx", MOSS, "pathx", depth=1, dim=32, d_ff=64, source=MOSS_II),
    Row("moss-lra-pathx-cpu", MOSS, "pathx", depth=1, dim=32, d_ff=64, cpu_of="moss-lra-pathx"),
    # Weird-Net Table VII: N, D, d_ff, heads and the stated parameters; GPT-2 at each size
    Row("weirdnet-small", CAUSAL_B, "gpt2-tokens", depth=12, dim=768, d_ff=3072, heads=12,
        source=TABLE_VII_B, paper_parameters=110_000_000, notes=WEIRDNET_NOTES),
    Row("weirdnet-small-cpu", CAUSAL_B, "bytes-16k", depth=4, dim=128, d_ff=512, heads=4,
        cpu_of="weirdnet-small"),
    Row("gpt2-small", GPT2, "gpt2-tokens", depth=12, dim=768, d_ff=3072, heads=12,
        source=TABLE_VII_GPT2, paper_parameters=117_000_000, notes=GPT2_NOTES),
    Row("gpt2-small-cpu", GPT2, "bytes-16k", depth=4, dim=128, d_ff=512, heads=4,
        cpu_of="gpt2-small"),
    Row("weirdnet-medium", CAUSAL_B, "gpt2-tokens", depth=24, dim=1024, d_ff=4096, heads=16,
        source=TABLE_VII_B, paper_parameters=320_000_000, notes=WEIRDNET_NOTES),
    Row("gpt2-medium", GPT2, "gpt2-tokens", depth=24, dim=1024, d_ff=4096, heads=16,
        source=TABLE_VII_GPT2, paper_parameters=345_000_000, notes=GPT2_NOTES),
    Row("weirdnet-large", CAUSAL_B, "gpt2-tokens", depth=36, dim=1280, d_ff=5120, heads=20,
        source=TABLE_VII_B, paper_parameters=704_000_000, notes=WEIRDNET_NOTES),
    Row("gpt2-large", GPT2, "gpt2-tokens", depth=36, dim=1280, d_ff=5120, heads=20,
        source=TABLE_VII_GPT2, paper_parameters=762_000_000, notes=GPT2_NOTES),
    # the Transformer++ at the same widths and depths: a SwiGLU FFN of 8·D/3, rounded up
    Row("transformerpp-small", TRANSFORMER_PP, "gpt2-tokens", depth=12, dim=768,
        d_ff=swiglu_width(768, 256), heads=12, source=TPP.format("small")),
    Row("transformerpp-small-cpu", TRANSFORMER_PP, "bytes-16k", depth=4, dim=128,
        d_ff=swiglu_width(128, 32), heads=4, cpu_of="transformerpp-small"),
    Row("transformerpp-medium", TRANSFORMER_PP, "gpt2-tokens", depth=24, dim=1024,
        d_ff=swiglu_width(1024, 256), heads=16, source=TPP.format("medium")),
    Row("transformerpp-large", TRANSFORMER_PP, "gpt2-tokens", depth=36, dim=1280,
        d_ff=swiglu_width(1280, 256), heads=20, source=TPP.format("large")),
    Row("weirdnet-a-small-cpu", CAUSAL_A, "bytes-16k", depth=4, dim=128, d_ff=512, heads=4,
        source="structure A (every layer Weird-attention) at the widths of gpt2-small-cpu"),
    Row("weirdnet-a-long-cpu", LONG_A, "bytes-1m", depth=4, dim=256, d_ff=1024, heads=4,
        source="structure A without a position embedding, D = 256, N = 4, for contexts up "
               "to 1,048,576 bytes (issue 33)"),
    # DBA paper Table 8: depth, heads, d, d_ffn, d_in (d_p = 16)
    Row("dba-uea-ethanol-concentration", DBA, "uea/ethanol-concentration", depth=1, dim=64,
        d_ff=256, heads=8, d_in=24, source="DBA Table 8"),
    Row("dba-uea-ethanol-concentration-cpu", DBA, "uea/ethanol-concentration", depth=1,
        dim=64, d_ff=128, heads=4, d_in=24, cpu_of="dba-uea-ethanol-concentration"),
    Row("dba-uea-face-detection", DBA, "uea/face-detection", depth=3, dim=128, d_ff=256,
        heads=8, d_in=24, source="DBA Table 8"),
    Row("dba-uea-face-detection-cpu", DBA, "uea/face-detection", depth=1, dim=64, d_ff=128,
        heads=4, d_in=24, cpu_of="dba-uea-face-detection"),
    Row("dba-uea-handwriting", DBA, "uea/handwriting", depth=1, dim=128, d_ff=256, heads=8,
        d_in=24, source="DBA Table 8"),
    Row("dba-uea-handwriting-cpu", DBA, "uea/handwriting", depth=1, dim=64, d_ff=128, heads=4,
        d_in=24, cpu_of="dba-uea-handwriting"),
    Row("dba-uea-heartbeat", DBA, "uea/heartbeat", depth=1, dim=64, d_ff=256, heads=8,
        d_in=24, source="DBA Table 8"),
    Row("dba-uea-heartbeat-cpu", DBA, "uea/heartbeat", depth=1, dim=64, d_ff=128, heads=4,
        d_in=24, cpu_of="dba-uea-heartbeat"),
    Row("dba-uea-japanese-vowels", DBA, "uea/japanese-vowels", depth=3, dim=128, d_ff=256,
        heads=8, d_in=24, source="DBA Table 8"),
    Row("dba-uea-japanese-vowels-cpu", DBA, "uea/japanese-vowels", depth=1, dim=64, d_ff=128,
        heads=4, d_in=24, cpu_of="dba-uea-japanese-vowels"),
    Row("dba-uea-pems-sf", DBA, "uea/pems-sf", depth=1, dim=128, d_ff=512, heads=8, d_in=24,
        source="DBA Table 8"),
    Row("dba-uea-pems-sf-cpu", DBA, "uea/pems-sf", depth=1, dim=64, d_ff=128, heads=4,
        d_in=24, cpu_of="dba-uea-pems-sf"),
    Row("dba-uea-self-regulation-scp1", DBA, "uea/self-regulation-scp1", depth=3, dim=128,
        d_ff=256, heads=8, d_in=24, source="DBA Table 8"),
    Row("dba-uea-self-regulation-scp1-cpu", DBA, "uea/self-regulation-scp1", depth=1, dim=64,
        d_ff=128, heads=4, d_in=24, cpu_of="dba-uea-self-regulation-scp1"),
    Row("dba-uea-self-regulation-scp2", DBA, "uea/self-regulation-scp2", depth=3, dim=128,
        d_ff=256, heads=8, d_in=24, source="DBA Table 8"),
    Row("dba-uea-self-regulation-scp2-cpu", DBA, "uea/self-regulation-scp2", depth=1, dim=64,
        d_ff=128, heads=4, d_in=24, cpu_of="dba-uea-self-regulation-scp2"),
    Row("dba-uea-spoken-arabic-digits", DBA, "uea/spoken-arabic-digits", depth=3, dim=128,
        d_ff=256, heads=8, d_in=24, source="DBA Table 8"),
    Row("dba-uea-spoken-arabic-digits-cpu", DBA, "uea/spoken-arabic-digits", depth=1, dim=64,
        d_ff=128, heads=4, d_in=24, cpu_of="dba-uea-spoken-arabic-digits"),
    # UWaveGestureLibrary: Table 8 has d_in = 24 with 16 heads; DBA as its authors run it
    # (the default form) splits d_in over the heads (their code: head_dim = middle_dim //
    # nhead), so 24 cannot be split 16 ways: ours is d_in = 32, the nearest multiple of 16,
    # keeping Table 8's heads (form = "paper-literal" with d_in = 24 is the row read
    # literally).
    Row("dba-uea-uwave-gesture-library", DBA, "uea/uwave-gesture-library", depth=3, dim=256,
        d_ff=256, heads=16, d_in=32, source="DBA Table 8"),
    Row("dba-uea-uwave-gesture-library-cpu", DBA, "uea/uwave-gesture-library", depth=1,
        dim=64, d_ff=128, heads=4, d_in=32, cpu_of="dba-uea-uwave-gesture-library"),
    # Relation paper Table 2 (IMDb): one layer of each mechanism; one attention head of width d
    Row("relation-imdb-attention", SOFTMAX, "imdb", depth=1, dim=128, d_ff=128, heads=1,
        source=RELATION_2),
    Row("relation-imdb-attention-cpu", SOFTMAX, "imdb", depth=1, dim=64, d_ff=64, heads=1,
        cpu_of="relation-imdb-attention"),
    Row("relation-imdb-linear-attention", LINEAR, "imdb", depth=1, dim=128, d_ff=128, heads=1,
        source=RELATION_2),
    Row("relation-imdb-linear-attention-cpu", LINEAR, "imdb", depth=1, dim=64, d_ff=64,
        heads=1, cpu_of="relation-imdb-linear-attention"),
    Row("relation-imdb-relation", RELATION, "imdb", depth=1, dim=128, d_ff=128,
        source=RELATION_2),
    Row("relation-imdb-relation-cpu", RELATION, "imdb", depth=1, dim=64, d_ff=64,
        cpu_of="relation-imdb-relation"),
    Row("weirdnet-recall", CAUSAL_B, "recall", depth=2, dim=64, d_ff=128, heads=4,
        source="the recall diagnostics' model: structure B at width 64 (the width-64 model "
               "of `weirdnet bench recall`)"),
)
"""Every preset, in the order ``weirdnet info --list`` prints them."""


def preset_of(row: Row) -> Preset:
    """The :class:`Preset` of one table row: its sizes, its family's keys and what its
    data fixes, as one model config dict."""
    data, family = DATA[row.data], row.family
    backbone: dict[str, Any] = {"dim": row.dim, "depth": row.depth, "d_ff": row.d_ff,
                                "max_len": data.max_len, "pattern": family.pattern,
                                "vocab_size": data.vocab_size}
    optional = {"causal": family.causal, "heads": row.heads, "input_dim": data.input_dim}
    backbone.update({key: value for key, value in optional.items() if value is not None})
    backbone.update(copy.deepcopy(dict(family.backbone)))
    if row.d_in is not None:
        backbone["mixer_options"] = {"dba": {"d_p": DBA_D_P, "d_in": row.d_in}}
    config: dict[str, Any] = {"backbone": backbone}
    if data.num_classes is not None:
        config["num_classes"] = data.num_classes
    source = row.source or f"small CPU version of {row.cpu_of}"
    return Preset(row.name, data.model, config, source, row.paper_parameters, row.notes)


PRESETS: dict[str, Preset] = {row.name: preset_of(row) for row in ROWS}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; unknown names suggest the closest."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, list(PRESETS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown preset {name!r}{hint} (`weirdnet info --list` lists them)")
    return PRESETS[name]


def preset_config(name: str, **overrides) -> dict[str, Any]:
    """A deep copy of preset ``name``'s config dict with top-level ``overrides``."""
    config = copy.deepcopy(get_preset(name).config)
    config.update(overrides)
    return config


def build_preset(name: str, device=None, **overrides):
    """Instantiate preset ``name`` (on ``device``; "meta" allocates nothing)."""
    # deferred: presets are read without torch (`weirdnet info --list`, the lab's --help)
    import torch

    from .base import model_class

    preset = get_preset(name)
    cls = model_class(preset.model)
    config = preset_config(name, **overrides)
    with torch.device(device or "cpu"):
        return cls(config)
