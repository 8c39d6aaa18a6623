"""The ``weirdnet`` command line (also ``python -m weirdnet``): a table of commands.

Every command is a module with

    HELP          its one line in ``weirdnet --help``
    DESCRIPTION   its ``--help`` text (EXAMPLES, optional: an epilog)
    add_arguments(parser)        its options
    run(args, argv) -> int       the command itself; its exit status

:data:`COMMANDS` names the module of each command, or a table of subcommands for a group
(``weirdnet data ...``; :data:`GROUPS` has their help).  Adding a command is one module
and one line here.  The core's commands live in :mod:`weirdnet.cli.commands`.  Other
distributions add commands through the entry points of :data:`PLUGIN_GROUP`: the lab
(``weirdnet-lab``, ``lab/`` in the repository) adds ``weirdnet bench ...``; while it is
not installed, ``weirdnet bench`` says how to install it (:data:`PLUGINS`).  Their
commands check a seed as the core's do (:func:`check_seed`).

Command modules import torch inside ``run``, never at import time (deliberately: building
the parser imports every command module), so ``--help``, ``--version`` and every
subcommand's ``--help`` take a fraction of a second (tests/test_cli_startup.py checks it).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import signal
import sys
from types import ModuleType

from weirdnet import __version__
from weirdnet.cli.commands._common import check_seed as check_seed  # public: the lab's seeds
from weirdnet.config import plugins
from weirdnet.run.line_end import LineEndTracker, end_the_line
from weirdnet.run.signals import STOP, Interrupted

_FORMATTER = argparse.RawDescriptionHelpFormatter

Commands = dict[str, "str | Commands"]

COMMANDS: Commands = {
    "train": "weirdnet.cli.commands.train",
    "eval": "weirdnet.cli.commands.eval",
    "generate": "weirdnet.cli.commands.generate",
    "plot": "weirdnet.cli.commands.plot",
    "configs": "weirdnet.cli.commands.configs",
    "data": {
        "list": "weirdnet.cli.commands.data_list",
        "build": "weirdnet.cli.commands.data_build",
        "show": "weirdnet.cli.commands.data_show",
        "download": "weirdnet.cli.commands.data_download",
    },
    "info": "weirdnet.cli.commands.info",
    "export-hf": "weirdnet.cli.commands.export_hf",
    "harness-tasks": "weirdnet.cli.commands.harness_tasks",
}
"""Every command, in ``--help`` order: its module, or a group's table of subcommands."""

GROUPS = {
    "data": ("list, build, show or download datasets",
             "Datasets of weirdnet.data; see `weirdnet data SUBCOMMAND --help`.",
             "SUBCOMMAND"),
}
"""Each group's (one-line help, description, metavar of its subcommand)."""

PLUGIN_GROUP = plugins.PLUGIN_GROUP
"""The entry-point group other distributions add commands through (the lab's
``weirdnet bench``; :mod:`weirdnet.config.plugins`): each entry point is named after its
command and loads a module that is a command (the protocol above) or a group (``GROUP``:
its one-line help, description and metavar; ``COMMANDS``: its table of subcommands)."""

PLUGINS = {
    "bench": ("run a benchmark (needs the weirdnet-lab distribution)",
              "the benchmarks are the weirdnet-lab distribution, which is not installed: "
              "pip install -e ./lab in a checkout of weirdnet"),
}
"""The commands another distribution adds: (one-line help, the line printed, with exit
status 2, when that distribution is not installed)."""


def command_module(path: str) -> ModuleType:
    """The module of one command, checked against the protocol (ValueError naming what
    it lacks: a command added without its parts fails on the first ``--help``)."""
    module = importlib.import_module(path)
    missing = [name for name in ("HELP", "DESCRIPTION", "add_arguments", "run")
               if not hasattr(module, name)]
    if missing:
        raise ValueError(f"command module {path} lacks {', '.join(missing)}")
    return module


def plugin_commands() -> dict[str, ModuleType]:
    """The commands installed distributions add (:data:`PLUGIN_GROUP`): name -> the module
    its entry point loads, in name order."""
    return plugins.plugin_modules()


