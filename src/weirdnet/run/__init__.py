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

from .files import DirectoryBusyError, DirectoryLock, write_atomic, write_png
from .signals import STOP, Interrupted, signal_name

__all__ = ["STOP", "DirectoryBusyError", "DirectoryLock", "Interrupted", "signal_name",
           "write_atomic", "write_png"]
