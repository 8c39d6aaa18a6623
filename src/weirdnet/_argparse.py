"""argparse helpers shared by the command modules."""

from __future__ import annotations

import argparse


def hidden_alias(subparsers: argparse._SubParsersAction, old: str, new: str) -> None:
    """Parse subcommand ``old`` exactly as ``new`` without listing it in --help (a renamed
    command's former spelling, kept for one release; ``weirdnet.cli`` prints a note)."""
    subparsers._name_parser_map[old] = subparsers._name_parser_map[new]
