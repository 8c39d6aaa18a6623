"""The sweep engine: many training runs ("cells"), each in its own process, resumable.

:mod:`.store` keeps each cell's record and says whether it is done, stale, interrupted or
pending; :mod:`.engine` runs the cells not done (``--jobs`` at once) and writes the
report; :mod:`.cell` is the child that trains one cell and records it; :mod:`.intervals`
and :mod:`.writing` serve the reports; :mod:`.baselines` (what ignoring the input
scores, which a cell records) and :mod:`.context_eval` (bits per byte by context, which a
context cell records) measure beside the trainer.  ``bench suite``, ``bench lm`` and
``bench recall`` all run through it.
"""
