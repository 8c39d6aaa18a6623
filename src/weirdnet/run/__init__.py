"""A run's files and its process: what a command writes and how it stops.

- :mod:`weirdnet.run.files`: a file is either the old one or the complete new one (a
  temporary of weirdnet's own, then a rename); one writer per folder.
- :mod:`weirdnet.run.rundir`: the run directory (``out_dir/name``): checked, claimed,
  cleaned of a killed writer's leftovers.
- :mod:`weirdnet.run.checkpoint`, :mod:`weirdnet.run.safetensors_io`: checkpoints and
  model files, verified by their checksums when read.
- :mod:`weirdnet.run.runlog`: ``log.jsonl`` and the results table.
- :mod:`weirdnet.run.signals`, :mod:`weirdnet.run.faults`, :mod:`weirdnet.run.line_end`,
  :mod:`weirdnet.run.warnings`: SIGINT/SIGTERM as one exception, fault injection for the
  reliability tests, the terminal's line, one-line warnings.
"""

import importlib

_PUBLIC = {
    "files": ("DirectoryBusyError", "DirectoryLock", "write_atomic", "write_png"),
    "signals": ("STOP", "Interrupted", "signal_name"),
    "checkpoint": ("TRAIN_CONFIG", "list_checkpoints"),
}
"""The names code built on weirdnet takes from ``weirdnet.run``, by the module that
defines each; imported on first use (``import weirdnet.run`` imports no torch)."""
_HOME = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
