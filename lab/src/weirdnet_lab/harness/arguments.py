"""argparse types the bench commands share: integers with a floor, and lists of them.

A value below the floor is a usage error (``argument --batch: must be at least 1, got
0``, exit status 2) instead of being read as "not given" or failing inside a run.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # what argparse names in its messages
    return parse


positive = at_least(1)
"""An argparse ``type``: an integer of at least 1."""


def positive_list(text: str) -> list[int]:
    """An argparse ``type``: ``"1024,2048"``, integers of at least 1 given with commas."""
    return [positive(part) for part in text.split(",") if part.strip()]


def above(minimum: float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number greater than ``minimum``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value <= minimum:
            raise argparse.ArgumentTypeError(f"must be a number above {minimum:g}, got {text}")
        return value

    parse.__name__ = f"number > {minimum:g}"
    return parse
