"""``weirdnet configs``: the training configs shipped with the package."""

from __future__ import annotations

import argparse
import sys

HELP = "list the training configs shipped with weirdnet"
DESCRIPTION = ("List the training configs shipped with weirdnet, each with the paper table it "
               "follows. Train one by name from any directory: `weirdnet train "
               "lra/listops-cpu`.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="",
                        help="only names containing this text (e.g. lra/, -cpu)")
    parser.add_argument("--path", action="store_true",
                        help="print the folder that holds them and exit")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Print the config names (with their summaries) or their folder; the exit status."""
    from weirdnet.train.named_configs import config_dir, summaries
    from weirdnet.typed_config import ConfigError

    try:
        if args.path:
            print(config_dir())
            return 0
        chosen = [c for c in summaries() if args.pattern in c.name]
    except ConfigError as error:
        print(f"weirdnet configs: {error}", file=sys.stderr)
        return 2
    if not chosen:
        print(f"weirdnet configs: no config name contains {args.pattern!r}", file=sys.stderr)
        return 2
    width = max(len(c.name) for c in chosen)
    for config in chosen:
        print(f"{config.name:<{width}}  {config.summary}")
    return 0
