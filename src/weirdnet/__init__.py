"""weirdnet: fast, exact, numerically stable long-sequence layers (Weird-/AIB-attention)."""

__version__ = "0.2.0"
