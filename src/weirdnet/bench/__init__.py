"""Benchmarks of weirdnet's ops, run through ``weirdnet bench ...``.

Modules (one concern each, none imports torch at import time except where noted):

- ``alloc``: glibc allocator settings applied before measuring.
- ``timing``: median wall-clock time of a callable.
- ``memory``: peak extra memory of forward+backward (CPU: child process, CUDA: allocator).
- ``_memchild``: the child process entry point for the CPU memory measurement.
- ``methods``: the compared methods (weird_scan, SDPA) and their inputs (imports torch).
- ``machine``: machine and software description for the report.
- ``analysis``: ratios and targets computed from the measured numbers.
- ``report``: Markdown/JSON rendering and atomic file writing.
- ``progress``: a progress line per measurement on stderr.
- ``scan``: the ``weirdnet bench scan`` command.
"""
