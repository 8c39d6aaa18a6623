"""``weirdnet data list``: every registered dataset with its splits, task, summary and what
its ``root=`` (``data.root``) may name."""

from __future__ import annotations

import argparse

HELP = "list the registered datasets"
DESCRIPTION = ("List every dataset of weirdnet.data.get with its splits, task and a summary, "
               "and under it what root= (data.root in a config) may name: a file, a folder, "
               "either, or none for generated data; without a root, a dataset reads its "
               "offline source.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Print the table and the cache directory; the exit status."""
    from weirdnet.data.registry import available, data_root, entry

    rows = [entry(name) for name in available()]
    width = max((len(row.name) for row in rows), default=4)
    for row in rows:
        print(f"{row.name:<{width}}  {row.task:<14}  {'/'.join(row.splits):<16}  {row.summary}")
        print(f"{'':<{width}}  root= {_root(row.root)}")
    print(f"\ncache directory: {data_root()}  (set $WEIRDNET_DATA to change it)")
    return 0


def _root(root) -> str:
    """``"a folder (the folder holding aclImdb/)"``, ``"none (generated)"``, plus
    ``", required"`` for a dataset without a default source."""
    if root.kind == "none":
        return "none (generated)"
    return root.describe() + (", required" if root.required else "")
