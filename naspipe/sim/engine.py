"""Discrete-event simulation of a pipeline: one resource per stage, the real scheduler objects.

Events are task completions and message arrivals, ordered by (time, insertion order), so a run is fully
deterministic. After every event, the idle stage it concerns asks its scheduler for the next task. If
the event queue drains while a stage still has work, the schedule deadlocked: ``DeadlockError`` says
which stages and what they were waiting for.

With ``memory=MemoryConfig(...)`` the run also models each stage's device memory (``naspipe.sim.memory``):
copy-engine events join the queue, a chosen task may stall until its candidates are loaded, forwards
pass the admission gate, and in ``predictive`` mode the predictor (``naspipe.sched.predictor``) forecasts
every stage's next tasks to drive prefetching. Without it the run is exactly the memory-free one. Both runs
share one event loop (``_Run._loop``); the memory-aware run adds its behaviour through the loop's hooks.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import numbers
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import StageScheduler, make_scheduler, stage_specs
from naspipe.sched.speculate import gated_next_task
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.sched.trace import Trace
from naspipe.sequences.sequence import ReplayStream
from naspipe.sim.costs import CostModel
from naspipe.sim.plan_choice import PLAN_BUDGET, PLANNED, PlanChoice, eps_of, needs_plan, plan_tries, planned_policy
from naspipe.spaces.shared import SharedLayers


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
_START = -1  # the first call of each stage's ``_after``, before any event


@dataclass(frozen=True)
class SimOptions:
    """How a run is simulated, beyond what the run is (``naspipe.runspec.spec.RunSpec``): seeded duration
    ``jitter`` (a fraction), a message ``latency`` (seconds) and link ``bandwidth`` (bytes/s), the scheduler
    ``policy_options`` (``micro_batches``, ``max_pending_w``, ...), a ``costs`` model to use instead of the
    space's (a measured trace, replicas), and ``memory`` (device memory, swapping and prefetching; off by
    default, see ``naspipe.sim.memory``)."""

    jitter: float = 0.0
    latency: float = 0.0
    bandwidth: float = math.inf
    policy_options: Mapping[str, Any] | None = None
    costs: CostModel | None = None
    memory: MemoryConfig | None = None

    def __post_init__(self) -> None:  # (NaN or a negative latency gave a NaN or wrong makespan, no error)
        check_link_numbers(latency=self.latency, bandwidth=self.bandwidth)
        if not _real(self.jitter) or not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must lie in [0, 1), got {self.jitter!r}")


def _real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and not math.isnan(x)


def check_link_numbers(*, latency: Any, bandwidth: Any) -> None:
    """ValueError (one line) for a message latency that is not a finite number >= 0 (seconds) or a bandwidth that
    is not a number > 0 (bytes/s; ``math.inf``: unlimited)."""
    if not _real(latency) or not 0 <= latency < math.inf:
        raise ValueError(f"latency must be a finite number of seconds >= 0, got {latency!r}")
    if not _real(bandwidth) or not bandwidth > 0:
        raise ValueError(f"bandwidth must be a number of bytes/s > 0 (math.inf: unlimited), got {bandwidth!r}")


def simulate(run: RunSpec, options: SimOptions | None = None) -> SimResult:
    """Run ``run.policy`` over ``run.stream`` on ``run.partition.stages`` simulated stages; return the trace.

    ``run``: what runs (``RunSpec.create`` resolves and validates the forms people type; ``RunSpec.of`` takes
    parts already built). ``options``: how it is simulated (``SimOptions``). ``csp-plan`` (the default)
    without a plan first chooses one (``choose_plan``: a fixed number of plans simulated memory-free: a
    memory-aware run costs tens of times more) and returns the chosen plan's run (``extra["plan"]`` says
    which).
    """
    opts = options or SimOptions()
    if needs_plan(run.policy, opts.policy_options):
        choice = choose_plan(run, dataclasses.replace(opts, memory=None))
        if opts.memory is None:
            return choice.result
        result = _MemoryRun(dataclasses.replace(run, policy=choice.policy), opts, opts.memory).run()
        result.extra["plan"] = choice.summary()
        return result
    if opts.memory is not None:
        return _MemoryRun(run, opts, opts.memory).run()
    return _Run(run, opts).run()


def choose_plan(run: RunSpec, options: SimOptions | None = None, *, budget: int = PLAN_BUDGET,
                tries: int | None = None) -> PlanChoice:
    """Simulate ``csp-plan`` plans ``0 .. tries-1`` (default ``plan_tries(run.subnets, budget)``) of ``run``
    with ``options`` and return the plan with the shortest makespan, the lowest plan on ties. ``run.policy``
    may carry ``eps`` (``csp-plan:eps=0.1``); any other policy is planned as plain ``csp-plan``."""
    opts = options or SimOptions()
    policy = run.policy if needs_plan(run.policy, opts.policy_options) else PLANNED
    eps = eps_of(policy, opts.policy_options)
    kept = {k: v for k, v in (opts.policy_options or {}).items() if k not in ("plan", "eps")}
    opts = dataclasses.replace(opts, policy_options=kept or None)
    private = ReplayStream.materialize(run.stream)
    n = plan_tries(len(private), budget) if tries is None else max(1, tries)
    best: PlanChoice | None = None
    for plan in range(n):
        r = simulate(dataclasses.replace(run, stream=private, policy=planned_policy(plan, eps)), opts)
        if opts.costs is None and opts.memory is None:
            opts = dataclasses.replace(opts, costs=r.costs)  # the same durations for every plan; built once
        if best is None:
            best = PlanChoice(plan, eps, r.makespan, r.makespan, n, r)
        elif r.makespan < best.makespan:
            best.plan, best.makespan, best.result = plan, r.makespan, r
    assert best is not None
    best.result.extra["plan"] = best.summary()
    return best


_REMEMBERED: dict[str, str] = {}  # a digest of what a plan choice reads -> the policy it chose (newest last)
_REMEMBERED_LOCK = threading.Lock()  # (a notebook's threads may prepare runs at once)
REMEMBERED_MAX = 256


def remembered_plan(run: RunSpec) -> str:
    """``choose_plan(run).policy`` (default options), simulated once per process for each cost model (the run's
    space and its sequence's), partition, sequence, policy (and the scheduler class registered as ``csp-plan``),
    window, shared layers and plan count: a notebook or a script that prepares one run again reads the choice
    instead of simulating up to ``MAX_PLANS`` plans again. The choice depends on nothing else (no clock, no
    randomness), so reading it gives what simulating gives."""
    import hashlib

    from naspipe.sched.registry import get_policy

    stream = ReplayStream.materialize(run.stream)
    planner = get_policy(PLANNED).scheduler
    spaces = [run.space.to_json()] + ([] if stream.space is run.space else [stream.space.to_json()])
    what = (spaces, run.partition.bounds, [list(stream[j]) for j in range(len(stream))], run.policy,
            (planner.__module__, planner.__qualname__, id(planner)), run.window, repr(run.shared), run.seed,
            run.replicas, run.replica_exchange, plan_tries(len(stream)))
    key = hashlib.sha256(repr(what).encode()).hexdigest()
    with _REMEMBERED_LOCK:
        policy = _REMEMBERED.pop(key, None)
    if policy is None:
        policy = choose_plan(dataclasses.replace(run, stream=stream)).policy
    with _REMEMBERED_LOCK:
        _REMEMBERED[key] = policy
        while len(_REMEMBERED) > REMEMBERED_MAX:
            del _REMEMBERED[next(iter(_REMEMBERED))]
    return policy


class _Run:
    """One simulation: the event loop (the only one) and the memory-free stage behaviour.

    ``_MemoryRun`` overrides the hooks (``_finished``, ``_send``, ``_delivered``, ``_other``, ``_after``) to add
    copy engines, stalls, the admission gate and forecasts; the loop itself is shared."""

    def __init__(self, run: RunSpec, opts: SimOptions):
        space, part, stream, policy = run.space, run.partition, run.stream, run.policy
        window, seed = run.window, run.seed
        jitter, latency, bandwidth, costs = opts.jitter, opts.latency, opts.bandwidth, opts.costs
        policy_options = opts.policy_options
        self.shared = shared = run.shared or SharedLayers()
        self.policy = policy
        P = self.P = part.stages
        specs = stage_specs(space, part, shared)
        # every stage reads its own view of the sequence, as separate processes would
        private = ReplayStream.materialize(stream)
        self.subnets = [private[j] for j in range(len(private))]
        self.scheds = [make_scheduler(policy, specs[s], private, window, **(policy_options or {}))
                       for s in range(P)]
        self.write_kind = self.scheds[0].write_kind
        if costs is None:
            costs = CostModel(space, part, self.subnets, split_backward=self.write_kind == WEIGHT, jitter=jitter,
                              seed=seed, latency=latency, bandwidth=bandwidth)
        self.costs = costs
        self.hop = costs.transfer()
        self.trace = Trace(P, meta={"driver": "sim", "policy": policy, "space": space.name, "stages": P,
                                    "subnets": len(self.subnets), "window": window, "shared_layers": str(shared),
                                    "jitter": jitter, "seed": seed, "batch_size": costs.batch_size})
        self._init_loop()

    def _init_loop(self) -> None:
        P = self.P
        self.events: list[tuple[float, int, int, int, int]] = []  # (time, seq, type, stage, subnet/kind code)
        self.seq = 0
        self.busy: list[Task | None] = [None] * P  # computing
        self.started = [0.0] * P
        self.decision_time = 0.0
        self.decisions = 0
        self.kind_code = {FORWARD: 0, BACKWARD: 1, WEIGHT: 2}

    def _push(self, t: float, etype: int, s: int, payload: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, etype, s, payload))

    # ---- hooks (the memory-free behaviour) -----------------------------------------------------------
    def _after(self, s: int, now: float, etype: int) -> None:
        """After an event on stage ``s`` (and once at the start): an idle stage asks its scheduler."""
        if self.busy[s] is not None:
            return
        t0 = time.perf_counter()
        task = self.scheds[s].next_task()
        self.decision_time += time.perf_counter() - t0
        self.decisions += 1
        if task is None:
            return
        self.busy[s] = task
        self.started[s] = now
        self._push(now + self.costs.duration(task), _FINISH, s, task.subnet * 3 + self.kind_code[task.kind])

    def _finished(self, s: int, task: Task, now: float) -> None:
        """Bookkeeping of a finished task beyond the scheduler's (none without memory)."""

    def _send(self, t: float, etype: int, s: int, j: int) -> None:
        self._push(t, etype, s, j)

    def _delivered(self, s: int, etype: int, j: int) -> None:
        """A message arrived (before the scheduler hears of it)."""

    def _other(self, s: int, etype: int, payload: int, now: float) -> None:
        raise AssertionError(f"unknown event type {etype}")

    def _stuck(self, stuck: list[int]) -> str:
        detail = "; ".join(f"stage {s}: oldest unfinished subnet {self.scheds[s].lo}" for s in stuck)
        return f"policy {self.policy!r} deadlocked: {detail}"

    # ---- the event loop ------------------------------------------------------------------------------
    def _loop(self) -> float:
        """Drain the event queue; returns the wall time it took. DeadlockError if a stage is left with work."""
        P, trace, scheds, busy, hop = self.P, self.trace, self.scheds, self.busy, self.hop
        started, kind_code, pop = self.started, self.kind_code, heapq.heappop
        after, finished, send, delivered = self._after, self._finished, self._send, self._delivered
        plain = type(self)._delivered is _Run._delivered  # the memory-free run has nothing to record
        t_wall = time.perf_counter()
        for s in range(P):
            after(s, 0.0, _START)
        events = self.events
        while events:
            now, _, etype, s, payload = pop(events)
            sched = scheds[s]
            if etype == _FINISH:
                task = busy[s]
                assert task is not None and task.subnet * 3 + kind_code[task.kind] == payload
                busy[s] = None
                trace.add(s, task.kind, task.subnet, started[s], now)
                sched.on_finish(task)
                finished(s, task, now)
                if task.kind == FORWARD and s + 1 < P:
                    send(now + hop, _ACT, s + 1, task.subnet)
                elif task.kind == BACKWARD and s > 0:
                    send(now + hop, _GRAD, s - 1, task.subnet)
            elif etype == _ACT:
                if not plain:
                    delivered(s, etype, payload)
                sched.on_activation(payload)
            elif etype == _GRAD:
                if not plain:
                    delivered(s, etype, payload)
                sched.on_gradient(payload)
            else:
                self._other(s, etype, payload, now)
            after(s, now, etype)
        wall = time.perf_counter() - t_wall
        stuck = [s for s in range(P) if not scheds[s].finished]
        if stuck:
            raise DeadlockError(self._stuck(stuck))
        return wall

    def run(self) -> SimResult:
        wall = self._loop()
        return SimResult(self.trace, self.scheds, self.costs, wall, self.decision_time, self.decisions)


# ---- the memory-aware run -------------------------------------------------------------------------------
_COPY = 3


class _MemoryRun(_Run):
    """One simulation with device memory: the event loop of ``_Run`` plus copy engines, stalls, the admission
    gate and (predictive mode) per-stage forecasts that drive prefetching (through the loop's hooks)."""

    def __init__(self, run: RunSpec, opts: SimOptions, cfg: MemoryConfig):
        space, part, stream, policy = run.space, run.partition, run.stream, run.policy
        window, seed = run.window, run.seed
        jitter, latency, bandwidth, costs = opts.jitter, opts.latency, opts.bandwidth, opts.costs
        shared, policy_options = run.shared, opts.policy_options
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

    # ---- the loop's hooks --------------------------------------------------------------------------
    def _after(self, s: int, now: float, etype: int) -> None:
        self._after_event(s, now, etype != _COPY)

    def _finished(self, s: int, task: Task, now: float) -> None:
        self.occupied[s] = None
        self.gates[s].finish(task)
        self.mems[s].finish(task, self.fp.keys(s, self.subnets[task.subnet]), task.kind == self.write_kind, now)

    def _send(self, t: float, etype: int, s: int, j: int) -> None:
        from naspipe.sched.predictor import ACTIVATION, GRADIENT

        self.in_flight[s][(ACTIVATION if etype == _ACT else GRADIENT, j)] = t
        self._push(t, etype, s, j)

    def _delivered(self, s: int, etype: int, j: int) -> None:
        from naspipe.sched.predictor import ACTIVATION, GRADIENT

        key = (ACTIVATION if etype == _ACT else GRADIENT, j)
        self.in_flight[s].pop(key, None)
        self.delivered[s].add(key)

    def _other(self, s: int, etype: int, payload: int, now: float) -> None:
        self.mems[s].copy_done(payload, now)

    def _stuck(self, stuck: list[int]) -> str:
        detail = "; ".join(f"stage {s}: oldest unfinished subnet {self.scheds[s].lo}, device "
                           f"{self.mems[s].used} of {self.mems[s].budget} bytes used" for s in stuck)
        return f"policy {self.policy!r} deadlocked with swap {self.cfg.swap!r}: {detail}"

    def run(self) -> SimResult:
        from naspipe.sim.memory import MemoryReport

        wall = self._loop()
        trace = self.trace
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
