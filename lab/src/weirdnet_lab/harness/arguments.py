"""argparse types the bench commands share: numbers with a floor, and lists of them.

A value below the floor is a usage error (``argument --batch: must be at least 1, got
0``, exit status 2) instead of being read as "not given" or failing inside a run.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _with_floor(convert: Callable[[str], float], kind: str, ok: Callable[[float], bool],
                floor: str) -> Callable[[str], float]:
    """An argparse ``type``: ``convert(text)`` (a usage error naming ``kind`` when it
    fails), which must pass ``ok`` (a usage error saying it must be ``floor``)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {floor}, got {text}")
        return value

    parse.__name__ = kind  # what argparse names in its own messages
    return parse


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer of at least ``minimum``."""
    return _with_floor(int, "an integer", lambda value: value >= minimum,
                       f"at least {minimum}")


def above(minimum: float) -> Callable[[str], float]:
    """An argparse ``type``: a finite number greater than ``minimum``."""
    return _with_floor(float, "a number",
                       lambda value: math.isfinite(value) and value > minimum,
                       f"a number above {minimum:g}")


positive = at_least(1)
"""An argparse ``type``: an integer of at least 1."""


def positive_list(text: str) -> list[int]:
    """An argparse ``type``: ``"1024,2048"``, integers of at least 1 given with commas."""
    return [positive(part) for part in text.split(",") if part.strip()]
