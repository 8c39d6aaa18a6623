"""Benchmarks of weirdnet's ops, layers and models, run through ``weirdnet bench NAME``.

Modules (one concern each, none imports torch at import time except where noted):

- ``opbench``: what distinguishes one operator benchmark (:class:`~.opbench.OpBench`:
  methods, lengths, ratios, targets, report header, length cap) and
  :func:`~.opbench.get_opbench`.
- ``scan``: ``bench scan``, weird_scan vs SDPA.
- ``mixers``: ``bench mixers``, every registered mixer layer vs SDPA (methods found in
  ``weirdnet.layers``' registry at run time).
- ``runner``: running an operator benchmark: options, plan, timings, memory, report.
- ``alloc``: glibc allocator settings applied before measuring.
- ``timing``: median wall-clock time of a callable (imports torch).
- ``memory``: peak extra memory of forward+backward (CPU: child process, CUDA: allocator).
- ``child``: the one entry point of every fresh process the benchmarks start (jobs:
  memory, speed, compile, suite cell); ``children``: starting and stopping them.
- ``_memchild``: the ``memory`` job (peak extra CPU memory of one forward+backward).
- ``methods``: shapes, cases, methods and their builders (weird_scan, SDPA, a mixer
  layer) (imports torch).
- ``machine``: machine and software description for the report (imports torch).
- ``contention``: CPU time other processes used during the run.
- ``analysis``: ratios and targets computed from the measured numbers.
- ``report``: Markdown/JSON rendering and atomic file writing.
- ``progress``: a progress line per measurement on stderr.
- ``speed``: ``weirdnet bench speed``, training steps/s and peak memory of whole models
  vs the Transformer on byte-level text classification (``--task lm``: the parameter-
  matched language models and the ``transformers`` peers vs the Transformer++);
  ``speed_report``: its tables and plot.
- ``paper``: ``weirdnet bench suite``, the papers' tables (a package: see its doc).
- ``output``: where every command writes (``--out``, else a scratch folder outside the
  repository), no quick run over full results, one writer per folder, stop signals;
  ``children``: child processes that end with their command.
"""
