"""weirdnet-lab: every ``weirdnet bench`` command, built on the library and kept apart from it.

A distribution of its own (``lab/pyproject.toml``), so that a benchmark or a report
changes without a library release.  It depends on ``weirdnet`` and adds ``weirdnet bench
...`` to its command line through the entry point ``bench`` of the group
``weirdnet.commands`` (:mod:`.commands`).  The library never imports the lab
(tests/test_layering.py enforces it), and the lab uses only the library's public API
(the modules and names of the API reference, docs/api; lab/tests/test_core_api.py
enforces it).  The lab holds the benchmarks, the papers' reported numbers and their
claims, and the sweeps that train many models; its records are under ``lab/results``.

- :mod:`.harness`: how the lab measures: a fresh child process per measurement
  (``child``, ``children``), timing (``timing.time_step``), peak memory (``memory``;
  its child job is ``opbench.memchild``), the machine and versions of a record
  (``machine``), the output folder (``output``: one writer, nothing half-written),
  progress lines, allocator settings.
- :mod:`.sweep`: the sweep engine the suite, ``bench lm`` and ``bench recall`` share:
  cell records and their state (``store``), running the missing cells (``engine``), the
  training child of one cell (``cell``), intervals and report writing.
- :mod:`.opbench`: the operator benchmarks ``bench scan`` and ``bench mixers`` (a spec
  each, one runner).
- :mod:`.speed`, :mod:`.compile`, :mod:`.decode`: whole models: training speed and
  memory, eager vs compiled, cached decoding.  :mod:`.gpu`: the GPU path in one command.
- :mod:`.variants` and :mod:`.matching`: the models every benchmark compares (mechanisms,
  ablations, the Transformer++, the ``transformers`` peers) and their parameter matching.
- :mod:`.suite`: the papers' tables rerun (``bench suite``); :mod:`.lm`: language models
  at equal minutes and steps (``bench lm``); :mod:`.recall`: the recall diagnostics
  (``bench recall``).

Every command module has ``HELP``, ``DESCRIPTION``, ``add_arguments`` and ``run`` (the
protocol of :mod:`weirdnet.cli`) and imports torch inside ``run`` only.
"""
