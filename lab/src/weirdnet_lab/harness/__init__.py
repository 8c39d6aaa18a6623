"""How the lab measures: child processes, timing, memory, machine records, output folders.

- ``child``: the one entry point of every fresh process the lab starts (its ``JOBS``);
  ``children``: starting them, and stopping them with their command.
- ``timing``: :func:`~.timing.time_step`, the one timing helper.
- ``memory``: the peak extra memory of a step (CPU: a child process per measurement,
  the ``memory`` job of :mod:`weirdnet_lab.opbench.memchild`; CUDA: the allocator's
  peak); ``alloc``: glibc settings for measuring.
- ``machine``: the machine and software a record was made on; ``contention``: the CPU
  other processes used meanwhile.
- ``output``: where a command writes (``--out``, else a scratch folder), one writer per
  folder, atomic writes, stop signals; ``progress``: one line per measurement.
"""
