"""The settings of ``weirdnet bench lm`` that its command and its report share (one
module that both import, so neither imports the other)."""

MIN_STEPS = 20
"""The fewest steps a timed run trains, even where its minutes fit fewer (then it trains
longer than the others; the report marks it)."""
