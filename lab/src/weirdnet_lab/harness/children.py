"""Child processes of the bench commands: they end with the command, never orphaned.

The benchmarks measure in fresh processes (memory children, ``bench speed`` cells,
``bench suite`` training cells).  Every child here

- runs in its own session, so a terminal's Ctrl-C reaches only the bench command, which
  decides how its children stop (a training child gets exactly one SIGTERM and saves a
  checkpoint; two signals would make it stop at once);
- is stopped when the command stops: when any exception (a stop signal's
  :class:`~weirdnet.run.Interrupted` included) leaves :func:`run` or
  :func:`run_all`, each running child gets SIGTERM and is waited for, up to its
  ``grace_s``, then its whole process group gets SIGKILL.  A further stop signal while
  waiting forwards one more SIGTERM (a trainer then stops at once), a third SIGKILLs;
- is started with stdout and stderr in temporary files (or a log file), so no pipe can
  fill and block it, and several can run at once from one thread.

Every child is ``python -m weirdnet_lab.harness.child JOB SPEC`` (:mod:`.child`): build its
command with :func:`job_command` and read what it returned with :func:`job_result`
(or both at once: :func:`run_job`).  The child calls :func:`watch_parent`, so a child whose
command was killed outright (SIGKILL: no chance to stop its children) stops by itself
within a second.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import IO

from weirdnet.run import STOP, Interrupted

__all__ = ["ChildTimeout", "run", "run_all", "stop_all", "watch_parent"]

PARENT_ENV = "WEIRDNET_BENCH_PARENT"
"""Environment variable telling a child its parent's PID (for :func:`watch_parent`)."""

_LIVE: set[_Child] = set()
"""Children started and not yet reaped (for :func:`stop_all`)."""


class ChildTimeout(Exception):
    """A child ran past its time limit (it has been stopped)."""

    def __init__(self, command: Sequence[str], timeout_s: float):
        self.timeout_s = timeout_s
        super().__init__(f"timed out after {timeout_s:.0f} s: {' '.join(command)}")


