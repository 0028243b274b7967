"""Discrete-event simulation of a pipeline: one resource per stage, the real scheduler objects.

Events are task completions and message arrivals, ordered by (time, insertion order), so a run is fully
deterministic. After every event, the idle stage it concerns asks its scheduler for the next task. If
the event queue drains while a stage still has work, the schedule deadlocked: ``DeadlockError`` says
which stages and what they were waiting for.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import Any

from naspipe.partition import Partition
from naspipe.sched.policies import StageScheduler, make_scheduler, stage_specs
from naspipe.sched.shared import SharedLayers
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.sequence import ReplayStream, SubnetStream
from naspipe.sim.costs import CostModel
from naspipe.space import SearchSpace
from naspipe.trace import Trace


class DeadlockError(RuntimeError):
    pass


@dataclass
class SimResult:
    trace: Trace
    schedulers: list[StageScheduler]
    costs: CostModel
    wall_seconds: float
    decision_seconds: float
    decisions: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return self.trace.makespan

    @property
    def utilization(self) -> float:
        return self.trace.utilization()


_FINISH, _ACT, _GRAD = 0, 1, 2


def simulate(space: SearchSpace, part: Partition, stream: SubnetStream, policy: str = "csp", *,
             window: int = 200, shared: SharedLayers | None = None, jitter: float = 0.0, seed: int = 0,
             latency: float = 0.0, bandwidth: float = math.inf, policy_options: dict[str, int] | None = None,
             costs: CostModel | None = None) -> SimResult:
    """Run ``policy`` over ``stream`` on ``part.stages`` simulated stages and return the trace."""
    shared = shared or SharedLayers()
    P = part.stages
    specs = stage_specs(space, part, shared)
    # every stage reads its own view of the sequence, as separate processes would
    private = ReplayStream.materialize(stream)
    subnets = [private[j] for j in range(len(private))]
    scheds = [make_scheduler(policy, specs[s], private, window, **(policy_options or {})) for s in range(P)]
    split = scheds[0].write_kind == WEIGHT
    if costs is None:
        costs = CostModel(space, part, subnets, split_backward=split, jitter=jitter, seed=seed,
                          latency=latency, bandwidth=bandwidth)
    hop = costs.transfer()
    trace = Trace(P, meta={"driver": "sim", "policy": policy, "space": space.name, "stages": P,
                           "subnets": len(subnets), "window": window, "shared_layers": str(shared),
                           "jitter": jitter, "seed": seed, "batch_size": costs.batch_size})
    events: list[tuple[float, int, int, int, int]] = []  # (time, seq, type, stage, subnet/kind code)
    seq = 0
    busy: list[Task | None] = [None] * P
    started = [0.0] * P
    decision_time = 0.0
    decisions = 0
    clock = time.perf_counter
    kind_code = {FORWARD: 0, BACKWARD: 1, WEIGHT: 2}

    def try_start(s: int, now: float) -> None:
        nonlocal seq, decision_time, decisions
        if busy[s] is not None:
            return
        t0 = clock()
        task = scheds[s].next_task()
        decision_time += clock() - t0
        decisions += 1
        if task is None:
            return
        busy[s] = task
        started[s] = now
        seq += 1
        heapq.heappush(events, (now + costs.duration(task), seq, _FINISH, s,
                                task.subnet * 3 + kind_code[task.kind]))

    t_wall = clock()
    for s in range(P):
        try_start(s, 0.0)
    while events:
        now, _, etype, s, payload = heapq.heappop(events)
        sched = scheds[s]
        if etype == _FINISH:
            task = busy[s]
            assert task is not None and task.subnet * 3 + kind_code[task.kind] == payload
            busy[s] = None
            trace.add(s, task.kind, task.subnet, started[s], now)
            sched.on_finish(task)
            if task.kind == FORWARD and s + 1 < P:
                seq += 1
                heapq.heappush(events, (now + hop, seq, _ACT, s + 1, task.subnet))
            elif task.kind == BACKWARD and s > 0:
                seq += 1
                heapq.heappush(events, (now + hop, seq, _GRAD, s - 1, task.subnet))
        elif etype == _ACT:
            sched.on_activation(payload)
        else:
            sched.on_gradient(payload)
        try_start(s, now)
    wall = clock() - t_wall
    stuck = [s for s in range(P) if not scheds[s].finished]
    if stuck:
        detail = "; ".join(f"stage {s}: oldest unfinished subnet {scheds[s].lo}" for s in stuck)
        raise DeadlockError(f"policy {policy!r} deadlocked: {detail}")
    return SimResult(trace, scheds, costs, wall, decision_time, decisions)
