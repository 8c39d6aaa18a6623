"""What other installed distributions add to weirdnet: one entry-point group.

A distribution (the lab, ``weirdnet-lab``) declares entry points in the group
:data:`PLUGIN_GROUP`.  Each is named after a command and loads a module that the command
line reads as that command or command group (:mod:`weirdnet.cli`); the module may also
list ``MODEL_MODULES``, the modules whose ``@register_model`` classes join
:data:`weirdnet.models.MODELS` (the lab's ``transformers`` and fla peers).
"""

from __future__ import annotations

from types import ModuleType

PLUGIN_GROUP = "weirdnet.commands"
"""The entry-point group through which other distributions add commands and models."""


def plugin_modules() -> dict[str, ModuleType]:
    """The module each installed entry point of :data:`PLUGIN_GROUP` loads, by entry
    point name, in name order."""
    from importlib.metadata import entry_points  # deferred: only a lookup reads them

    points = sorted(entry_points(group=PLUGIN_GROUP), key=lambda point: point.name)
    return {point.name: point.load() for point in points}
