"""``weirdnet data ...``: list, generate, show and download datasets.

Each subcommand is registered by a function ``add(subparsers)`` (listed in
:func:`_subcommands`) that creates its parser and sets ``handler(args, argv) -> exit status``.
"""

from __future__ import annotations

import argparse


def _add_list(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("list", help="list the registered datasets",
                                   description="List every dataset of weirdnet.data.get "
                                               "with its splits, task and a summary.")
    parser.set_defaults(handler=_run_list)


def _run_list(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.data.registry import available, data_root, entry

    rows = [entry(name) for name in available()]
    width = max((len(row.name) for row in rows), default=4)
    for row in rows:
        print(f"{row.name:<{width}}  {row.task:<14}  {'/'.join(row.splits):<16}  {row.summary}")
    print(f"\ncache directory: {data_root()}  (set $WEIRDNET_DATA to change it)")
    return 0


def _subcommands():
    from weirdnet.data.cmd_download import add_download
    from weirdnet.data.cmd_lra import add_build, add_show

    return (_add_list, add_build, add_show, add_download)


def add_data_command(subparsers: argparse._SubParsersAction,
                     formatter: type[argparse.HelpFormatter]) -> None:
    """Register ``weirdnet data`` and its subcommands."""
    data = subparsers.add_parser(
        "data", help="list, generate, show or download datasets", formatter_class=formatter,
        description="Datasets of weirdnet.data; see `weirdnet data SUBCOMMAND --help`.",
    )
    commands = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    for add in _subcommands():  # each registers one subcommand, in --help order
        add(commands)
