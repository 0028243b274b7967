"""How busy the machine was while the suite ran, for the line ``make test`` ends with.

Why it exists: the suite is bound by CPU (on the 2-core machines it is measured on, both cores are busy nearly all
the time), so its duration says as much about the machine and whatever else ran on it as about the tests. The
line names the CPU and the cores busy on average over the session (``/proc/stat``: every process, the suite's and
any other), so a time is never read without the machine beside it. Off Linux the line names the CPU alone.

The same virtual machine is not always as fast: on the 2-core Intel Xeon the same tests took 528 s of pytest one
afternoon and 726 s that evening, both cores busy throughout (a pure-Python loop, by contrast, moved by less than a
fifth). What the suite does most is start interpreters that import torch (about 300 of them). So the line also gives
the machine's speed before and after the suite, as the CPU seconds a fresh interpreter takes to import torch
(``import_probe``; about 2 s each, taken when no test runs; only for a suite on pytest-xdist's workers, as ``make
test`` runs it), and two suite times compare only beside their probes.
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


PROBE = "import torch"


def import_probe(code: str = PROBE) -> float | None:
    """CPU seconds (user and system) of a fresh interpreter running ``code`` (torch's import: the machine's speed at
    what the suite does most; more seconds, a slower machine); None where it fails."""
    import subprocess
    import sys

    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:
        return None
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # (this child's own usage, whatever else this process has reaped)
    except ChildProcessError:  # (SIGCHLD ignored: the child was reaped by the kernel, its usage with it)
        proc.returncode = -1
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime if proc.returncode == 0 else None


def summary(cpu: str, start: Snapshot | None, end: Snapshot | None,
            probes: tuple[float | None, float | None] | None = None) -> str:
    """``machine: CPU, N cores; busy B of them on average over the session (...); torch imported in ...``."""
    head = f"machine: {cpu}, {os.cpu_count()} cores"
    if start is not None and end is not None:
        head += (f"; {busy_cores(start, end):.2f} of them busy on average over the session (/proc/stat: the "
                 "suite's processes and any other)")
    if probes is not None and None not in probes:
        head += (f"; a fresh interpreter imported torch in {probes[0]:.2f} s of CPU before the tests, "
                 f"{probes[1]:.2f} s after (the machine's speed: compare suite times beside it)")
    return head
