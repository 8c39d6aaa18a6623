"""``weirdnet plot``: learning curves of runs as one PNG (:mod:`weirdnet.train.plot`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from weirdnet.train import plot

from ._common import check_output_file, fail

HELP = "draw learning curves of runs as a PNG"
DESCRIPTION = plot.DESCRIPTION


def add_arguments(parser: argparse.ArgumentParser) -> None:
    plot.add_arguments(parser)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """:func:`weirdnet.train.plot.run`, after checking that the image can be written
    where it goes; the exit status."""
    out = args.out
    if out is None and len(args.runs) == 1:  # plot's default: RUN/curves.png
        run = Path(args.runs[0])
        out = (run if run.is_dir() else run.parent) / plot.PLOT_NAME
    try:
        if out is not None:
            check_output_file(out, "--out" if args.out is not None else "the plot")
        return plot.run(args, argv)
    except ValueError as error:
        return fail("plot", error)
    except OSError as error:  # e.g. a run that cannot be read, a full or read-only disk
        return fail("plot", f"{error.filename or out}: {error.strerror or error}")
