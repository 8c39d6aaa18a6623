"""The tools weirdnet's own commands are built on, public for code built on weirdnet
(the lab, ``weirdnet-lab``, uses them for its benchmarks): atomic file writes, one writer
per folder, stop signals as one exception, and intervals on a mean.

Imports nothing heavy (no torch): a command line may use them before torch is loaded.

- :func:`write_atomic`, :func:`write_png`: a file is either the old one or the complete
  new one, never half written (a temporary in the same folder, then a rename).
- :class:`DirectoryLock`, :class:`DirectoryBusyError`: an advisory lock file that a
  second writer of the same folder fails on at once, naming the holder.
- :data:`STOP`, :class:`Interrupted`, :func:`signal_name`: SIGINT and SIGTERM raised as
  one ``BaseException`` where it is safe; the CLI turns it into one line and exit status
  130/143.
- :data:`Z95`, :func:`t95`, :func:`mean_interval`: normal and Student's t 95% intervals.
- :func:`merge_tables`: one nested config table (a TOML-like dict) merged over another.
"""

from ._atomic import write_atomic, write_png
from ._intervals import Z95, mean_interval, t95
from ._lock import DirectoryBusyError, DirectoryLock
from ._signals import STOP, Interrupted, signal_name
from ._tables import merge as merge_tables

__all__ = ["STOP", "Z95", "DirectoryBusyError", "DirectoryLock", "Interrupted",
           "mean_interval", "merge_tables", "signal_name", "t95", "write_atomic",
           "write_png"]
