"""What the command modules share: the one-line failure, the errors a command expects,
``--set KEY=VALUE`` and the check that an output file can be written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from weirdnet.run.files import obstacle


def fail(command: str, error: BaseException | str) -> int:
    """One line ``weirdnet <command>: <message>`` on stderr; exit status 2."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    print(f"weirdnet {command}: {message}", file=sys.stderr)
    return 2


def expected_errors() -> tuple[type[BaseException], ...]:
    """The failures of a bad config, missing data or a damaged checkpoint: each ends a
    command with one line (:func:`fail`), never a traceback.  Imported when a command
    runs, not when the parser is built (they pull in torch)."""
    from weirdnet.config.typed import ConfigError
    from weirdnet.data.registry import DataMissingError
    from weirdnet.models.base import CheckpointError
    from weirdnet.train.trainer import RunError

    return (ConfigError, CheckpointError, DataMissingError, RunError, FileNotFoundError,
            KeyError, ImportError, ValueError)


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """The repeatable ``--set KEY=VALUE`` option (collected in ``args.overrides``)."""
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a config key (dotted; TOML value), repeatable")


def check_output_file(path: Path, what: str) -> None:
    """ValueError unless a file can be written at ``path``: it is not a folder, no part of
    its folder is a file, and the nearest part that exists is a writable folder."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; give a file name (e.g. "
                         f"{path / 'curves.png'})")
    found = obstacle(path.parents)
    if found is not None:
        part, problem = found
        raise ValueError(f"{what} {path}: {part} is a file, not a folder" if problem == "file"
                         else f"{what} {path}: the folder {part} is not writable")


def check_minimums(args: argparse.Namespace, minimum: dict[str, int]) -> None:
    """ValueError naming the first option given below its ``minimum`` (None = not given)."""
    for name, low in minimum.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")


def check_seed(seed: int, name: str = "--seed") -> None:
    """The one check of every seed the CLI takes: an int of at most 64 bits (what torch's
    generators take), checked as a config's ``run.seed`` is, with the same line
    (ConfigError, naming ``name``)."""
    from weirdnet.config.typed import coerce

    coerce(int, seed, name)


def path_argument(text: str) -> Path:
    """An argparse type: a path, not empty (``Path("")`` would quietly be the current
    directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path")
    return Path(text)
