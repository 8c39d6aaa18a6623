"""The core's commands (``weirdnet train``, ``eval``, ``generate``, ``plot``, ``configs``,
``data ...``, ``info``, ``export-hf``, ``harness-tasks``), one module each, with the
protocol :mod:`weirdnet.cli` reads (``HELP``, ``DESCRIPTION``, ``add_arguments(parser)``,
``run(args, argv) -> exit status``).  Expected failures print one line
``weirdnet <command>: <message>`` and return 2 (:mod:`._common`).

Each module imports torch, the models and the data inside ``run`` (deliberately: the
parser imports every command module, and ``--help`` must not wait for torch).
"""