def _add_commands(subparsers: argparse._SubParsersAction, table: Commands,
                  groups: dict[str, tuple[str, str, str]] = GROUPS) -> None:
    """One parser per entry of ``table`` (a group's parser holds its own table; its help
    is in ``groups``)."""
    for name, entry in table.items():
        if isinstance(entry, dict):
            help_text, description, metavar = groups[name]
            group = subparsers.add_parser(name, help=help_text, description=description,
                                          formatter_class=_FORMATTER)
            inner = group.add_subparsers(dest=f"{name}_command", metavar=metavar,
                                         required=True)
            _add_commands(inner, entry, groups)
            continue
        module = command_module(entry)
        parser = subparsers.add_parser(
            name, help=module.HELP, description=module.DESCRIPTION,
            epilog=getattr(module, "EXAMPLES", None), formatter_class=_FORMATTER)
        module.add_arguments(parser)
        parser.set_defaults(handler=module.run)


def build_parser() -> argparse.ArgumentParser:
    """The ``weirdnet`` parser with every command of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="weirdnet", formatter_class=_FORMATTER,
        description="weirdnet: fast, exact, numerically stable long-sequence layers "
                    "(Weird-/AIB-attention).",
        epilog="Run `weirdnet COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"weirdnet {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_commands(subparsers, COMMANDS)
    plugins = plugin_commands()
    for name, module in plugins.items():
        if hasattr(module, "GROUP"):
            _add_commands(subparsers, {name: module.COMMANDS}, {name: module.GROUP})
        else:
            _add_commands(subparsers, {name: module.__name__})
    for name, (help_text, _) in PLUGINS.items():
        if name not in plugins:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def _missing_plugin(argv: list[str]) -> str | None:
    """The line to print when ``argv`` runs a command of :data:`PLUGINS` whose
    distribution is not installed, else None."""
    name = next((a for a in argv if not a.startswith("-")), None)
    if name not in PLUGINS or name in plugin_commands():
        return None
    return f"weirdnet {name}: {PLUGINS[name][1]}"


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the command; its exit status.

    The SIGINT/SIGTERM handlers come first, before the parser is built: a stop signal at
    any moment ends the command with one line on stderr and exit status 130/143, never a
    traceback.  Called as the program (``argv`` None: the ``weirdnet`` script, ``python -m
    weirdnet``), a signal that arrives after the command has returned still gives one
    line and 130/143 (:meth:`~weirdnet.run.signals.StopRequest.exit_on_signal`), and one in
    the interpreter's last moments is ignored (the command has ended with its own status);
    called with ``argv`` (tests, other code), the handlers that were there before are put
    back.
    """
    installed = STOP.install()
    program = argv is None
    if program:  # runs after every exit function registered later (torch's included)
        atexit.register(STOP.ignore)
    argv = list(sys.argv[1:] if argv is None else argv)
    where = ["weirdnet"]  # "weirdnet COMMAND" once the command is known
    tracker = LineEndTracker(sys.stderr)  # so the last line can start a line of its own
    try:
        sys.stderr = tracker
        return _run(argv, where)
    except (Interrupted, KeyboardInterrupt) as stop:
        STOP.hold()  # a second signal while the line is written is only recorded
        if not isinstance(stop, Interrupted):
            stop = Interrupted(signal.SIGINT)
        if not stop.quiet:
            _close_progress_bars()
            end_the_line()
            print(f"{where[0]}: {stop.message}", file=sys.stderr, flush=True)
        return stop.exit_status
    finally:
        if not program and sys.stderr is tracker:
            sys.stderr = tracker.stream  # called from code: its stream back as it was
        if installed and program:
            STOP.exit_on_signal(where[0])
        elif installed:
            STOP.uninstall()
            STOP.reset()


def _close_progress_bars() -> None:
    """Close the tqdm bars a stopped command left open (ours or a library's, such as
    ``transformers``' "Writing model shards"), so each shows where it stopped.  A bar the
    signal caught half built (or half torn down) may not close, or not be listed at all:
    :func:`~weirdnet.run.line_end.end_the_line` ends its line afterwards."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        try:
            bar.close()
        except Exception:
            pass


def _run(argv: list[str], where: list[str]) -> int:
    """Parse ``argv`` and run its command's handler (``where[0]`` becomes the command's
    name for the last line); the handler's exit status."""
    missing = _missing_plugin(argv)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    where[0] = f"weirdnet {args.command}"
    try:
        return args.handler(args, argv)
    except BrokenPipeError:  # e.g. `weirdnet info --list | head`
        sys.stderr.close()
        return 0
