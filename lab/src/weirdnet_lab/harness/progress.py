"""One progress line per measurement on stderr (tqdm's bar when tqdm is installed).

Without tqdm, :meth:`Progress.start` prints ``[i/N] what ...`` without a newline and
:meth:`Progress.done` completes that line with the result, so a long measurement shows
what is running while it runs.
"""

from __future__ import annotations

import sys


class Progress:
    """Counts ``total`` measurements; ``start`` announces one, ``done`` reports its result."""

    def __init__(self, total: int) -> None:
        self.total, self.count = total, 0
        self._open: str | None = None
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar = None
        else:
            self._bar = tqdm(total=total, file=sys.stderr, unit="meas", leave=False)

    def _print(self, text: str, end: str = "\n") -> None:
        print(text, end=end, file=sys.stderr, flush=True)

    def start(self, what: str) -> None:
        """Announce the measurement ``what`` about to run (its line stays open)."""
        if self._bar is not None:
            self._bar.set_description_str(what)
            return
        if self._open is not None:
            self._print("")
        self._print(f"[{self.count + 1}/{self.total}] {what} ...", end="")
        self._open = what

    def done(self, what: str, result: str) -> None:
        """Report that ``what`` finished with ``result``."""
        self.count += 1
        line = f"[{self.count}/{self.total}] {what}: {result}"
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
            self._bar.update(1)
        elif self._open == what:
            self._print(f" {result}")
        else:
            if self._open is not None:
                self._print("")
            self._print(line)
        self._open = None

    def skip(self, n: int) -> None:
        """Count ``n`` measurements that will not run."""
        self.count += max(0, n)
        if self._bar is not None:
            self._bar.update(max(0, n))

    def close(self) -> None:
        """Finish any open line and remove the bar."""
        if self._bar is not None:
            self._bar.close()
        elif self._open is not None:
            self._print("")
            self._open = None
