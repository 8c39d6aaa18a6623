"""Reading JSON Lines files that a stopped process may have cut short."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def json_objects(path: str | Path) -> Iterator[dict[str, Any]]:
    """Each line of the JSON Lines file ``path`` that holds a JSON object, in order.

    Blank lines, lines that do not parse (the last one, cut short when a process was
    stopped mid-write) and values that are not objects are skipped."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value
