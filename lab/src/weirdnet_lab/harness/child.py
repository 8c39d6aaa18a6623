"""The one way weirdnet runs work in a fresh process:
``python -m weirdnet_lab.harness.child JOB SPEC``.

JOB names a function of :data:`JOBS` that takes the SPEC (a JSON object, given inline or
as ``@path`` to a file) and returns a JSON-able result.  Before the job (and so before
torch is imported) the child tells glibc to keep freed memory in the heap
(:mod:`.alloc`: peak-memory readings are then true high-water marks); it stops when its
parent dies (:func:`.children.watch_parent`); SIGINT and SIGTERM end it with one line and
exit status 128 + signal; and the job's result is the last line of stdout.

The parent side is :func:`weirdnet_lab.harness.children.job_command` (the command line) and
:func:`weirdnet_lab.harness.children.job_result` (the result, or the failure, as a dict).
"""

from __future__ import annotations

import importlib
import json
import signal
import sys
from pathlib import Path

JOBS = {
    "memory": "weirdnet_lab.opbench.memchild:measure",    # peak extra memory of one fwd+bwd
    "speed": "weirdnet_lab.speed:measure",         # a model's training steps/s, memory
    "compile": "weirdnet_lab.compile:measure",     # eager or compiled training steps/s
    "cell": "weirdnet_lab.sweep.cell:run_cell_and_record",  # one suite cell
    "scan-cost": "weirdnet_lab.scan_cost.jobs:measure",  # interpreter counts (bench scan-cost)
    "scan-ptx": "weirdnet_lab.scan_cost.jobs:ptx",  # sm_90 PTX of those kernels
}


def read_spec(text: str) -> dict:
    """The JSON spec: inline, or the file after ``@``."""
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    return json.loads(text)


def main(argv: list[str] | None = None) -> int:
    """Run one job; the exit status."""
    from weirdnet_lab.harness.alloc import reuse_freed_memory

    reuse_freed_memory()  # before torch allocates anything
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in JOBS:
        print(f"usage: python -m weirdnet_lab.harness.child {{{','.join(JOBS)}}} SPEC|@SPEC.json",
              file=sys.stderr)
        return 2
    from weirdnet.run import STOP, Interrupted
    from weirdnet_lab.harness.children import watch_parent

    job, spec = argv[0], read_spec(argv[1])
    watch_parent()  # the benchmark killed outright: stop by ourselves
    installed = STOP.install()
    try:
        module, name = JOBS[job].split(":")
        result = getattr(importlib.import_module(module), name)(spec)
    except (Interrupted, KeyboardInterrupt) as stop:
        if not isinstance(stop, Interrupted):
            stop = Interrupted(signal.SIGINT)
        print(f"weirdnet bench: {job} job stopped ({stop.message})", file=sys.stderr,
              flush=True)
        return stop.exit_status
    finally:
        if installed:
            STOP.uninstall()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
