"""``weirdnet data build`` and ``weirdnet data show`` for the synthetic LRA datasets.

:func:`add_build` and :func:`add_show` register the subcommands (pattern of
:mod:`weirdnet.data.commands`): each creates its parser and sets
``handler(args, argv) -> exit status``.  Heavy imports happen in the handlers.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from weirdnet._argparse import hidden_alias

__all__ = ["add_build", "add_show", "montage"]

GENERATED = ("listops", "pathfinder32", "pathfinder128")

_GENERATE_DESCRIPTION = """\
Generate a synthetic Long Range Arena dataset in the official file format, offline.

listops        LRA's ListOps generator (MIN/MAX/MED/SM, <= 10 arguments, depth <= 10,
               500 < length < 2000, deduplicated): OUT/basic_{train,val,test}.tsv with the
               header "Source<TAB>Target".  --n training samples (LRA: 96000; about 1 minute
               on one CPU core), --n-val/--n-test (LRA: 2000 each).
pathfinder32   Linsley et al.'s snakes2 with LRA's Pathfinder-32 settings:
               OUT/<level>/imgs/<batch>/sample_<i>.png and OUT/<level>/metadata/<batch>.npy
               (text lines "imgs/<batch> sample_<i>.png <i> <label> ..."); --n images
               (LRA: 200000 per level), about 40 images/s per core.
pathfinder128  The same with LRA's Path-X (128x128) settings; about 2-3 images/s per core
               (the target contours often fail to fit and are redrawn, as in snakes2).

