"""SIGINT and SIGTERM as one exception, raised where it is safe.

Ctrl-C sends SIGINT; ``timeout``, Slurm preemption, ``docker stop`` and torchrun's own
shutdown send SIGTERM.  Both end a weirdnet command the same way: :class:`Interrupted`
(a ``BaseException``, so ``except Exception`` never swallows it), which the CLI turns
into one line on stderr and exit status ``128 + signal`` (130 for SIGINT, 143 for
SIGTERM), never a traceback.

Where it is raised is decided by :data:`STOP` (one per process, like the handlers):

- by default a signal raises :class:`Interrupted` at once, wherever the main thread is,
  except in the middle of an import (a C extension such as torch, half initialized, breaks
  the code that runs after it with errors of its own): there it is sent again every
  :data:`RETRY_S` seconds until the import is complete;
- inside ``with STOP.deferred():`` (a training loop) the first signal is only recorded,
  and its ``notice`` (if given) is written at once, so a user whose step takes minutes
  knows the signal arrived; the loop calls :meth:`StopRequest.check` at safe points
  (between steps, between evaluation batches) and stops cleanly there.  A second signal
  raises at once, so a stuck step can still be stopped;
- inside ``with STOP.shielded():`` (writing a checkpoint) every signal waits until the
  block ends, so the write is never cut in half.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from weirdnet.run.line_end import mid_line

__all__ = ["STOP", "Interrupted", "StopRequest"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)

RETRY_S = 0.05
"""A signal that arrives during an import is sent again this many seconds later, until
the import is complete (see :meth:`StopRequest._handle`)."""


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


def _importing(frame) -> bool:
    """Whether ``frame`` or a frame below it runs an import (importlib's bootstrap)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


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
        self._held = False
        self._retrying = False
        self._previous: dict[int, object] | None = None
        self._notice: str | None = None

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
        if self._held or self._shield or (self._defer and self.signum is None):
            first = self.signum is None
            self.signum = self.signum or signum
            if first and self._defer and self._notice and not self._held:
                write_line(self._notice.format(signal=signal_name(signum)))
            return
        self.signum = self.signum or signum
        if _importing(frame):  # never cut an import in half (a C extension's init breaks)
            self._again(signum)
            return
        raise Interrupted(signum)

    def _again(self, signum: int) -> None:
        """Send ``signum`` to this process again in :data:`RETRY_S` (once at a time)."""
        if self._retrying:
            return
        self._retrying = True

        def resend() -> None:
            self._retrying = False
            if self._previous is not None:  # still this object's handlers
                os.kill(os.getpid(), signum)

        timer = threading.Timer(RETRY_S, resend)
        timer.daemon = True
        timer.start()

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
    def deferred(self, notice: str | None = None) -> Iterator[StopRequest]:
        """The first signal is recorded, not raised: poll :meth:`check`.  ``notice`` (its
        ``{signal}`` replaced by the signal's name) is written to stderr the moment that
        signal arrives."""
        installed = self.install()
        self._defer += 1
        outer, self._notice = self._notice, notice
        try:
            yield self
        finally:
            self._defer -= 1
            self._notice = outer
            if installed:
                self.uninstall()

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Every signal waits until the block has ended (then acts as usual); in nested
        blocks, until the outermost has ended."""
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
        if self.signum is not None and not (self._shield or self._defer or self._held):
            raise Interrupted(self.signum)

    def hold(self) -> None:
        """From now on signals are only recorded (until :meth:`reset`): the process is on
        its way out, writing its last line, and a second Ctrl-C must not turn that into a
        traceback."""
        self._held = True

    def exit_on_signal(self, prefix: str) -> None:
        """For the rest of the process (the command has returned; the interpreter shuts
        down): a stop signal writes one line ``<prefix>: interrupted by SIGINT while
        exiting`` and exits at once with 128 + signal, instead of a ``KeyboardInterrupt``
        traceback or a silent SIGTERM death.  Main thread only; a no-op elsewhere."""
        if threading.current_thread() is not threading.main_thread():
            return

        def leave(signum: int, frame) -> None:
            try:
                write_line(f"{prefix}: interrupted by {signal_name(signum)} while exiting")
            finally:
                os._exit(128 + signum)

        for signum in SIGNALS:
            signal.signal(signum, leave)
        self._previous = None

    @staticmethod
    def ignore() -> None:
        """Ignore SIGINT and SIGTERM from now on: for the last moments of the interpreter's
        shutdown (registered with ``atexit`` first, it runs after every later exit
        function), where Python would put back the default actions (a silent death by
        the signal) while modules and torch's C++ state are torn down."""
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                signal.signal(signum, signal.SIG_IGN)

    def reset(self) -> None:
        """Forget a recorded signal (tests; a library caller that handled it)."""
        self.signum = None
        self._held = False


def write_line(text: str) -> None:
    """``text`` as one line on stderr, from a signal handler: the streams are flushed,
    the line starts a line of its own (after a progress bar's) and goes straight to the
    file descriptor (a buffered write could be re-entered)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, RuntimeError):
            pass
    line = text + "\n"
    if mid_line():  # a bar's line (stderr is cli.main's LineEndTracker)
        line = "\n" + line
    try:
        os.write(2, line.encode())
    except OSError:
        pass


STOP = StopRequest()
"""The process's stop record; the CLI installs its handlers for every command."""
