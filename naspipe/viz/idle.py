"""Where each stage's idle time went: waiting on a causal dependency, on a message, on memory, or other.

Utilisation says how much of the run a stage computed; this module says why it did not compute the rest, so
a report can tell "the causal rule throttled this stage" from "it waited for its neighbour" or "it waited for
a swap-in". Each gap ``[a, b)`` between two compute tasks of a stage (and before its first and after its
last) is classified by the state of the stage's not-yet-started tasks at ``a``, using the run's task graph
(``naspipe.viz.dag.causal_dag``: data and causal edges) and the trace's end times:

* **memory**: the part of the gap covered by the stage's ``stall`` events (a layer being copied in);
* **other**: some task had all its inputs and every causal predecessor done, yet none ran: the policy's
  own order (``sequential`` waits for a whole subnet, ``bsp`` for a flush), start-up, scheduling overhead,
  and the drain after the stage's last task;
* **causal**: tasks had their inputs, but each waited for an earlier subnet's write of a candidate it uses
  (the CSP rule: without it the stage would have worked);
* **message**: no task had its inputs yet: the stage waited for activations or gradients from a
  neighbouring stage (their arrival is not traced, so the transit counts here).

Pure Python over a trace and a task graph (no torch); a sweep with a heap, ``O(tasks log tasks)``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from naspipe.sched.tasks import Task
from naspipe.sched.trace import Trace

CAUSES = ("causal", "message", "memory", "other")
CAUSE_LABELS = {"causal": "waiting on a causal dependency", "message": "waiting on a message",
                "memory": "waiting on memory (swap-in stall)",
                "other": "other (policy order, start-up, drain, overhead)"}


@dataclass(frozen=True)
class StageIdle:
    stage: int
    makespan: float
    busy: float
    idle: dict[str, float]  # cause -> seconds

    def share(self, cause: str) -> float:
        """Idle seconds of ``cause`` as a share of the makespan."""
        return self.idle[cause] / self.makespan if self.makespan > 0 else 0.0


def _overlap(a: float, b: float, spans: Sequence[tuple[float, float]]) -> float:
    total, cursor = 0.0, a
    for s, e in spans:  # sorted, possibly overlapping
        s, e = max(s, cursor), min(e, b)
        if e > s:
            total += e - s
            cursor = e
    return total


def idle_breakdown(trace: Trace, graph: nx.DiGraph | None = None) -> list[StageIdle]:
    """Per stage: busy seconds and idle seconds by cause (``CAUSES``) over the trace's makespan.

    ``graph``: the run's task graph (``dag_from_trace``); without it the non-memory idle time is "other".
    """
    compute = trace.compute_events()
    if not compute:
        return [StageIdle(s, 0.0, 0.0, dict.fromkeys(CAUSES, 0.0)) for s in range(trace.stages)]
    t0 = min(0.0, min(e.start for e in compute))
    t1 = max(e.end for e in compute)
    end_of = {Task(e.kind, e.subnet, e.stage): e.end for e in compute}
    start_of = {Task(e.kind, e.subnet, e.stage): e.start for e in compute}
    out = []
    for s in range(trace.stages):
        mine = sorted((e for e in compute if e.stage == s), key=lambda e: e.start)
        stalls = sorted((e.start, e.end) for e in trace.events if e.stage == s and e.kind == "stall")
        # per task of this stage: when its inputs were in (data) and when its causal predecessors were done
        ready: list[tuple[float, float, Task]] = []
        if graph is not None:
            for e in mine:
                t = Task(e.kind, e.subnet, e.stage)
                data = causal = t0
                if t in graph:
                    for u, _, kind in graph.in_edges(t, data="kind"):
                        end = end_of.get(u, t0)
                        if kind == "causal":
                            causal = max(causal, end)
                        else:
                            data = max(data, end)
                ready.append((data, causal, t))
            ready.sort(key=lambda r: r[0])
        idle = dict.fromkeys(CAUSES, 0.0)
        waiting: list[tuple[float, Task]] = []  # heap of (causal ready, task) of tasks whose inputs are in
        nxt = 0
        prev_end = t0
        gaps = [(prev_end, e.start) for e in mine[:1]]
        for e, f in zip(mine, mine[1:], strict=False):
            prev_end = max(prev_end, e.end)
            gaps.append((prev_end, f.start))
        prev_end = max(prev_end, mine[-1].end) if mine else t0
        for a, b in gaps:
            if b <= a:
                continue
            mem = _overlap(a, b, stalls)
            idle["memory"] += mem
            rest = (b - a) - mem
            if graph is None:
                idle["other"] += rest
                continue
            while nxt < len(ready) and ready[nxt][0] <= a:
                heapq.heappush(waiting, (ready[nxt][1], ready[nxt][2]))
                nxt += 1
            while waiting and start_of[waiting[0][1]] < b:  # already ran: drop
                heapq.heappop(waiting)
            if waiting and waiting[0][0] <= a:
                idle["other"] += rest
            elif waiting:
                idle["causal"] += rest
            else:
                idle["message"] += rest
        tail = t1 - prev_end
        if tail > 0:
            mem = _overlap(prev_end, t1, stalls)
            idle["memory"] += mem
            idle["other"] += tail - mem
        busy = sum(e.duration for e in mine)
        out.append(StageIdle(s, t1 - t0, busy, idle))
    return out
