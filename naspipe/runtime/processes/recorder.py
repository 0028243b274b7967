"""The trace events of one stage: kept for the final trace and appended live to ``OUT/events.jsonl``.

Why it exists: the runtime writes the same ``TraceEvent`` records as the simulator, and a live monitor
(e.g. a notebook widget) can tail ``events.jsonl`` while the run goes on. Every stage appends whole lines
with single ``write`` calls on an ``O_APPEND`` descriptor, so lines from different processes never
interleave. Times are seconds since the run's common start (taken by every stage right after a barrier).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from naspipe.sched.trace import TraceEvent


class EventLog:
    def __init__(self, stage: int, path: Path | None = None):
        self.stage = stage
        self.t0 = time.perf_counter()
        self.events: list[TraceEvent] = []
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path is not None else None

    def start_clock(self) -> None:
        """Call right after the start barrier: time 0 of the run."""
        self.t0 = time.perf_counter()

    def now(self) -> float:
        """Seconds since the run's start."""
        return time.perf_counter() - self.t0

    def record(self, kind: str, subnet: int, start: float, end: float, version: int | None = None) -> TraceEvent:
        ev = TraceEvent(self.stage, kind, subnet, start, end, version=version)
        self.events.append(ev)
        if self._fd is not None:  # the to_dict() form, built directly (dataclasses.asdict is slow per task)
            line: dict[str, Any] = {"stage": self.stage, "kind": kind, "subnet": subnet, "start": start, "end": end}
            if version is not None:
                line["version"] = version
            os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
        return ev

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
