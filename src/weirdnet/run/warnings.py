"""weirdnet's own warnings, shown as one plain line: the message, no file, line or source.

Python prints a warning as ``FILE:LINE: Category: message`` followed by the source line
that raised it, which reads like a crash.  A :class:`WeirdnetWarning` (or a subclass) is
a message to the user, so importing this module installs a ``warnings.formatwarning``
that prints it as just its message; every other warning keeps Python's format.  Filters
(``-W``, ``warnings.simplefilter``, pytest's capture) apply as usual.
"""

from __future__ import annotations

import warnings


class WeirdnetWarning(UserWarning):
    """A user-facing weirdnet warning: printed as one line, its message only."""


def warn(message: str, category: type[WeirdnetWarning] = WeirdnetWarning,
         stacklevel: int = 2) -> None:
    """``warnings.warn`` of ``message`` as one line (line breaks become spaces)."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    warnings.warn(line, category, stacklevel=stacklevel + 1)


def _format(message, category, filename, lineno, line=None) -> str:
    if isinstance(category, type) and issubclass(category, WeirdnetWarning):
        return f"{message}\n"
    return _format.python(message, category, filename, lineno, line)


def install() -> None:
    """Make ``warnings.formatwarning`` print :class:`WeirdnetWarning` as its message alone
    (idempotent; any formatter installed before is kept for other warnings)."""
    if warnings.formatwarning is not _format:
        _format.python = warnings.formatwarning
        warnings.formatwarning = _format


install()
