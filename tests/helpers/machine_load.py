"""How busy the machine was while the suite ran, for the line ``make test`` ends with.

Why it exists: the suite is bound by CPU (on the 2-core machines it is measured on, both cores are busy nearly all
the time), so its duration says as much about the machine and whatever else ran on it as about the tests. The
line names the CPU and the cores busy on average over the session (``/proc/stat``: every process, the suite's and
any other), so a time is never read without the machine beside it. Off Linux the line names the CPU alone.

The same virtual machine is not always as fast: on the 2-core Intel Xeon the same tests took 528 s of pytest one
afternoon and 726 s that evening, both cores busy throughout. So the line also gives the machine's speed before and
after the suite: the CPU seconds a fixed pure-Python loop takes (``speed_probe``, the least of three), when nothing
of the suite runs yet or any more. Two suite times compare only beside their probes.
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


PROBE_LOOP = 2_000_000


def speed_probe(repeats: int = 3) -> float:
    """CPU seconds of a fixed pure-Python loop (``PROBE_LOOP`` squares summed), the least of ``repeats``: the
    machine's speed at this moment (more seconds: a slower machine)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        sum(i * i for i in range(PROBE_LOOP))
        best = min(best, time.process_time() - t0)
    return best


def summary(cpu: str, start: Snapshot | None, end: Snapshot | None,
            probes: tuple[float, float] | None = None) -> str:
    """``machine: CPU, N cores; busy B of them on average over the session (...); speed probe ...``."""
    head = f"machine: {cpu}, {os.cpu_count()} cores"
    if start is not None and end is not None:
        head += (f"; {busy_cores(start, end):.2f} of them busy on average over the session (/proc/stat: the "
                 "suite's processes and any other)")
    if probes is not None:
        head += (f"; speed probe {probes[0]:.3f} s before, {probes[1]:.3f} s after (CPU seconds of a fixed Python "
                 "loop: compare suite times beside it)")
    return head
