"""``weirdnet info``: a model preset's or a saved model's structure and parameter count."""

from __future__ import annotations

import argparse
import sys

HELP = "describe a model preset or a saved model"
DESCRIPTION = """\
Print a model's structure (mixer of every layer, widths, lengths) and its parameter count
by part, built on the meta device (no memory is allocated, even for the 700M presets).
For the GPT-2-size presets it compares the count with Weird-Net Table VII and explains
the difference.

TARGET is a preset name (see --list), a run directory (its best/ model, else its latest
checkpoint, as eval, generate and export-hf take it), a best/ or checkpoints/step-*
directory, or any directory written by model.save().

examples:
  weirdnet info --list
  weirdnet info weirdnet-small
  weirdnet info lra-listops
  weirdnet info runs/quickstart
  weirdnet info runs/my-run/best
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", metavar="TARGET",
                        help="preset name, run directory, or saved-model directory")
    parser.add_argument("--list", action="store_true", help="list the presets and exit")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Print the presets or the target's description; the exit status."""
    from weirdnet.models import PRESETS
    from weirdnet.models.info import TargetError, describe_target

    if args.list or args.target is None:
        width = max(map(len, PRESETS))
        for name, preset in PRESETS.items():
            print(f"{name:<{width}}  {preset.model:<20} {preset.source}")
        return 0
    try:  # missing paths, files, damaged or foreign models, unknown presets: one line
        text = describe_target(_model_target(args.target))
    except TargetError as error:
        print(f"weirdnet info: {error}", file=sys.stderr)
        return 2
    print(text)
    return 0


def _model_target(target: str) -> str:
    """The saved-model directory of a run directory (as ``eval`` finds it); any other
    TARGET as given."""
    from pathlib import Path

    from weirdnet.train.trained import find_model_dir

    path = Path(target).expanduser()
    if not path.is_dir() or (path / "config.json").is_file():
        return target
    try:
        return str(find_model_dir(path)[0])
    except FileNotFoundError:  # no model in it: describe_target says why, in one line
        return target
