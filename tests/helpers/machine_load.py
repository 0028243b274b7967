"""How busy the machine was while the suite ran, for the line ``make test`` ends with.

Why it exists: the suite is bound by CPU (on the 2-core machines it is measured on, both cores are busy nearly all
the time), so its duration says as much about the machine and whatever else ran on it as about the tests. The
line names the CPU and the cores busy on average over the session (``/proc/stat``: every process, the suite's and
any other), so a time is never read without the machine beside it. Off Linux the line names the CPU alone.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

STAT = Path("/proc/stat")


class Snapshot(NamedTuple):
    """The machine's busy CPU time (seconds, all cores together) at a moment of the monotonic clock."""

    busy_s: float
    at: float


def snapshot(stat: Path = STAT) -> Snapshot | None:
    """Now, from the ``cpu`` line of ``stat`` (user, nice, system, idle, iowait, irq, softirq, steal, ...: busy is
    all but idle, iowait and steal); None where there is no such file."""
    try:
        line = stat.read_text().split("\n", 1)[0].split()
        ticks = [int(x) for x in line[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    if line[0] != "cpu" or len(ticks) < 5:
        return None
    busy = sum(ticks) - ticks[3] - ticks[4] - (ticks[7] if len(ticks) > 7 else 0)
    return Snapshot(busy / os.sysconf("SC_CLK_TCK"), time.monotonic())


def busy_cores(start: Snapshot, end: Snapshot) -> float:
    """Cores busy on average between two snapshots (0 when no time passed)."""
    elapsed = end.at - start.at
    return (end.busy_s - start.busy_s) / elapsed if elapsed > 0 else 0.0


def summary(cpu: str, start: Snapshot | None, end: Snapshot | None) -> str:
    """``machine: CPU, N cores; busy B of them on average over the session (...)``."""
    head = f"machine: {cpu}, {os.cpu_count()} cores"
    if start is None or end is None:
        return head
    return (f"{head}; {busy_cores(start, end):.2f} of them busy on average over the session (/proc/stat: the "
            "suite's processes and any other)")
