"""One trace format for simulated and measured runs: events, JSON and Chrome-trace I/O, utilisation.

Both drivers (the simulator and the runtime) write the same events, so "simulated against measured" is a
comparison of two traces. An event is one interval on one stage:

* compute: ``kind`` in ``F``, ``B``, ``W`` with the ``subnet`` it belongs to;
* memory: ``prefetch``, ``evict``, ``stall`` with the ``bytes`` moved (``subnet`` of the task served);
* optional ``version``: the weight version the task read (measured lags of asynchronous policies).

Times are seconds from the start of the run. Utilisation = busy compute time / (P x makespan).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from naspipe.sched.tasks import Task

COMPUTE_KINDS = ("F", "B", "W")
MEMORY_KINDS = ("prefetch", "evict", "stall")


@dataclass
class TraceEvent:
    stage: int
    kind: str
    subnet: int
    start: float
    end: float
    bytes: int = 0
    version: int | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["bytes"] == 0:
            del d["bytes"]
        if d["version"] is None:
            del d["version"]
        return d


@dataclass
class Trace:
    stages: int
    events: list[TraceEvent] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def add(self, stage: int, kind: str, subnet: int, start: float, end: float, **extra: Any) -> TraceEvent:
        ev = TraceEvent(stage, kind, subnet, start, end, **extra)
        self.events.append(ev)
        return ev

    def extend(self, events: Iterable[TraceEvent]) -> None:
        self.events.extend(events)

    def compute_events(self) -> list[TraceEvent]:
        return [e for e in self.events if e.kind in COMPUTE_KINDS]

    def task_durations(self) -> dict[Task, float]:
        """The duration each compute task took, by task (the DAG, the lower bound and a replay read them)."""
        return {Task(e.kind, e.subnet, e.stage): e.end - e.start for e in self.compute_events()}

    @property
    def makespan(self) -> float:
        ev = self.compute_events()
        if not ev:
            return 0.0
        return max(e.end for e in ev) - min(0.0, min(e.start for e in ev))

    def busy(self) -> list[float]:
        out = [0.0] * self.stages
        for e in self.compute_events():
            out[e.stage] += e.duration
        return out

    def utilization(self) -> float:
        m = self.makespan
        return sum(self.busy()) / (self.stages * m) if m > 0 else 0.0

    def stage_utilization(self) -> list[float]:
        m = self.makespan
        return [b / m if m > 0 else 0.0 for b in self.busy()]

    def subnets(self) -> int:
        return len({e.subnet for e in self.compute_events()})

    def shifted(self, offset: float) -> Trace:
        """A copy with every time moved by ``offset`` (to align traces on one axis)."""
        evs = [TraceEvent(**{**asdict(e), "start": e.start + offset, "end": e.end + offset}) for e in self.events]
        return Trace(self.stages, evs, dict(self.meta))

    # ---- I/O -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": "naspipe-trace/1", "stages": self.stages, "meta": self.meta,
                "events": [e.to_dict() for e in sorted(self.events, key=lambda e: (e.start, e.stage))]}

    def save(self, path: str | Path) -> None:
        from naspipe.atomic import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(), separators=(",", ":")))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        if data.get("format") != "naspipe-trace/1":
            raise ValueError("not a naspipe trace (missing format 'naspipe-trace/1')")
        return cls(int(data["stages"]), [TraceEvent(**e) for e in data["events"]], dict(data.get("meta", {})))

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def to_chrome(self) -> dict[str, Any]:
        """Chrome / Perfetto trace-event JSON: one thread per stage, times in microseconds."""
        events: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": s, "args": {"name": f"stage {s}"}}
            for s in range(self.stages)
        ]
        for e in self.events:
            args: dict[str, Any] = {"subnet": e.subnet}
            if e.bytes:
                args["bytes"] = e.bytes
            if e.version is not None:
                args["version"] = e.version
            events.append({"name": f"{e.kind}{e.subnet}" if e.kind in COMPUTE_KINDS else e.kind,
                           "cat": e.kind, "ph": "X", "pid": 0, "tid": e.stage,
                           "ts": e.start * 1e6, "dur": max(e.duration, 0.0) * 1e6, "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": self.meta}

    def save_chrome(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_chrome()))


def check_causal(trace: Trace, subnets: list[tuple[int, ...]], stage_blocks: list[list[int]],
                 write_kind: str = "B") -> list[str]:
    """Violations of the CSP rule in a trace: ``F(j,s)`` starting before a conflicting earlier write ends.

    ``stage_blocks[s]`` lists the choice blocks on stage ``s``. Returns human-readable violations.
    """
    starts: dict[tuple[int, int], float] = {}
    ends: dict[tuple[int, int], float] = {}
    for e in trace.compute_events():
        if e.kind == "F":
            starts[(e.subnet, e.stage)] = e.start
        elif e.kind == write_kind:
            ends[(e.subnet, e.stage)] = e.end
    bad = []
    for s, blocks in enumerate(stage_blocks):
        last_writer: dict[tuple[int, int], int] = {}
        for j, sub in enumerate(subnets):
            for b in blocks:
                key = (b, sub[b])
                i = last_writer.get(key)
                if i is not None and (j, s) in starts:
                    if (i, s) not in ends or starts[(j, s)] < ends[(i, s)] - 1e-12:
                        bad.append(f"F({j},{s}) starts before {write_kind}({i},{s}) ends (block {b})")
                last_writer[key] = j
    return bad
