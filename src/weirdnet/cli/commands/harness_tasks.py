"""``weirdnet harness-tasks``: two offline lm-evaluation-harness tasks from the
python-stdlib corpus's held-out split."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import check_seed, fail

HELP = "write offline lm_eval tasks"
DESCRIPTION = """\
Write two offline lm-evaluation-harness tasks into DIR (YAML + JSON lines), built from the
held-out test split of the python-stdlib corpus: weirdnet_stdlib_nextline (multiple
choice: the true next line of Python source among four; acc, acc_norm) and
weirdnet_stdlib_bpb (rolling log-likelihood of held-out passages; bits_per_byte). Needs
the hf extra. Six lines of context often exceed a small model's context, and lm_eval
then cuts the start of the request without a word: --max-len (the model's max_len)
keeps only the whole lines that fit.

examples:
  weirdnet harness-tasks runs/harness-tasks --max-len 256   # sized to the quickstart model
  python -m weirdnet.hf.harness --model hf --model_args pretrained=runs/hf/quickstart \\
      --include_path runs/harness-tasks --tasks weirdnet_stdlib_nextline,weirdnet_stdlib_bpb

python -m weirdnet.hf.harness is lm_eval with the weirdnet classes registered: it needs no
trust_remote_code and runs no Python file of the model folder. (Plain lm_eval needs
trust_remote_code=True, which runs the folder's own Python files: anyone who could change
the folder could run code as you.)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="folder for the task files")
    parser.add_argument("--items", type=int, default=500,
                       help="multiple-choice items (500)")
    parser.add_argument("--passages", type=int, default=50, help="bits-per-byte passages (50)")
    parser.add_argument("--seed", type=int, default=0, help="draw of the items (0)")
    parser.add_argument("--max-len", type=int, default=None, metavar="BYTES",
                       help="the model's context in bytes (its max_len): each multiple-"
                            "choice item keeps only as many whole context lines as fit "
                            "beside its longest choice, so lm_eval cuts no request (default: "
                            "6 lines, whatever their length)")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Write the task files and print their paths; the exit status."""
    if args.items < 1 or args.passages < 1:
        print("weirdnet harness-tasks: --items and --passages must be >= 1", file=sys.stderr)
        return 2
    try:
        check_seed(args.seed)
    except ValueError as error:
        return fail("harness-tasks", error)
    directory = Path(args.directory)
    if directory.exists() and not directory.is_dir():
        print(f"weirdnet harness-tasks: {directory} is a file; DIR must be a folder (new or "
              "existing)", file=sys.stderr)
        return 2
    try:
        from weirdnet.hf.harness import write_tasks

        written = write_tasks(directory, items=args.items, passages_count=args.passages,
                              seed=args.seed, max_len=args.max_len)
    except (ImportError, OSError, ValueError) as error:
        print(f"weirdnet harness-tasks: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0
