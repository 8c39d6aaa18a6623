"""How much CPU other processes used while a benchmark ran (a disturbance indicator).

Busy CPU time of the whole machine (``/proc/stat``: user, nice, system, irq, softirq)
minus this process's own and its finished children's (``os.times``), divided by the
wall time: the average number of cores other processes kept busy.  ``steal`` (time the
hypervisor gave to other guests) is reported separately.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


def _machine_busy_and_steal() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot; None without /proc."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    return (user + nice + system + irq + softirq) / hz, steal / hz


def _own_cpu() -> float:
    """CPU seconds used by this process and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class CpuMeter:
    """Snapshot taken at construction; :meth:`report` gives the usage since then."""

    wall: float
    own: float
    machine: tuple[float, float] | None

    @classmethod
    def start(cls) -> CpuMeter:
        """Take the starting snapshot."""
        return cls(time.monotonic(), _own_cpu(), _machine_busy_and_steal())

    def report(self) -> dict | None:
        """Average cores used by other processes and stolen, since :meth:`start`."""
        now = _machine_busy_and_steal()
        if self.machine is None or now is None:
            return None
        wall = max(time.monotonic() - self.wall, 1e-9)
        others = (now[0] - self.machine[0]) - (_own_cpu() - self.own)
        return {"wall_s": round(wall, 1),
                "other_processes_cores": round(max(0.0, others) / wall, 3),
                "steal_cores": round((now[1] - self.machine[1]) / wall, 3)}
