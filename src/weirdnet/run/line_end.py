"""Whether the last text written to stderr ended its line.

A stopped command's last line must start a line of its own, but a progress bar (ours or a
library's, such as ``transformers``' "Writing model shards") may have left the cursor in
the middle of one; a bar the signal caught inside its own ``__init__`` is not even in
``tqdm``'s list of bars any more, so closing the bars cannot be relied on.
:class:`LineEndTracker` wraps the stream for the command's life and remembers only the
last character written through it; :func:`end_the_line` ends the line when needed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

__all__ = ["LineEndTracker", "end_the_line", "mid_line"]

LINE_ENDS = ("\n", "\r")
"""After either, the cursor is at the start of a line (tqdm ends a bar it removes with
``\\r``)."""


class LineEndTracker:
    """A text stream that writes through to ``stream`` and records whether the last
    non-empty write ended with a line end (:attr:`mid_line`).  Every other attribute
    (``fileno``, ``isatty``, ``encoding``, ``flush``, ...) is the wrapped stream's."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.mid_line = False

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        if text:
            self.mid_line = not text.endswith(LINE_ENDS)
        return written

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def mid_line(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default ``sys.stderr``) is a :class:`LineEndTracker` whose last
    write left the cursor mid-line (a plain stream: False, nothing known)."""
    stream = sys.stderr if stream is None else stream
    return getattr(stream, "mid_line", False) is True


def end_the_line(stream: TextIO | None = None) -> None:
    """Write a newline to ``stream`` (default ``sys.stderr``) if :func:`mid_line`."""
    stream = sys.stderr if stream is None else stream
    if mid_line(stream):
        stream.write("\n")
        stream.flush()
