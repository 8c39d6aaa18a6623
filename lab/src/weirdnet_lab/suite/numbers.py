"""The numbers the papers report, keyed by our variant and task names.

Every value here is the papers' (test accuracy in %, or bits per character), copied from
the tables named beside it; none is ours.  The report prints them beside our measured
numbers under a "paper" label.
"""

from __future__ import annotations

LRA_COLUMNS = ("listops", "text", "retrieval", "image", "pathfinder")
UEA_COLUMNS = ("jv", "scp1", "scp2")


def _row(*values: float | None) -> dict[str, float]:
    return {task: v for task, v in zip(LRA_COLUMNS, values) if v is not None}


# Table III layout.  Source per row: (paper table, row label there).
LRA = {
    "weird-a": ("Weird-Net Table III", "Weird-Net (encoder)",
                _row(39.68, 81.94, 67.21, 62.09, 91.22)),
    "weird-b": ("Weird-Net Table III", "Weird-Net (decoder)",
                _row(45.54, 71.02, 59.10, 53.06, 86.60)),
    "ps": ("Weird-Net Table IX", "PS-attention (W = 1)",
           _row(38.89, 66.47, 65.52, 52.24, 88.78)),
    "dba": ("DBA Table 2", "DBA (mean of 5 seeds; Retrieval at 30K steps)",
            _row(38.10, 66.25, 80.64, 46.51, 79.56)),
    "softmax": ("Weird-Net Table III", "Transformer", _row(36.37, 64.27, 57.46, 42.44, 71.40)),
    "linear": ("Weird-Net Table III", "Linear Trans", _row(16.13, 65.90, 53.09, 42.34, 75.30)),
    "linformer": ("Weird-Net Table III", "Linformer", _row(35.70, 53.94, 52.27, 38.56, 76.34)),
    "local": ("Weird-Net Table III", "Local Attention",
              _row(15.82, 52.98, 53.39, 41.46, 66.63)),
}

# DBA Table 3 (UEA), the rows that are mechanisms here.
UEA = {
    "softmax": {"jv": 98.7, "scp1": 92.2, "scp2": 53.9},
    "linformer": {"jv": 98.6, "scp1": 91.8, "scp2": 57.2},
    "linear": {"jv": 99.2, "scp1": 91.8, "scp2": 55.6},
    "dba": {"jv": 99.6, "scp1": 92.8, "scp2": 58.1},
}

# Weird-Net Table VIII, enwik8 test bpc of the small models (GPT-2 small = Transformer).
# Another corpus and a 100x larger model than the suite's LM column: context only.
LM = {"weird-b": 1.02, "softmax": 1.16}

# Weird-Net Table IX: W modes (Pathfinder there is 91.92; Table III says 91.22).
TABLE_IX = {
    "weird-a": ("Exp(Prefix sum(w))", _row(39.68, 81.94, 67.21, 62.09, 91.92)),
    "weird-a-exp": ("Exp(w)", _row(38.59, 67.17, 65.77, 60.92, 90.51)),
    "ps": ("1 (PS-attention)", _row(38.89, 66.47, 65.52, 52.24, 88.78)),
}

# Weird-Net Table X: structures in the encoder (no Image column there).
TABLE_X = {
    "weird-a": ("A", _row(39.68, 81.19, 67.21, None, 91.92)),
    "weird-a-enc-b": ("B", _row(38.79, 75.03, 62.82, None, 88.67)),
}
TABLE_X_TASKS = ("listops", "text", "retrieval", "pathfinder")

# Weird-Net Table XI: structures in the decoder, WikiText-103 perplexity, small model.
TABLE_XI = {"weird-a": ("A", 23.17), "weird-b": ("B", 21.27)}

# DBA Table 12 (mean of 5 seeds).  d_p rows have d_in = 24, d_in rows d_p = 16.
TABLE_12 = {
    "dba-dp8": ("d_p = 8", _row(37.88, 66.06, 80.37, 45.70, 78.65)),
    "dba": ("d_p = 16, d_in = 24", _row(38.10, 66.25, 80.64, 46.51, 79.56)),
    "dba-dp64": ("d_p = 64", _row(37.40, 66.17, 80.69, 46.98, 80.05)),
    "dba-dp256": ("d_p = 256", _row(37.53, 66.20, 80.81, 48.03, 78.30)),
    "dba-din12": ("d_in = 12", _row(37.65, 66.18, 78.14, 46.24, 78.65)),
    "dba-din64": ("d_in = 64", _row(37.50, 66.19, 80.22, 47.64, 79.76)),
}

# Speed / peak memory relative to the Transformer on byte-level text classification:
# Weird-Net Table V (1K-4K) and DBA Table 1 (256-4K).  {family: {L: (speed, memory)}}
SPEED = {
    "weird-a": ("Weird-Net Table V", {1024: (1.0, 1.24), 2048: (1.6, 0.87),
                                      3072: (2.2, 0.63), 4096: (2.7, 0.50)}),
    "dba": ("DBA Table 1", {256: (1.1, 0.84), 512: (1.4, 0.66), 1024: (1.4, 0.38),
                            2048: (2.0, 0.19), 3072: (4.1, 0.15), 4096: (6.1, 0.09)}),
    "local": ("DBA Table 1", {256: (1.0, 0.94), 512: (1.1, 0.75), 1024: (1.1, 0.49),
                              2048: (1.7, 0.29), 3072: (3.2, 0.19), 4096: (5.3, 0.14)}),
    "linformer": ("DBA Table 1", {256: (1.0, 0.90), 512: (1.2, 0.70), 1024: (1.2, 0.44),
                                  2048: (1.9, 0.21), 3072: (3.7, 0.18), 4096: (5.5, 0.10)}),
    "linear": ("DBA Table 1", {256: (1.0, 1.16), 512: (1.1, 0.95), 1024: (1.1, 0.44),
                               2048: (1.9, 0.22), 3072: (3.7, 0.15), 4096: (5.6, 0.11)}),
}
