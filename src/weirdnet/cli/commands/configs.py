"""``weirdnet configs``: the training configs shipped with the package, listed or shown."""

from __future__ import annotations

import argparse
import sys

from ._common import add_set_argument, fail

HELP = "list the training configs shipped with weirdnet, or show one resolved"
DESCRIPTION = """\
List the training configs shipped with weirdnet, each with the paper table it follows, or
show one: `show` prints a config as one TOML file, its trail resolved (the file it
extends, its [overlay.NAME] table, its model preset) and every key written out, the
model's dimensions included.  `weirdnet train` on that file trains the same run.  Train
one by name from any directory: `weirdnet train lra/listops-cpu`.

examples:
  weirdnet configs                       # every config
  weirdnet configs list lra/             # those whose name contains lra/
  weirdnet configs show lra/listops-cpu  # one config, resolved
  weirdnet configs show my.toml --set train.steps=10 > resolved.toml
"""
USAGE = ("weirdnet configs [list] [PATTERN] | weirdnet configs show NAME_OR_PATH "
         "[--set KEY=VALUE] | weirdnet configs --path")
ACTIONS = ("list", "show")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = USAGE
    parser.add_argument("words", nargs="*", metavar="list PATTERN | show NAME",
                        help="list (the default): the names containing PATTERN (e.g. lra/, "
                             "-cpu); show: config NAME (or a file's path) resolved")
    parser.add_argument("--path", action="store_true",
                        help="print the folder that holds them and exit")
    add_set_argument(parser)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """List the configs, show one or print their folder; the exit status."""
    from weirdnet.config.typed import ConfigError
    from weirdnet.train.named_configs import config_dir

    words = list(args.words)
    action = words.pop(0) if words and words[0] in ACTIONS else "list"
    try:
        if args.path:
            print(config_dir())
            return 0
        if action == "show" and len(words) != 1:
            raise ConfigError("show takes one config name or path: weirdnet configs show "
                              "NAME (`weirdnet configs list` lists them)")
        if action == "list" and len(words) > 1:
            raise ConfigError("list takes one PATTERN: weirdnet configs list [PATTERN]")
        if args.overrides and action != "show":
            raise ConfigError("--set goes with show: weirdnet configs show NAME --set KEY=VALUE")
        return _show(words[0], args.overrides) if action == "show" else \
            _list(words[0] if words else "")
    except ConfigError as error:
        return fail("configs", error)


def _list(pattern: str) -> int:
    """Print each config whose name contains ``pattern``, with its summary."""
    from weirdnet.train.named_configs import summaries

    chosen = [c for c in summaries() if pattern in c.name]
    if not chosen:
        return fail("configs", f"no config name contains {pattern!r} (`weirdnet configs "
                               "list` lists them all)")
    width = max(len(c.name) for c in chosen)
    for config in chosen:
        print(f"{config.name:<{width}}  {config.summary}")
    return 0


def _show(name: str, overrides: list[str]) -> int:
    """Print config ``name`` (or path) resolved, as TOML (:mod:`weirdnet.train.
    resolved_config`)."""
    from weirdnet.train.named_configs import resolve
    from weirdnet.train.resolved_config import resolved_toml

    from ._common import expected_errors

    try:
        path = resolve(name)
        if path.is_dir():
            return fail("configs", f"{name} is a folder; show takes a config name or a "
                                   "config file (a run's train_config.json too)")
        text = resolved_toml(path, overrides, name=name)
    except expected_errors() as error:
        return fail("configs", error)
    sys.stdout.write(text)
    return 0
