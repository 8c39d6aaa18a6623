"""SIGINT and SIGTERM as one exception, raised where it is safe.

Ctrl-C sends SIGINT; ``timeout``, Slurm preemption, ``docker stop`` and torchrun's own
shutdown send SIGTERM.  Both end a weirdnet command the same way: :class:`Interrupted`
(a ``BaseException``, so ``except Exception`` never swallows it), which the CLI turns
into one line on stderr and exit status ``128 + signal`` (130 for SIGINT, 143 for
SIGTERM), never a traceback.

Where it is raised is decided by :data:`STOP` (one per process, like the handlers):

- by default a signal raises :class:`Interrupted` at once, wherever the main thread is;
- inside ``with STOP.deferred():`` (a training loop) the first signal is only recorded;
  the loop calls :meth:`StopRequest.check` at safe points (between steps, between
  evaluation batches) and stops cleanly there.  A second signal raises at once, so a
  stuck step can still be stopped;
- inside ``with STOP.shielded():`` (writing a checkpoint) every signal waits until the
  block ends, so the write is never cut in half.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["STOP", "Interrupted", "StopRequest"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The process was asked to stop by ``signum``; ``message`` says what was kept."""

    def __init__(self, signum: int, message: str | None = None, *,
                 at_safe_point: bool = False, quiet: bool = False):
        self.signum = signum
        self.message = message or f"interrupted by {signal_name(signum)}"
        self.at_safe_point = at_safe_point  # raised by StopRequest.check, not mid-work
        self.quiet = quiet  # nothing to print (e.g. a torchrun worker other than rank 0)
        super().__init__(self.message)

    @property
    def exit_status(self) -> int:
        """The shell's convention: 128 + the signal number (SIGINT 130, SIGTERM 143)."""
        return 128 + self.signum


def signal_name(signum: int) -> str:
    """'SIGINT', 'SIGTERM', ... of a signal number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopRequest:
    """The process-wide record of stop signals (see the module doc)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._defer = 0
        self._shield = 0
        self._previous: dict[int, object] | None = None

    # -- handlers --

    def install(self) -> bool:
        """Handle SIGINT and SIGTERM here; False (nothing done) off the main thread or
        when already installed."""
        if self._previous is not None or threading.current_thread() is not \
                threading.main_thread():
            return False
        self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return True

    def uninstall(self) -> None:
        """Put back the handlers that :meth:`install` replaced."""
        if self._previous is not None:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
            self._previous = None

    def _handle(self, signum: int, frame) -> None:
        if self._shield or (self._defer and self.signum is None):
            self.signum = self.signum or signum
            return
        self.signum = self.signum or signum
        raise Interrupted(signum)

    # -- where signals may act --

    @property
    def requested(self) -> bool:
        """Whether a stop signal has arrived."""
        return self.signum is not None

    def check(self, message: str | None = None) -> None:
        """Raise :class:`Interrupted` if a stop signal has arrived."""
        if self.signum is not None:
            raise Interrupted(self.signum, message, at_safe_point=True)

    @contextmanager
    def deferred(self) -> Iterator[StopRequest]:
        """The first signal is recorded, not raised: poll :meth:`check`."""
        installed = self.install()
        self._defer += 1
        try:
            yield self
        finally:
            self._defer -= 1
            if installed:
                self.uninstall()

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Every signal waits until the block has ended (then acts as usual)."""
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
        if self.signum is not None and not self._defer:
            raise Interrupted(self.signum)

    def reset(self) -> None:
        """Forget a recorded signal (tests; a library caller that handled it)."""
        self.signum = None


STOP = StopRequest()
"""The process's stop record; the CLI installs its handlers for every command."""
