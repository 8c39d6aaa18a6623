"""Fault injection for the reliability tests: a process sends itself a real signal at a
named point of its work.

``WEIRDNET_FAULT="POINT=SIGNAL[xCOUNT][@N]"`` makes the N-th (default: first) arrival at
:func:`fault_point` ``POINT`` send ``SIGNAL`` (``SIGINT``, ``SIGTERM``, ``SIGKILL``, ...)
``COUNT`` times (default 1) to this process, e.g. ``checkpoint-write=SIGTERM``,
``eval-batch=SIGINTx2@3``.  Points: ``step`` (between backward and the optimizer step),
``checkpoint-write`` (files written, not yet renamed into place), ``checkpoint-rename``
(between the two renames that replace a directory), ``checkpoint-prune`` (an old
checkpoint renamed to a temporary, not yet deleted), ``eval-batch`` (before an
evaluation batch).  Unset (always, outside the tests), a point costs one dict lookup.
"""

from __future__ import annotations

import os
import re
import signal

__all__ = ["fault_point"]

_SPEC = re.compile(r"^(?P<point>[a-z-]+)=(?P<signal>SIG[A-Z]+)(?:x(?P<count>\d+))?"
                   r"(?:@(?P<nth>\d+))?$")
_arrivals: dict[str, int] = {}


def fault_point(point: str) -> None:
    """Send the signal ``WEIRDNET_FAULT`` names for ``point``, if this is its turn."""
    spec = os.environ.get("WEIRDNET_FAULT")
    if not spec:
        return
    match = _SPEC.match(spec)
    if match is None:
        raise ValueError(f"WEIRDNET_FAULT={spec!r}: expected POINT=SIGNAL[xCOUNT][@N]")
    if match["point"] != point:
        return
    _arrivals[point] = _arrivals.get(point, 0) + 1
    if _arrivals[point] != int(match["nth"] or 1):
        return
    signum = getattr(signal, match["signal"])
    for _ in range(int(match["count"] or 1)):
        os.kill(os.getpid(), signum)
