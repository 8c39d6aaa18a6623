"""``weirdnet data build``: ListOps or Pathfinder/Path-X in the official file format."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ._common import check_minimums, check_seed, fail, path_argument

GENERATED = ("listops", "pathfinder32", "pathfinder128")
"""The synthetic LRA datasets ``data build`` writes and ``data show`` shows."""

HELP = "build ListOps or Pathfinder/Path-X in the official format"
DESCRIPTION = """\
Generate a synthetic Long Range Arena dataset in the official file format, offline.

listops        LRA's ListOps generator (MIN/MAX/MED/SM, <= 10 arguments, depth <= 10,
               500 < length < 2000, deduplicated): OUT/basic_{train,val,test}.tsv with the
               header "Source<TAB>Target".  --n training samples, --n-val/--n-test
               (LRA's sizes, the defaults: 96000, 2000, 2000).  The defaults write 660 MB
               (about 6.6 KB a sample; basic_train.tsv 634 MB) in 62-75 s on an idle CPU
               core, measured; a core shared with other work takes several times as long.
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
  weirdnet data build listops --out runs/data/listops --n 96000
  weirdnet data build pathfinder32 --out runs/data/pf32 --n 20000 --workers 8
  weirdnet data build pathfinder128 --out runs/data/pathx --n 500 --difficulty 14
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=GENERATED, help="the dataset to build")
    parser.add_argument("--out", type=path_argument, required=True, metavar="DIR",
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


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Build the dataset and say where it went; the exit status."""
    start = time.perf_counter()
    try:
        check_minimums(args, {"n": 1 if args.name != "listops" else 0, "n_val": 0,
                                "n_test": 0, "seed": 0, "workers": 1, "batch_size": 1})
        check_seed(args.seed)
        if args.name == "listops":
            written, count = _generate_listops(args)
        else:
            written, count = _generate_pathfinder(args)
    except (ValueError, OSError) as err:  # FileExistsError, unwritable --out
        return fail("data build", err)
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
