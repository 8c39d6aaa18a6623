"""``weirdnet bench ...``: the lab's command group, added to the ``weirdnet`` command line
through the entry point ``bench`` of the group ``weirdnet.commands`` (lab/pyproject.toml;
:data:`weirdnet.cli.PLUGIN_GROUP` reads it).  Each subcommand is a module with the
protocol of :mod:`weirdnet.cli` (``HELP``, ``DESCRIPTION``, ``add_arguments``, ``run``)."""

GROUP = ("run a benchmark",
         "Run one of weirdnet's benchmarks; see `weirdnet bench BENCHMARK --help`.",
         "BENCHMARK")
"""The group's (one-line help, description, metavar of its subcommand)."""

COMMANDS = {
    "scan": "weirdnet_lab.opbench.scan",
    "mixers": "weirdnet_lab.opbench.mixers",
    "decode": "weirdnet_lab.decode",
    "speed": "weirdnet_lab.speed",
    "compile": "weirdnet_lab.compile",
    "lm": "weirdnet_lab.lm.command",
    "recall": "weirdnet_lab.recall.command",
    "context": "weirdnet_lab.context.command",
    "context-parallel": "weirdnet_lab.context_parallel.command",
    "suite": "weirdnet_lab.suite.command",
    "gpu": "weirdnet_lab.gpu",
    "scan-cost": "weirdnet_lab.scan_cost",
}
"""Every benchmark, in ``weirdnet bench --help`` order: its module."""

MODEL_MODULES = ("weirdnet_lab.peers",)
"""The lab's model classes (``PeerLM``: the ``transformers`` and fla peers), which
weirdnet's model table imports through this entry point on its first lookup
(:func:`weirdnet.models.base.plugin_model_modules`)."""
