"""``weirdnet data show``: look at samples of a synthetic LRA dataset."""

from __future__ import annotations

import argparse
import math

from ._common import check_minimums, fail, path_argument
from .data_build import GENERATED

HELP = "look at samples: Pathfinder montage PNG, ListOps printed"
DESCRIPTION = """\
Look at samples of a synthetic LRA dataset.

pathfinder32 / pathfinder128: write a PNG montage of the first --n images of --split, each
  with its index and label underneath (1 = the two markers are on one contour, green;
  0 = not, red).  Needs --out.
listops: print the first --n samples of --split: label, length and the expression (tokens
  as read, parentheses removed), cut to --chars characters.

Without --root the cached generated set of weirdnet.data.get(NAME, SPLIT) is used (made on
first use: ListOps about a minute, Pathfinder a few minutes on 2 cores).

examples:
  weirdnet data show pathfinder32 --out montage.png
  weirdnet data show pathfinder128 --root lra_release --n 9 --out pathx.png
  weirdnet data show listops --n 5 --split val
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=GENERATED, help="the dataset to show")
    parser.add_argument("--root", type=path_argument, default=None, metavar="DIR",
                        help="official files (or `weirdnet data build` output); default: "
                             "the cached generated set")
    parser.add_argument("--split", choices=("train", "val", "test"), default="train",
                        help="split to show (default train)")
    parser.add_argument("--n", type=int, default=16, metavar="N",
                        help="number of samples (default 16)")
    parser.add_argument("--out", type=path_argument, default=None, metavar="PNG",
                        help="pathfinder: the montage file to write (required)")
    parser.add_argument("--difficulty", type=int, choices=(6, 9, 14), default=14,
                        help="pathfinder: paddles per target contour (default 14)")
    parser.add_argument("--scale", type=int, default=None, metavar="S",
                        help="pathfinder: screen pixels per image pixel (default: tiles of "
                             "about 128 px)")
    parser.add_argument("--chars", type=int, default=160, metavar="C",
                        help="listops: characters of each expression to print (default 160)")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Write the montage or print the expressions; the exit status."""
    from weirdnet.data.lra.montage import montage
    from weirdnet.data.registry import DataMissingError, get

    try:
        check_minimums(args, {"n": 1, "scale": 1, "chars": 1})
    except ValueError as err:
        return fail("data show", err)
    if args.name != "listops" and args.out is None:
        return fail("data show", f"showing {args.name} writes a PNG montage: give --out FILE.png")
    options = {} if args.name == "listops" else {"difficulty": args.difficulty}
    try:
        dataset = get(args.name, args.split, root=args.root, **options)
    except (DataMissingError, ValueError) as err:
        return fail("data show", err)
    if args.name == "listops":
        _print_listops(dataset, args.n, args.chars)
        return 0
    count = min(args.n, len(dataset))
    side = int(math.isqrt(dataset.info.max_len))
    scale = args.scale or max(1, 128 // side)
    image = montage(dataset.pixels[:count].reshape(count, side, side),
                    dataset.labels[:count].tolist(), scale=scale)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        image.save(args.out)
    except (OSError, ValueError) as err:  # unwritable path, unknown image suffix
        return fail("data show", f"cannot write {args.out}: {err}")
    print(f"wrote {args.out}: {count} {args.name} {args.split} images "
          f"({sum(dataset.labels[:count].tolist())} positive), {image.width}x{image.height}")
    return 0


def _print_listops(dataset, n: int, chars: int) -> None:
    from weirdnet.data.lra.listops import decode

    for index in range(min(n, len(dataset))):
        item = dataset[index]
        text = decode(item["tokens"])
        cut = text if len(text) <= chars else text[:max(chars - 3, 0)] + "..."
        print(f"#{index}  label {item['label']}  length {len(item['tokens'])}  {cut}")
