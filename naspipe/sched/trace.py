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
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from naspipe.sched.tasks import Task

COMPUTE_KINDS = ("F", "B", "W")
MAX_STAGES = 100_000  # what a trace file may claim (a per-stage list is made of it: 1e12 was a MemoryError)
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


def _whole(x: Any) -> int | None:
    """``x`` as an int when it is a whole number (``4`` or ``4.0``, not ``True``, ``"4"`` or ``1e400``)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x != int(x):
        return None
    return int(x)


def _event(d: Any, i: int, stages: int) -> TraceEvent:
    """Event ``i`` of a trace file, checked (``Trace.from_dict``)."""
    try:
        e = TraceEvent(**d)
    except TypeError:  # not an object, a field missing or unknown
        raise ValueError(f"trace event {i} is not an event: {d!r:.80}") from None
    stage, subnet, nbytes = _whole(e.stage), _whole(e.subnet), _whole(e.bytes)
    times = [t for t in (e.start, e.end) if not isinstance(t, bool) and isinstance(t, (int, float))
             and math.isfinite(t)]
    if (stage is None or not 0 <= stage < stages or not isinstance(e.kind, str) or subnet is None
            or len(times) < 2 or nbytes is None or (e.version is not None and _whole(e.version) is None)):
        raise ValueError(f"trace event {i} is malformed (it needs a stage from 0 to {stages - 1}, a kind, a whole "
                         f"subnet, finite start and end, whole bytes and version): {d!r:.80}")
    return TraceEvent(stage, e.kind, subnet, float(e.start), float(e.end), nbytes,
                      None if e.version is None else _whole(e.version))


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
        from naspipe.fileio.atomic import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(), separators=(",", ":")))

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        """The trace ``to_dict`` wrote. ValueError (one line) for anything else: no format ``naspipe-trace/1``,
        stages that are not a whole number >= 1, events that are not a list of events on those stages with a
        kind, a whole subnet and finite times."""
        if not isinstance(data, dict) or data.get("format") != "naspipe-trace/1":
            raise ValueError("not a naspipe trace (missing format 'naspipe-trace/1')")
        stages, events, meta = _whole(data.get("stages")), data.get("events"), data.get("meta", {})
        if stages is None or not 1 <= stages <= MAX_STAGES:
            raise ValueError(f"a trace's stages must be a whole number from 1 to {MAX_STAGES}, got "
                             f"{data.get('stages')!r:.40}")
        if not isinstance(events, list) or not isinstance(meta, dict):
            raise ValueError("a trace's events must be a list and its meta an object")
        return cls(stages, [_event(e, i, stages) for i, e in enumerate(events)], dict(meta))

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        from naspipe.fileio import jsonfile

        return cls.from_dict(jsonfile.loads(Path(path).read_text()))

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
