"""Where the ``weirdnet bench`` commands write, and how they write without losing data.

- **Where**: ``--out DIR``, else :func:`bench_dir`: ``$WEIRDNET_BENCH_DIR``, else
  ``$XDG_CACHE_HOME/weirdnet/bench`` (``~/.cache/weirdnet/bench``): a scratch folder
  outside the repository.  The committed results are written only when asked for with
  ``--out lab/results``.
- **No toy numbers over real ones**: a ``--quick`` run (``bench suite``: the ``smoke``
  budget) refuses a folder that holds a full run's report of the same benchmark, unless
  ``--force`` (:func:`refuse_quick_over_full`).  Every report records whether it was a
  quick run (``"quick"`` in its JSON).
- **One writer per folder**: :func:`writing` holds :class:`weirdnet.run.DirectoryLock`
  on each output folder for the whole run; a second writer fails at once.
- **Stop signals**: when SIGINT/SIGTERM (:class:`weirdnet.run.Interrupted`) leaves
  :func:`writing`, the command's child processes are stopped and waited for
  (:mod:`.children`) and the signal goes on with one line saying what was kept and how to
  continue (:attr:`Writing.kept`).  Reports are written whole or not at all
  (:func:`write_whole`).

Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from weirdnet.run import STOP, DirectoryBusyError, DirectoryLock, Interrupted, signal_name

__all__ = ["COMMITTED", "ENV", "BenchError", "Writing", "add_out_arguments", "bench_dir",
           "fail", "full_reports", "full_suite_dirs", "out_dir", "print_written",
           "refuse_quick_over_full", "write_whole", "writing"]

ENV = "WEIRDNET_BENCH_DIR"
COMMITTED = "lab/results"
"""The repository's committed results: written only with ``--out lab/results``."""

OUT_HELP = (f"default: ${ENV}, else ~/.cache/weirdnet/bench (XDG_CACHE_HOME respected); "
            f"the committed results: --out {COMMITTED}")


class BenchError(Exception):
    """A bench command cannot run as asked; its message is one line for the user."""


def bench_dir() -> Path:
    """The default output folder: ``$WEIRDNET_BENCH_DIR``, else
    ``$XDG_CACHE_HOME/weirdnet/bench``, else ``~/.cache/weirdnet/bench`` (a relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG spec says)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "weirdnet" / "bench"


def out_dir(value: str | os.PathLike | None) -> Path:
    """``--out``'s folder: ``value``, else :func:`bench_dir`."""
    return Path(value).expanduser() if value else bench_dir()


def add_out_arguments(parser: argparse.ArgumentParser, files: str, *,
                      quick: str | None = None) -> None:
    """``--out DIR`` (for ``files``) and, for a benchmark with a quick mode named by
    ``quick`` (e.g. "--quick"), ``--force``."""
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help=f"folder for {files} ({OUT_HELP})")
    if quick:
        parser.add_argument("--force", action="store_true",
                            help=f"let a {quick} run write into a folder that holds a full "
                                 "run's results (a quick report replaces a full one)")


def _quick_report(json_path: Path) -> bool | None:
    """Whether the report ``json_path`` was written by a quick run (its ``"quick"``, or
    for reports older than that key, ``--quick`` in its command); None: unreadable."""
    try:
        doc = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if "quick" in doc:
        return bool(doc["quick"])
    command = (doc.get("machine") or {}).get("command") or ""
    return "--quick" in command.split()


def full_reports(out: Path, benchmark: str) -> list[Path]:
    """Reports ``<benchmark>_<device>.md`` in ``out`` that a full run wrote (or whose JSON
    cannot tell: counted as full)."""
    found = []
    for md in sorted(Path(out).glob(f"{benchmark}_*.md")):
        if _quick_report(md.with_suffix(".json")) is not True:
            found.append(md)
    return found


def full_suite_dirs(out: Path, toy_budget: str) -> list[Path]:
    """``suite-<budget>`` folders in ``out`` of a budget other than ``toy_budget`` that
    hold records or a report."""
    return [d for d in sorted(Path(out).glob("suite-*"))
            if d.is_dir() and d.name != f"suite-{toy_budget}"
            and ((d / "report.md").exists() or any((d / "cells").glob("*.json")))]


def refuse_quick_over_full(full: Sequence[Path], quick: str, force: bool) -> None:
    """Raise :class:`BenchError` when a ``quick`` run would write beside ``full``
    results (paths a full run wrote), unless ``force``."""
    if full and not force:
        names = ", ".join(str(p) for p in full)
        raise BenchError(f"{full[0].parent} holds full results ({names}); a {quick} run "
                         "does not write there: name another folder with --out DIR, or "
                         "pass --force to write there anyway")


class Writing:
    """The state of a command writing into its folders (see :func:`writing`).

    ``kept``: what the command has kept so far and how to continue, said when a stop
    signal ends it (a string, or a function returning one, called at that moment).
    """

    def __init__(self, directories: Sequence[Path], kept: str | Callable[[], str]):
        self.directories = list(directories)
        self.kept = kept

    def message(self) -> str:
        """:attr:`kept`, now."""
        return self.kept() if callable(self.kept) else self.kept


@contextmanager
def writing(directories: Path | Sequence[Path], purpose: str) -> Iterator[Writing]:
    """Hold the lock of every folder in ``directories`` (created if missing) for the
    block; ``purpose`` names the holder (e.g. "weirdnet bench scan").

    - another writer holds one: :class:`BenchError` at once, naming its PID;
    - a stop signal (or any exception) leaves the block: the children still running are
      stopped and waited for; a stop signal goes on as :class:`Interrupted` with the
      message ``interrupted by SIGNAL; <Writing.kept>``.
    """
    from weirdnet_lab.harness import children

    folders = [Path(directories)] if isinstance(directories, str | os.PathLike) \
        else [Path(d) for d in directories]
    state = Writing(folders, f"nothing written ({', '.join(map(str, folders))} left as "
                             "it was); run the same command again")
    with ExitStack() as locks:
        try:
            for folder in folders:
                locks.enter_context(DirectoryLock(folder, purpose))
        except DirectoryBusyError as error:
            raise BenchError(str(error)) from None
        try:
            yield state
        except (Interrupted, KeyboardInterrupt) as stop:
            children.stop_all()
            signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
            raise Interrupted(signum, f"interrupted by {signal_name(signum)}; "
                                      f"{state.message()}") from None
        except BaseException:
            children.stop_all()
            raise


@contextmanager
def write_whole() -> Iterator[None]:
    """Files written in this block are written whole: a stop signal waits until the block
    has ended (then acts as usual)."""
    with STOP.shielded():
        yield


def print_written(paths: Sequence[Path]) -> None:
    """Say on stderr where the results went."""
    names = [str(p) for p in paths]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    print(f"wrote {listed}", file=sys.stderr, flush=True)


def fail(error: BaseException) -> int:
    """Print ``error`` as ``weirdnet bench: ...`` on stderr; exit status 2."""
    print(f"weirdnet bench: {error}", file=sys.stderr, flush=True)
    return 2
