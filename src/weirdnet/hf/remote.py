"""The files ``transformers``' remote-code loader needs beside a saved weirdnet model.

``AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`` reads ``auto_map``
from ``DIR/config.json`` and imports the module files it names from ``DIR``.  Ours are two
small modules that re-export the classes of the installed ``weirdnet`` package: there is one
implementation, and a process that lacks the package gets ``transformers``' own error
naming it (``pip install weirdnet``).

That path runs whatever Python the folder holds (:data:`RISK`), so it is not the one we
document: after ``import weirdnet.hf`` the classes are registered, and ``from_pretrained``
without ``trust_remote_code`` (or ``python -m weirdnet.hf.harness`` for lm_eval) imports
no file of the folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from weirdnet.run.files import write_atomic

RISK = ("trust_remote_code=True imports and runs the Python files of the model folder "
        "(configuration_weirdnet.py, modeling_weirdnet.py, or whatever its config.json's "
        "auto_map names): anyone who could change the folder can run code as you. Use "
        "`import weirdnet.hf` and from_pretrained without it, which runs no file of the folder.")
"""The risk of ``trust_remote_code=True``, stated wherever it is mentioned."""

AUTO_MAP = {
    "AutoConfig": "configuration_weirdnet.WeirdNetConfig",
    "AutoModelForCausalLM": "modeling_weirdnet.WeirdNetForCausalLM",
}

_MODULE = '''"""{what} of a weirdnet model, for transformers' remote-code loader.

The implementation is the weirdnet package (pip install "weirdnet[hf]"); this file only
names it, so that AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
finds it without an `import weirdnet.hf` first.

{risk}
"""

from weirdnet.hf.{module} import {name}

__all__ = ["{name}"]
'''

REMOTE_FILES = {
    "configuration_weirdnet.py": _MODULE.format(what="The config class", risk=RISK,
                                                module="configuration", name="WeirdNetConfig"),
    "modeling_weirdnet.py": _MODULE.format(what="The model class", risk=RISK,
                                           module="modeling", name="WeirdNetForCausalLM"),
}


def write_remote_code(directory: str | os.PathLike) -> None:
    """Write the module files into ``directory`` and ``auto_map`` into its config.json
    (each file replaced atomically)."""
    directory = Path(directory)
    for name, text in REMOTE_FILES.items():
        write_atomic(directory / name, text)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["auto_map"] = AUTO_MAP
    write_atomic(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
