"""``weirdnet export-hf``: a trained weirdnet LM as a Hugging Face model folder.

The folder holds ``config.json`` (a :class:`~.configuration.WeirdNetConfig`, which is also a
weirdnet model config), ``model.safetensors`` (the weirdnet weights, names unchanged, with
their SHA-256 in its metadata: a damaged file is an error when either loader reads it),
``generation_config.json``, the byte tokenizer (``tokenizer.json`` and its config), the two
remote-code modules with ``auto_map`` (:mod:`.remote`) and a ``README.md`` saying how to
load it.  It is written into a temporary folder beside ``OUT`` and renamed into place, so
``OUT`` is never half-written; the folder and its files get the modes the umask allows.
An existing ``OUT`` is replaced only with ``overwrite`` and only when it is an earlier
export (nothing but the files an export writes).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from weirdnet.models import WeirdNetLM
from weirdnet.run.files import make_temp_dir, obstacle, write_atomic
from weirdnet.train.trained import load_trained

from .modeling import WeirdNetForCausalLM
from .remote import REMOTE_FILES, RISK
from .tokenizer import byte_tokenizer

EXPORT_FILES = frozenset({
    "config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "README.md", *REMOTE_FILES})
"""Every file an export may write: an ``OUT`` holding anything else is not replaced."""


class ExportError(ValueError):
    """A source that is not a byte-level language model, or an OUT that must not be
    replaced."""


def export_hf(source: str | os.PathLike, out: str | os.PathLike, *,
              overwrite: bool = False) -> Path:
    """Export the LM of ``source`` (a run directory, its best/, a checkpoint, or a folder
    written by ``model.save``) to the folder ``out``; returns ``out``."""
    out = Path(out)
    _check_out(out, overwrite)
    model, _, info, model_dir = load_trained(Path(source))
    _check_source(model, info or {}, model_dir)
    hf_model = WeirdNetForCausalLM.from_weirdnet(model)
    staging = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = make_temp_dir(f".{out.name}.export-", out.parent)  # mode as mkdir gives
        hf_model.save_pretrained(staging)
        byte_tokenizer(max_length=model.max_len).save_pretrained(staging)
        write_atomic(staging / "README.md", model_card(model, model_dir, out.name))
        _replace(staging, out)
    except BaseException as error:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):  # read-only, full disk, no permission: one line
            raise ExportError(f"cannot write {out}: {error.strerror or error} "
                              f"({error.filename or out.parent})") from None
        raise
    return out


def _check_out(out: Path, overwrite: bool) -> None:
    if out.parent.exists() and not out.parent.is_dir():
        raise ExportError(f"{out.parent} is not a folder")
    found = obstacle((out.parent, *out.parent.parents))
    if found is not None:
        part, problem = found
        raise ExportError(f"cannot write {out}: {part} is a file, not a folder"
                          if problem == "file" else
                          f"cannot write {out}: the folder {part} is not writable")
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder")
    if not overwrite:
        raise ExportError(f"{out} exists and is not empty; pass --overwrite to replace an "
                          "earlier export")
    others = sorted(p.name for p in out.iterdir() if p.name not in EXPORT_FILES)
    if others or not _is_export(out):
        held = ", ".join(others[:8]) or "no weirdnet config.json"
        raise ExportError(f"{out} is not an earlier export ({held}); refusing to replace it")


def _is_export(folder: Path) -> bool:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "weirdnet"


def _check_source(model, info: dict, model_dir: Path) -> None:
    if not isinstance(model, WeirdNetLM):
        raise ExportError(f"{model_dir} holds a {type(model).__name__}; export-hf exports "
                          "language models (WeirdNetLM)")
    vocab = model.config.backbone.vocab_size
    if vocab != 256:
        raise ExportError(f"{model_dir} has a vocabulary of {vocab} ids; the exported "
                          "tokenizer is the byte tokenizer (256 ids, id = byte value)")
    encoding = (info.get("encoding") or "utf-8").lower().replace("_", "-")
    if encoding not in ("utf-8", "utf8"):
        raise ExportError(f"{model_dir} was trained on {encoding} bytes; the byte tokenizer "
                          "reads and writes UTF-8 text")


def _replace(staging: Path, out: Path) -> None:
    """Move the finished ``staging`` folder to ``out`` (an empty or earlier export there
    is removed first, file by file)."""
    if out.exists():
        for path in out.iterdir():
            path.unlink()
        out.rmdir()
    os.replace(staging, out)


def model_card(model: WeirdNetLM, model_dir: Path, name: str) -> str:
    """A short README.md: what the model is and how to load it."""
    cfg = model.config.backbone
    return f"""# {name}

A weirdnet byte-level language model exported from `{model_dir}`: mixers
{", ".join(cfg.mixers)}; width {cfg.dim}, {cfg.depth} layers, up to {cfg.max_len} bytes,
{model.num_parameters():,} parameters. Token id = byte value of UTF-8 text.

```python
import weirdnet.hf  # registers the classes with the Auto* factories
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{name}")
tokenizer = AutoTokenizer.from_pretrained("{name}")
ids = tokenizer("def ", return_tensors="pt").input_ids
print(tokenizer.decode(model.generate(ids, max_new_tokens=100, do_sample=True)[0]))
```

This runs no Python file of the folder. Score it with lm-evaluation-harness through
`python -m weirdnet.hf.harness --model hf --model_args pretrained={name} ...` (lm_eval
with the classes registered). The same folder loads as a weirdnet model:
`weirdnet.models.load("{name}")`.

Do not load it with `trust_remote_code=True`: {RISK}
"""
