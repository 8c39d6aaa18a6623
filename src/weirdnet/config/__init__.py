"""Configs as typed dataclasses, registries of named parts, nested tables and recipes;
imports no torch (the command line reads them before torch is loaded).

- :mod:`weirdnet.config.typed`: a dataclass from a dict, checked field by field
  (:class:`ConfigError` names the key), and back.
- :mod:`weirdnet.config.registry`: a table of named parts (mixers, models, datasets)
  that plugins add to.
- :mod:`weirdnet.config.tables`: one nested table (a TOML-like dict) merged over another.
- :mod:`weirdnet.config.toml`: config files in TOML: ``extends``, named overlays,
  ``--set`` assignments.
- :mod:`weirdnet.config.toml_write`: a table written as TOML.
- :mod:`weirdnet.config.recipes`: named sets of backbone options (``TRANSFORMERPP``).
"""

from .recipes import TRANSFORMERPP
from .tables import merge
from .toml import read_toml
from .typed import ConfigError, from_dict, to_dict

__all__ = ["TRANSFORMERPP", "ConfigError", "from_dict", "merge", "read_toml", "to_dict"]