class _Child:
    """One started child: its process, output files and deadline."""

    def __init__(self, command: Sequence[str], *, env: dict[str, str] | None,
                 log: IO | None, timeout_s: float | None, grace_s: float, what: str):
        self.command, self.grace_s, self.what = list(command), grace_s, what
        self.timeout_s, self._signalled = timeout_s, False
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        env = dict(os.environ if env is None else env)
        env[PARENT_ENV] = str(os.getpid())
        self._out = None if log is not None else tempfile.TemporaryFile()
        self._err = None if log is not None else tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=log or self._out,
            stderr=subprocess.STDOUT if log is not None else self._err, env=env,
            start_new_session=True)

    def poll(self) -> int | None:
        return self.proc.poll()

    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def result(self) -> subprocess.CompletedProcess:
        """The ended child's exit status and output (the output files are closed)."""
        out, err = (_read(f) for f in (self._out, self._err))
        return subprocess.CompletedProcess(self.command, self.proc.returncode, out, err)

    def terminate(self) -> None:
        """Send the child its one SIGTERM (if it still runs); :meth:`end` then waits."""
        if not self._signalled and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self._signalled = True

    def end(self) -> None:
        """Stop the child (see the module doc) and wait for it."""
        _LIVE.discard(self)
        self.terminate()
        signals, since, said = 1, time.monotonic(), False
        while True:
            try:
                waited = time.monotonic() - since
                if waited >= self.grace_s:
                    self._kill_group()
                    self.proc.wait()
                    return
                self.proc.wait(timeout=min(self.grace_s - waited, 1.0))
                return
            except subprocess.TimeoutExpired:
                if not said and self.grace_s > 5:
                    said = True
                    print(f"weirdnet bench: waiting for {self.what} to stop cleanly; "
                          "send the signal again to stop it at once", file=sys.stderr,
                          flush=True)
            except (Interrupted, KeyboardInterrupt):  # a further stop signal: escalate
                signals += 1
                if signals == 2 and self.proc.poll() is None:
                    self.proc.send_signal(signal.SIGTERM)
                elif signals > 2:
                    since = -float("inf")

    def _kill_group(self) -> None:
        """SIGKILL the child's process group (the child is not reaped yet, so its
        group id is still its own)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()

    def close(self) -> None:
        for f in (self._out, self._err):
            if f is not None:
                f.close()


def _read(f: IO | None) -> str:
    if f is None:
        return ""
    f.seek(0)
    text = f.read().decode("utf-8", errors="replace")
    f.close()
    return text


def _in_main_thread() -> bool:
    """Where signal handlers run (and so where a shield means anything)."""
    return threading.current_thread() is threading.main_thread()


def _start(command: Sequence[str], **options) -> _Child:
    # In the main thread (where signal handlers run), a stop signal during the fork waits
    # until the child is known, so no child is ever started unknown to its parent.
    child = None
    try:
        with STOP.shielded() if _in_main_thread() else nullcontext():
            child = _Child(command, **options)
            _LIVE.add(child)
    except BaseException:
        if child is not None:
            _stop(child)
        raise
    return child


def _stop(child: _Child) -> None:
    try:
        child.end()
    finally:
        child.close()


def stop_all() -> None:
    """Stop every child still running, of every thread (see the module doc)."""
    for child in list(_LIVE):
        _stop(child)


def run(command: Sequence[str], *, timeout_s: float | None = None,
        env: dict[str, str] | None = None, log: IO | None = None, grace_s: float = 10.0,
        what: str = "a child process") -> subprocess.CompletedProcess:
    """Run ``command`` to its end; its exit status and output (``stdout``/``stderr``
    text, empty when they went to ``log``).  Raises :class:`ChildTimeout` after
    ``timeout_s`` (the child stopped).  ``grace_s``: how long a stopped child may take
    to end before SIGKILL; ``what``: the child in a message while waiting for it."""
    child = _start(command, env=env, log=log, timeout_s=timeout_s, grace_s=grace_s,
                   what=what)
    try:
        child.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(child)
        raise ChildTimeout(command, timeout_s) from None
    except BaseException:
        _stop(child)
        raise
    _LIVE.discard(child)
    return child.result()


def job_command(job: str, spec: dict | str | os.PathLike) -> list[str]:
    """The command line of the child running ``job`` (:data:`.child.JOBS`) on ``spec``: a
    dict (passed inline as JSON) or the path of a JSON file."""
    arg = json.dumps(spec) if isinstance(spec, dict) else "@" + os.fspath(spec)
    return [sys.executable, "-m", "weirdnet_lab.harness.child", job, arg]


def job_result(result: subprocess.CompletedProcess | ChildTimeout, what: str) -> dict:
    """What a job child returned (the JSON of its last stdout line), or
    ``{"status": "timeout" | "OOM" | "error", "error": ...}`` saying how ``what`` failed."""
    if isinstance(result, ChildTimeout):
        return {"status": "timeout", "error": f"{what} timed out after "
                                              f"{result.timeout_s:.0f} s"}
    lines = (result.stdout or "").strip().splitlines()
    if result.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = ((result.stderr or result.stdout or "").strip().splitlines() or ["no output"])[-1]
    memory = "out of memory" in (result.stderr or "").lower() or result.returncode == -9
    return {"status": "OOM" if memory else "error",
            "error": f"{what} exited with {result.returncode}: {tail}"}


def run_job(job: str, spec: dict, *, timeout_s: float | None = None,
            env: dict[str, str] | None = None, what: str | None = None) -> dict:
    """Run ``job`` on ``spec`` in a fresh process (:func:`run`); :func:`job_result`."""
    what = what or f"the {job} child"
    try:
        result = run(job_command(job, spec), timeout_s=timeout_s, env=env, what=what)
    except ChildTimeout as timeout:
        result = timeout
    return job_result(result, what)


def run_all(commands: Sequence[Sequence[str]], jobs: int,
            done: Callable[[int, subprocess.CompletedProcess | ChildTimeout], None], *,
            timeout_s: float | None = None, env: dict[str, str] | None = None,
            grace_s: float = 10.0, logs: Sequence[str | os.PathLike] | None = None,
            what: Callable[[int], str] | None = None,
            started: Callable[[int], None] | None = None) -> None:
    """Run ``commands``, at most ``jobs`` at once, in order; ``done(i, result)`` is called
    as command ``i`` ends (``result``: its completed process, or :class:`ChildTimeout`).
    When ``done`` or a stop signal raises, the running children are stopped first.
    ``logs``: a file per command for its stdout and stderr (written afresh; else both are
    kept for ``result``); ``what(i)``: command ``i`` in a message while waiting for it to
    stop; ``started(i)``: called as command ``i`` starts."""
    pending = list(enumerate(commands))
    running: dict[int, _Child] = {}
    log_files: dict[int, IO] = {}
    try:
        while pending or running:
            while pending and len(running) < max(jobs, 1):
                i, command = pending.pop(0)
                if logs is not None:
                    log_files[i] = open(logs[i], "w", encoding="utf-8")  # noqa: SIM115
                # a stop signal while it starts acts once the caller knows it started
                with STOP.shielded() if _in_main_thread() else nullcontext():
                    running[i] = _start(command, env=env, log=log_files.get(i),
                                        timeout_s=timeout_s, grace_s=grace_s,
                                        what=what(i) if what else "a measurement")
                    if started is not None:
                        started(i)
            ended = [i for i, c in running.items() if c.poll() is not None or c.timed_out()]
            for i in ended:
                child = running.pop(i)
                if child.poll() is None:
                    _stop(child)
                    result: subprocess.CompletedProcess | ChildTimeout = \
                        ChildTimeout(child.command, child.timeout_s or 0.0)
                else:
                    _LIVE.discard(child)
                    result = child.result()
                if i in log_files:
                    log_files.pop(i).close()
                done(i, result)
            if not ended:
                time.sleep(0.02)
    except BaseException:
        for child in running.values():  # all stop at once, then each is waited for
            child.terminate()
        for child in running.values():
            _stop(child)
        raise
    finally:
        for log in log_files.values():
            log.close()


def watch_parent(interval_s: float = 1.0) -> None:
    """In a child: send this process SIGTERM when its parent has gone (the parent was
    killed without stopping it), checking every ``interval_s`` in a daemon thread."""
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()
