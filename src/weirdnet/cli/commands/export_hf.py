"""``weirdnet export-hf``: a trained language model as a Hugging Face model folder."""

from __future__ import annotations

import argparse
import sys

HELP = "export an LM as a Hugging Face folder"
DESCRIPTION = """\
Export a trained weirdnet language model as a Hugging Face model folder (needs the hf
extra: pip install "weirdnet[hf]"). SOURCE is a run directory (its best/ model), its best/,
a checkpoints/step-* directory or a folder written by model.save(). OUT gets config.json,
model.safetensors (the same weights, the same names), generation_config.json, the byte
tokenizer, a README and the two small remote-code modules, written into a temporary folder
and renamed into place. OUT loads with

  import weirdnet.hf; AutoModelForCausalLM.from_pretrained(OUT)   # runs no file of OUT
  AutoTokenizer.from_pretrained(OUT)
  weirdnet.models.load(OUT)

(trust_remote_code=True also loads it without the import, but runs OUT's own Python
files: anyone who could change OUT could run code as you. Do not use it.)

An existing non-empty OUT is replaced only with --overwrite, and only when it holds an
earlier export and nothing else.

examples:
  weirdnet export-hf runs/quickstart runs/hf/quickstart
  python -m weirdnet.hf.harness --model hf --model_args pretrained=runs/hf/quickstart ...
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="run, best/, checkpoint or model dir")
    parser.add_argument("out", metavar="OUT", help="the folder to write")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUT if it holds an earlier export")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Export, then say how to load the folder; the exit status."""
    from weirdnet.models.base import CheckpointError

    try:
        from weirdnet.hf import export_hf

        out = export_hf(args.source, args.out, overwrite=args.overwrite)
    except (ImportError, CheckpointError, FileNotFoundError, ValueError) as error:
        print(f"weirdnet export-hf: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out}: load it with AutoModelForCausalLM.from_pretrained({str(out)!r}) "
          "after `import weirdnet.hf` (no trust_remote_code: it would run the folder's files)")
    return 0
