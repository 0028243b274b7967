"""Discrete-event simulation of a pipeline: one resource per stage, the real scheduler objects.

Events are task completions and message arrivals, ordered by (time, insertion order), so a run is fully
deterministic. After every event, the idle stage it concerns asks its scheduler for the next task. If
the event queue drains while a stage still has work, the schedule deadlocked: ``DeadlockError`` says
which stages and what they were waiting for.

With ``memory=MemoryConfig(...)`` the run also models each stage's device memory (``naspipe.sim.memory``):
copy-engine events join the queue, a chosen task may stall until its candidates are loaded, forwards
pass the admission gate, and in ``predictive`` mode the predictor (``naspipe.sched.predictor``) forecasts
every stage's next tasks to drive prefetching. Without it the run is exactly the memory-free one.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from naspipe.partition import Partition
from naspipe.sched.policies import StageScheduler, make_scheduler, stage_specs
from naspipe.sched.predictor import gated_next_task
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.sequence import ReplayStream, SubnetStream
from naspipe.shared import SharedLayers
from naspipe.sim.costs import CostModel
from naspipe.space import SearchSpace
from naspipe.trace import Trace


class DeadlockError(RuntimeError):
    pass


if TYPE_CHECKING:
    from naspipe.sim.memory import MemoryConfig, MemoryReport


@dataclass
class SimResult:
    trace: Trace
    schedulers: list[StageScheduler]
    costs: CostModel
    wall_seconds: float
    decision_seconds: float
    decisions: int
    extra: dict[str, Any] = field(default_factory=dict)
    memory: MemoryReport | None = None  # set when the run modelled device memory

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
             costs: CostModel | None = None, memory: MemoryConfig | None = None) -> SimResult:
    """Run ``policy`` over ``stream`` on ``part.stages`` simulated stages and return the trace.

    ``memory``: model device memory, swapping and prefetching (off by default); see ``naspipe.sim.memory``.
    """
    if memory is not None:
        return _simulate_with_memory(space, part, stream, policy, memory, window=window, shared=shared,
                                    jitter=jitter, seed=seed, latency=latency, bandwidth=bandwidth,
                                    policy_options=policy_options, costs=costs)
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


# ---- the memory-aware run -------------------------------------------------------------------------------
_COPY = 3


class _MemoryRun:
    """One simulation with device memory: the event loop above plus copy engines, stalls, the admission
    gate and (predictive mode) per-stage forecasts that drive prefetching."""

    def __init__(self, space: SearchSpace, part: Partition, stream: SubnetStream, policy: str,
                 cfg: MemoryConfig, *, window: int, shared: SharedLayers | None, jitter: float, seed: int,
                 latency: float, bandwidth: float, policy_options: dict[str, int] | None,
                 costs: CostModel | None):
        from naspipe.sched.predictor import AccuracyMeter, Predictor
        from naspipe.sim.costs import batch_time_scale
        from naspipe.sim.memory import Footprint, Gate, StageMemory, plan_memory

        self.shared = shared = shared or SharedLayers()
        self.policy, self.cfg = policy, cfg
        P = self.P = part.stages
        opts = policy_options or {}
        self.plan = plan = plan_memory(space, part, policy, cfg, opts)
        specs = stage_specs(space, part, shared)
        private = ReplayStream.materialize(stream)
        self.subnets = [private[j] for j in range(len(private))]
        self.scheds = [make_scheduler(policy, specs[s], private, window, **opts) for s in range(P)]
        self.write_kind = self.scheds[0].write_kind
        b = plan.batch_size
        if costs is None:
            costs = CostModel(space, part, self.subnets, split_backward=self.write_kind == WEIGHT, jitter=jitter,
                              seed=seed, latency=latency, bandwidth=bandwidth, batch_size=b,
                              time_scale=batch_time_scale(b, space.batch_size, cfg.batch_alpha))
        self.costs = costs
        self.hop = costs.transfer()
        self.fp = Footprint(space, part, b)
        self.trace = Trace(P, meta={"driver": "sim", "policy": policy, "space": space.name, "stages": P,
                                    "subnets": len(self.subnets), "window": window, "shared_layers": str(shared),
                                    "jitter": jitter, "seed": seed, "batch_size": b, "swap": cfg.swap,
                                    "device_memory": list(plan.budgets), "prefetch_depth": cfg.prefetch_depth,
                                    "bandwidth_h2d": cfg.bandwidth_h2d})
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        fixed = {b for b in range(space.num_blocks) if space.blocks[b].fixed}
        trains_fixed = shared.trains_shared

        def written(k: tuple[int, int]) -> bool:
            return k[0] not in fixed or trains_fixed

        bw_d2h = cfg.bandwidth_d2h or cfg.bandwidth_h2d
        self.mems = [StageMemory(s, plan.budgets[s], cfg.swap, self.fp.key_bytes[s], cfg.bandwidth_h2d, bw_d2h,
                                 self.trace, self._scheduler_for(s), written, cfg.pin == "task",
                                 self.write_kind)
                     for s in range(P)]
        self.predictive = cfg.swap == "predictive"
        self.predictor = Predictor(costs.duration, cfg.prefetch_depth)
        self.meters = [AccuracyMeter() for _ in range(P)]
        self.predicted_next: list[Task | None] = [None] * P
        self.forecasts: list[list] = [[] for _ in range(P)]
        self.occupied: list[Task | None] = [None] * P  # chosen (stalled or computing)
        self.busy: list[Task | None] = [None] * P  # computing
        self.started = [0.0] * P
        self.expected_end = [0.0] * P
        self.headroom = cfg.headroom if cfg.swap == "predictive" else 0
        self.gates = [Gate(s, plan.budgets[s], self.fp, self.subnets, self.write_kind, cfg.swap == "resident",
                           self.headroom, cfg.pin == "task", self.scheds[s].flush_group)
                      for s in range(P)]
        self.gated_since: list[float | None] = [None] * P
        self.delivered: list[set[tuple[str, int]]] = [set() for _ in range(P)]
        self.in_flight: list[dict[tuple[str, int], float]] = [{} for _ in range(P)]
        self.decision_time = 0.0
        self.decisions = 0
        self.predict_time = 0.0
        self.kind_code = {FORWARD: 0, BACKWARD: 1, WEIGHT: 2}

    def _scheduler_for(self, s: int):  # noqa: ANN202
        def schedule(t: float, token: int) -> None:
            self._push(t, _COPY, s, token)
        return schedule

    def _push(self, t: float, etype: int, s: int, payload: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, etype, s, payload))

    # ---- forecasts ---------------------------------------------------------------------------------
    def _arrivals(self, s: int, now: float) -> list:
        from naspipe.sched.predictor import ACTIVATION, GRADIENT, Arrival

        out = [Arrival(t, kind, j) for (kind, j), t in self.in_flight[s].items()]
        seen = self.delivered[s]
        if s > 0:
            up = self.occupied[s - 1]
            if up is not None and up.kind == FORWARD and (ACTIVATION, up.subnet) not in seen:
                out.append(Arrival(self.expected_end[s - 1] + self.hop, ACTIVATION, up.subnet))
            for p in self.forecasts[s - 1]:
                if p.task.kind == FORWARD and (ACTIVATION, p.task.subnet) not in seen:
                    out.append(Arrival(max(p.end, now) + self.hop, ACTIVATION, p.task.subnet))
        if s + 1 < self.P:
            down = self.occupied[s + 1]
            if down is not None and down.kind == BACKWARD and (GRADIENT, down.subnet) not in seen:
                out.append(Arrival(self.expected_end[s + 1] + self.hop, GRADIENT, down.subnet))
            for p in self.forecasts[s + 1]:
                if p.task.kind == BACKWARD and (GRADIENT, p.task.subnet) not in seen:
                    out.append(Arrival(max(p.end, now) + self.hop, GRADIENT, p.task.subnet))
        return out

    def _refresh(self, s: int, now: float) -> bool:
        """Recompute stage ``s``'s forecast; True if its tasks changed."""
        if not self.predictive:
            return False
        t0 = time.perf_counter()
        run_end = self.expected_end[s] if self.occupied[s] is not None else None
        fc = self.predictor.forecast(self.scheds[s], now, running_end=run_end, arrivals=self._arrivals(s, now),
                                     gate=self.gates[s])
        changed = [p.task for p in fc] != [p.task for p in self.forecasts[s]]
        self.forecasts[s] = fc
        fp, subs = self.fp, self.subnets
        self.mems[s].set_forecast([(p.task, fp.keys(s, subs[p.task.subnet]), fp.act(s, subs[p.task.subnet]))
                                   for p in fc], now)
        self.predict_time += time.perf_counter() - t0
        return changed

    # ---- stages ------------------------------------------------------------------------------------
    def try_start(self, s: int, now: float) -> bool:
        if self.occupied[s] is not None:
            return False
        sched = self.scheds[s]
        gate = self.gates[s]
        t0 = time.perf_counter()
        task, refused = gated_next_task(sched, gate)  # refused: a pending W, the oldest forward, or wait
        if task is None and refused:
            if self.gated_since[s] is None:
                self.gated_since[s] = now
            return False
        self.decision_time += time.perf_counter() - t0
        self.decisions += 1
        if task is None:
            return False
        if self.gated_since[s] is not None:
            self.mems[s].stats.gate_time += now - self.gated_since[s]
            self.gated_since[s] = None
        self.meters[s].record(self.predicted_next[s], task)
        gate.start(task)
        sub = self.subnets[task.subnet]
        mem = self.mems[s]
        mem.begin(task, self.fp.keys(s, sub), self.fp.act(s, sub), now)
        self.occupied[s] = task
        missing = sum(mem.nbytes[k] for k in self.fp.keys(s, sub) if not mem.resident(k))
        self.expected_end[s] = now + missing / self.cfg.bandwidth_h2d + self.costs.duration(task)
        if self.predictive:
            self._refresh(s, now)
            self.predicted_next[s] = self.forecasts[s][0].task if self.forecasts[s] else None
            # the news travels along the pipeline: downstream stages learn of coming activations,
            # upstream ones of coming gradients; a stage whose forecast did not change stops the wave
            for step in (1, -1):
                n = s + step
                while 0 <= n < self.P and self._refresh(n, now):
                    self._progress(n, now)
                    n += step
        self._progress(s, now)
        return True

    def _progress(self, s: int, now: float) -> None:
        """Let the copy engines work and start the chosen task's compute once its candidates are in."""
        mem = self.mems[s]
        mem.service(now)
        if self.busy[s] is None and self.occupied[s] is not None and mem.ready():
            task = mem.start_compute(now)
            self.busy[s] = task
            self.started[s] = now
            end = now + self.costs.duration(task)
            self.expected_end[s] = end
            self._push(end, _FINISH, s, task.subnet * 3 + self.kind_code[task.kind])

    def _after_event(self, s: int, now: float, changed: bool = True) -> None:
        if not self.try_start(s, now) and self.occupied[s] is None and changed:
            self._refresh(s, now)  # idle, and the stage's state changed: what is expected to come?
        self._progress(s, now)

    def run(self) -> SimResult:
        from naspipe.sched.predictor import ACTIVATION, GRADIENT
        from naspipe.sim.memory import MemoryReport

        P, trace = self.P, self.trace
        t_wall = time.perf_counter()
        for s in range(P):
            self._after_event(s, 0.0)
        while self.events:
            now, _, etype, s, payload = heapq.heappop(self.events)
            sched = self.scheds[s]
            if etype == _FINISH:
                task = self.busy[s]
                assert task is not None and task.subnet * 3 + self.kind_code[task.kind] == payload
                self.busy[s] = None
                self.occupied[s] = None
                trace.add(s, task.kind, task.subnet, self.started[s], now)
                sched.on_finish(task)
                self.gates[s].finish(task)
                sub = self.subnets[task.subnet]
                self.mems[s].finish(task, self.fp.keys(s, sub), task.kind == self.write_kind, now)
                if task.kind == FORWARD and s + 1 < P:
                    self.in_flight[s + 1][(ACTIVATION, task.subnet)] = now + self.hop
                    self._push(now + self.hop, _ACT, s + 1, task.subnet)
                elif task.kind == BACKWARD and s > 0:
                    self.in_flight[s - 1][(GRADIENT, task.subnet)] = now + self.hop
                    self._push(now + self.hop, _GRAD, s - 1, task.subnet)
            elif etype == _ACT:
                self.in_flight[s].pop((ACTIVATION, payload), None)
                self.delivered[s].add((ACTIVATION, payload))
                sched.on_activation(payload)
            elif etype == _GRAD:
                self.in_flight[s].pop((GRADIENT, payload), None)
                self.delivered[s].add((GRADIENT, payload))
                sched.on_gradient(payload)
            else:
                self.mems[s].copy_done(payload, now)
            self._after_event(s, now, etype != _COPY)
        wall = time.perf_counter() - t_wall
        stuck = [s for s in range(P) if not self.scheds[s].finished]
        if stuck:
            detail = "; ".join(f"stage {s}: oldest unfinished subnet {self.scheds[s].lo}, device "
                               f"{self.mems[s].used} of {self.mems[s].budget} bytes used" for s in stuck)
            raise DeadlockError(f"policy {self.policy!r} deadlocked with swap {self.cfg.swap!r}: {detail}")
        result = SimResult(trace, self.scheds, self.costs, wall, self.decision_time, self.decisions)
        acc = None
        cov = None
        if self.predictive:
            from naspipe.sched.predictor import AccuracyMeter

            total = AccuracyMeter()
            for m in self.meters:
                total.merge(m)
            acc, cov = total.rate, total.coverage
        result.memory = MemoryReport(
            self.cfg.swap, self.plan.budgets, self.plan.batch_size, [m.stats for m in self.mems], trace.makespan,
            acc, cov, extra={"prefetch_depth": self.cfg.prefetch_depth, "batch_note": self.plan.note,
                             "predict_seconds": self.predict_time})
        result.extra["memory"] = result.memory.summary()
        result.extra["evictions"] = [m.evicted for m in self.mems]  # (decided, freed, candidate) per stage
        return result


def _simulate_with_memory(space: SearchSpace, part: Partition, stream: SubnetStream, policy: str,
                          memory: MemoryConfig, **kw: Any) -> SimResult:
    return _MemoryRun(space, part, stream, policy, memory, **kw).run()