<level> is curv_contour_length_14 (--difficulty 14, LRA's task), curv_contour_length_9 or
curv_baseline (6).  Output is deterministic in --seed (not in --workers).  Read it back with
weirdnet.data.get(NAME, SPLIT, root=OUT).  Progress goes to stderr.

examples:
  weirdnet data build listops --out data/listops --n 96000
  weirdnet data build pathfinder32 --out data/pf32 --n 20000 --workers 8
  weirdnet data build pathfinder128 --out data/pathx --n 500 --difficulty 14
"""

_SHOW_DESCRIPTION = """\
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


def add_build(subparsers: argparse._SubParsersAction) -> None:
    """Register ``weirdnet data build`` (and its former name ``generate``, hidden)."""
    parser = subparsers.add_parser(
        "build", help="build ListOps or Pathfinder/Path-X in the official format",
        description=_GENERATE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=GENERATED, help="the dataset to build")
    parser.add_argument("--out", type=_path, required=True, metavar="DIR",
                        help="output directory (created; existing sets are not overwritten)")
    parser.add_argument("--n", type=int, default=None, metavar="N",
                        help="listops: training samples (default 96000); pathfinder: images "
                             "(default 10000 for 32x32, 1000 for 128x128)")
    parser.add_argument("--n-val", type=int, default=None, metavar="N",
                        help="listops only: validation samples (default 2000)")
    parser.add_argument("--n-test", type=int, default=None, metavar="N",
                        help="listops only: test samples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--difficulty", type=int, choices=(6, 9, 14), default=None,
                        help="pathfinder only: paddles per target contour (default 14)")
    parser.add_argument("--workers", type=int, default=None, metavar="K",
                        help="pathfinder only: processes (default: all usable CPUs)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B",
                        help="pathfinder only: images per imgs/<batch> folder (default 1000)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_run_build)
    hidden_alias(subparsers, "generate", "build")


def add_show(subparsers: argparse._SubParsersAction) -> None:
    """Register ``weirdnet data show``."""
    parser = subparsers.add_parser(
        "show", help="look at samples: Pathfinder montage PNG, ListOps printed",
        description=_SHOW_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=GENERATED, help="the dataset to show")
    parser.add_argument("--root", type=_path, default=None, metavar="DIR",
                        help="official files (or `weirdnet data build` output); default: "
                             "the cached generated set")
    parser.add_argument("--split", choices=("train", "val", "test"), default="train",
                        help="split to show (default train)")
    parser.add_argument("--n", type=int, default=16, metavar="N",
                        help="number of samples (default 16)")
    parser.add_argument("--out", type=_path, default=None, metavar="PNG",
                        help="pathfinder: the montage file to write (required)")
    parser.add_argument("--difficulty", type=int, choices=(6, 9, 14), default=14,
                        help="pathfinder: paddles per target contour (default 14)")
    parser.add_argument("--scale", type=int, default=None, metavar="S",
                        help="pathfinder: screen pixels per image pixel (default: tiles of "
                             "about 128 px)")
    parser.add_argument("--chars", type=int, default=160, metavar="C",
                        help="listops: characters of each expression to print (default 160)")
    parser.set_defaults(handler=_run_show)


# ---------------------------------------------------------------------------- generate

def _fail(command: str, message: object) -> int:
    """A bad value: one line ``weirdnet data <command>: <message>`` on stderr, status 2."""
    print(f"weirdnet data {command}: {message}", file=sys.stderr)
    return 2


def _check_arguments(args: argparse.Namespace, minimum: dict[str, int]) -> None:
    """ValueError naming the first option given below its ``minimum`` (None = not given)."""
    for name, low in minimum.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")


def _path(text: str) -> Path:
    """An argparse type: a path, not empty (``Path("")`` would quietly be the current
    directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path")
    return Path(text)


def _run_build(args: argparse.Namespace, argv: list[str]) -> int:
    start = time.perf_counter()
    try:
        _check_arguments(args, {"n": 1 if args.name != "listops" else 0, "n_val": 0,
                                "n_test": 0, "seed": 0, "workers": 1, "batch_size": 1})
        if args.name == "listops":
            written, count = _generate_listops(args)
        else:
            written, count = _generate_pathfinder(args)
    except (ValueError, OSError) as err:  # FileExistsError, unwritable --out
        return _fail("build", err)
    seconds = time.perf_counter() - start
    print(f"wrote {count} {args.name} samples to {written} in {seconds:.1f} s "
          f"({count / seconds:.1f} samples/s)")
    return 0


def _generate_listops(args: argparse.Namespace) -> tuple[Path, int]:
    from weirdnet.data.lra.listops import LRA_SIZES, write_listops_files

    for option in ("difficulty", "workers", "batch_size"):
        if getattr(args, option) is not None:
            raise ValueError(f"--{option.replace('_', '-')} applies to pathfinder only")
    sizes = {split: LRA_SIZES[split] if given is None else given
             for split, given in (("train", args.n), ("val", args.n_val),
                                  ("test", args.n_test))}
    existing = sorted(args.out.glob("basic_*.tsv"))
    if existing:
        raise FileExistsError(f"{existing[0]} exists; remove it or choose another --out")
    write_listops_files(args.out, n_train=sizes["train"], n_val=sizes["val"],
                        n_test=sizes["test"], seed=args.seed, progress=not args.no_progress)
    return args.out, sum(sizes.values())


def _generate_pathfinder(args: argparse.Namespace) -> tuple[Path, int]:
    from weirdnet.data.lra.pathfinder import DEFAULT_SIZES
    from weirdnet.data.lra.pathfinder_gen import write_pathfinder

    for option in ("n_val", "n_test"):
        if getattr(args, option) is not None:
            raise ValueError(f"--{option.replace('_', '-')} applies to listops only")
    resolution = int(args.name.removeprefix("pathfinder"))
    n = DEFAULT_SIZES[resolution] if args.n is None else args.n
    level = write_pathfinder(args.out, resolution=resolution, difficulty=args.difficulty or 14,
                             n=n, seed=args.seed, workers=args.workers,
                             batch_size=args.batch_size or 1000,
                             progress=not args.no_progress)
    return level, n


# ---------------------------------------------------------------------------- show

def _run_show(args: argparse.Namespace, argv: list[str]) -> int:
    from weirdnet.data.registry import DataMissingError, get

    try:
        _check_arguments(args, {"n": 1, "scale": 1, "chars": 1})
    except ValueError as err:
        return _fail("show", err)
    if args.name != "listops" and args.out is None:
        return _fail("show", f"showing {args.name} writes a PNG montage: give --out FILE.png")
    options = {} if args.name == "listops" else {"difficulty": args.difficulty}
    try:
        dataset = get(args.name, args.split, root=args.root, **options)
    except (DataMissingError, ValueError) as err:
        return _fail("show", err)
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
        return _fail("show", f"cannot write {args.out}: {err}")
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


def montage(images, labels: list[int], *, scale: int = 4, columns: int | None = None):
    """A PIL RGB image: ``images`` (k, H, W) uint8 in a grid, each scaled ``scale`` times
    (nearest) with "#<i> label <y>" underneath (green for 1, red for 0)."""
    from weirdnet.data.lra.pathfinder_gen import require_pillow

    pil = require_pillow()
    count = len(images)
    columns = columns or math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    tile_h, tile_w = images.shape[1] * scale, images.shape[2] * scale
    band, gap = 14, 4
    sheet = pil.Image.new("RGB", (columns * (tile_w + gap) + gap,
                                  rows * (tile_h + band + gap) + gap), (40, 40, 40))
    draw = pil.ImageDraw.Draw(sheet)
    for i, (pixels, label) in enumerate(zip(images, labels)):
        x = gap + (i % columns) * (tile_w + gap)
        y = gap + (i // columns) * (tile_h + band + gap)
        tile = pil.Image.fromarray(pixels).resize((tile_w, tile_h), pil.Image.NEAREST)
        sheet.paste(tile.convert("RGB"), (x, y))
        colour = (90, 220, 90) if label == 1 else (240, 90, 90)
        draw.text((x + 2, y + tile_h + 1), f"#{i} label {label}", fill=colour)
    return sheet
