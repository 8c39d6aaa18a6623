"""Operator benchmarks (``weirdnet bench scan`` and ``weirdnet bench mixers``).

:mod:`.spec` says what distinguishes one (:class:`~.spec.OpBench`: methods, lengths,
ratios, targets, report header); :mod:`.scan` and :mod:`.mixers` are the two specs and
their commands; :mod:`.runner` runs any spec (timings, memory children, report), with
:mod:`.methods` (what is timed), :mod:`.memchild` (the memory child), :mod:`.analysis`
(ratios and targets) and :mod:`.report` (Markdown and JSON).
"""
