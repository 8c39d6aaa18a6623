"""``python -m weirdnet``: the ``weirdnet`` command line."""

from weirdnet.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
