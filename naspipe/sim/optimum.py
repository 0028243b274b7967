"""The exact scheduling problem behind every CSP order, to measure how far an order is from the optimum.

A ``Problem`` holds one task per ``F(j,s)``/``B(j,s)`` (and ``W(j,s)`` with a split backward) with the
simulator's own durations, one machine per stage, and the precedences every causal schedule obeys: the
data edges (``F(j,s-1) -> F(j,s)``, ``F(j,P-1) -> B(j,P-1)``, ``B(j,s+1) -> B(j,s)``, ``B(j,s) -> W(j,s)``,
inter-stage edges costing one message ``hop``) and the causal edges of the CSP rule (the write of the
previous subnet that selected the same candidate on that stage ``-> F(j,s)``; trained shared layers under
``delayed:D`` add every write ``i <= j-D-1`` on a stage with fixed blocks). The scheduler's window is not
part of it: the optimum may look arbitrarily far ahead.

``feasibility_violations`` checks a simulated trace against the problem (so every schedule naspipe
produces is a point of it), and ``solve`` hands the problem to OR-Tools CP-SAT (a dev dependency, imported
only there) with integer durations rounded *down*: its proven bound is then a bound of the real problem,
and its best schedule, replayed in its per-stage order with the real durations, an achievable makespan.
The model carries redundant facts CP-SAT does not derive by itself, each implied by the problem: every task's
*head* (longest path of work and lags before it) bounds its start, its *tail* (longest path after it) ties
it to the makespan (``makespan >= end + tail``), and the makespan starts at the best of the critical path
and every stage's ``earliest head + its load + shortest tail`` (the bound ``naspipe.sim.bound`` proves too).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.sched.trace import Trace
from naspipe.sim.bound import causal_writers
from naspipe.spaces.partition import Partition
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, Subnet

EPS = 1e-9


@dataclass
class Problem:
    stages: int
    tasks: list[Task]
    durations: list[float]
    edges: list[tuple[int, int, float]]  # (before, after, lag): start[after] >= end[before] + lag
    index: dict[Task, int] = field(default_factory=dict)

    @property
    def stage_tasks(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.stages)]
        for i, t in enumerate(self.tasks):
            out[t.stage].append(i)
        return out


def build_problem(space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
                  duration: Callable[[Task], float], *, shared: SharedLayers | None = None,
                  split_backward: bool = False, hop: float = 0.0) -> Problem:
    """The exact problem for ``subnets`` on ``part`` with the given durations."""
    P = part.stages
    edges = causal_writers(space, part, subnets, shared)  # the causal edges bound.py and viz.dag use too
    pb = Problem(P, [], [], [])

    def new(task: Task) -> int:
        pb.index[task] = len(pb.tasks)
        pb.tasks.append(task)
        pb.durations.append(float(duration(task)))
        return len(pb.tasks) - 1

    writes: list[dict[int, int]] = [{} for _ in range(P)]  # subnet -> its write task, per stage
    for j, _sub in enumerate(subnets):
        prev = -1
        for s in range(P):
            f = new(Task(FORWARD, j, s))
            if prev >= 0:
                pb.edges.append((prev, f, hop))
            _, _, writers = next(edges)
            pb.edges.extend((writes[s][i], f, 0.0) for i in writers)
            prev = f
        for s in range(P - 1, -1, -1):
            b = new(Task(BACKWARD, j, s))
            pb.edges.append((prev, b, 0.0 if s == P - 1 else hop))
            write = b
            if split_backward:
                write = new(Task(WEIGHT, j, s))
                pb.edges.append((b, write, 0.0))
            writes[s][j] = write
            prev = b
    return pb


def problem_for_result(result: Any, space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
                       shared: SharedLayers | None = None) -> Problem:
    """The problem a simulated run (``naspipe.sim.SimResult``) solved: its durations, hop and split."""
    split = result.schedulers[0].write_kind == WEIGHT
    return build_problem(space, part, subnets, result.costs.duration, shared=shared, split_backward=split,
                         hop=result.costs.transfer())


def feasibility_violations(pb: Problem, trace: Trace, tol: float = 1e-6) -> list[str]:
    """Every way ``trace`` breaks the problem (empty: a feasible schedule): missing or repeated tasks, wrong
    durations, two tasks at once on a stage, a precedence started too early."""
    out: list[str] = []
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    per_stage: list[list[tuple[float, float, str]]] = [[] for _ in range(pb.stages)]
    for e in trace.compute_events():
        i = pb.index.get(Task(e.kind, e.subnet, e.stage))
        if i is None:
            out.append(f"{e.kind}({e.subnet},{e.stage}) is not a task of the problem")
            continue
        if i in start:
            out.append(f"{pb.tasks[i]} runs twice")
        start[i], end[i] = e.start, e.end
        scale = max(1.0, abs(pb.durations[i]))
        if abs((e.end - e.start) - pb.durations[i]) > tol * scale:
            out.append(f"{pb.tasks[i]} took {e.end - e.start}, not {pb.durations[i]}")
        per_stage[e.stage].append((e.start, e.end, str(pb.tasks[i])))
    out += [f"{pb.tasks[i]} never ran" for i in range(len(pb.tasks)) if i not in start]
    for evs in per_stage:
        evs.sort()
        for (_, e1, n1), (s2, _, n2) in zip(evs, evs[1:], strict=False):
            if s2 < e1 - tol * max(1.0, abs(e1)):
                out.append(f"{n1} and {n2} overlap")
    for a, b, lag in pb.edges:
        if a in end and b in start and start[b] < end[a] + lag - tol * max(1.0, abs(end[a])):
            out.append(f"{pb.tasks[b]} starts at {start[b]}, before {pb.tasks[a]} ends (+{lag}) at {end[a] + lag}")
    return out


def replay(pb: Problem, order: Sequence[Sequence[int]]) -> tuple[float, list[float]]:
    """Earliest starts when each stage runs its tasks in ``order[s]`` (task indices): (makespan, starts).
    Raises ValueError if the orders contradict the precedences (a cycle)."""
    n = len(pb.tasks)
    preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for a, b, lag in pb.edges:
        preds[b].append((a, lag))
    for seq in order:
        for a, b in zip(seq, seq[1:], strict=False):
            preds[b].append((a, 0.0))
    indeg = [len(p) for p in preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for b, ps in enumerate(preds):
        for a, _ in ps:
            succ[a].append(b)
    stack = [i for i in range(n) if indeg[i] == 0]
    start = [0.0] * n
    done = 0
    while stack:
        i = stack.pop()
        done += 1
        start[i] = max((start[a] + pb.durations[a] + lag for a, lag in preds[i]), default=0.0)
        for b in succ[i]:
            indeg[b] -= 1
            if indeg[b] == 0:
                stack.append(b)
    if done != n:
        raise ValueError("the stage orders contradict the precedences")
    return max((start[i] + pb.durations[i] for i in range(n)), default=0.0), start


def heads_tails(n: int, dur: Sequence[int], edges: Sequence[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """Per task: its head (the longest path of durations and lags that must precede its start) and its tail
    (the longest path that must follow its end), over the precedence ``edges`` ``(before, after, lag)``."""
    succ: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b, lag in edges:
        succ[a].append((b, lag))
        indeg[b] += 1
    order = [i for i in range(n) if indeg[i] == 0]
    for i in order:  # grows while it is walked: a topological order (the edges form a DAG)
        for b, _ in succ[i]:
            indeg[b] -= 1
            if indeg[b] == 0:
                order.append(b)
    if len(order) != n:
        raise ValueError("the precedences contain a cycle")
    head, tail = [0] * n, [0] * n
    for i in order:
        for b, lag in succ[i]:
            head[b] = max(head[b], head[i] + dur[i] + lag)
    for i in reversed(order):
        for b, lag in succ[i]:
            tail[i] = max(tail[i], lag + dur[b] + tail[b])
    return head, tail


@dataclass(frozen=True)
class Solution:
    makespan: float  # an achievable makespan (the best schedule found, replayed with the real durations)
    bound: float  # no schedule finishes earlier (CP-SAT's proven bound, on durations rounded down)
    optimal: bool  # CP-SAT proved its schedule optimal (on the rounded durations)
    seconds: float
    status: str
    starts: tuple[float, ...] = ()  # start of each task in the best schedule (empty if none was found)

    @property
    def gap(self) -> float:
        """Proven relative gap ``makespan / bound - 1`` (0 when the bound meets the schedule)."""
        return self.makespan / self.bound - 1.0 if self.bound > 0 else 0.0


def solve(pb: Problem, *, hints: Sequence[Trace] = (), time_limit: float = 10.0, workers: int = 1,
          resolution: float = 10000.0, gap: float = 0.0) -> Solution:
    """Minimise the makespan of ``pb`` with CP-SAT, warm-started from the best of ``hints`` (feasible traces).

    Durations and lags are scaled so the shortest positive one becomes ``resolution`` units and rounded down.
    ``workers``: CP-SAT's parallel portfolio. With 2 or more, one worker runs its neighbourhood searches
    (they improve the warm start far faster than a single worker's search) and the first full worker searches
    for the lower bound (``objective_lb_search``; the default LP search seldom lifts it above the stage
    bound on these instances). On naspipe-k96, 30 subnets, 4 stages, 60 s, 2 workers it proves five of seeds
    0-5 (in 3-45 s under load, ``benchmarks/results/optimality.json``) and brackets seed 2 within 0.9-1.3%;
    the default portfolio bracketed seed 2 within 1.9-2.0% only, one worker within 4%. ``gap``: stop once the
    best schedule is proven within this relative gap of the bound (0: until optimal or ``time_limit``).
    """
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    positive = [d for d in pb.durations if d > 0] + [lag for _, _, lag in pb.edges if lag > 0]
    scale = resolution / min(positive) if positive else 1.0
    dur = [math.floor(d * scale + EPS) for d in pb.durations]
    best_hint: tuple[float, Trace] | None = None
    for tr in hints:
        if not feasibility_violations(pb, tr) and (best_hint is None or tr.makespan < best_hint[0]):
            best_hint = (tr.makespan, tr)
    horizon = (math.ceil(best_hint[0] * scale) if best_hint else
               sum(dur) + sum(math.ceil(lag * scale) for _, _, lag in pb.edges)) + 1
    n = len(pb.tasks)
    edges = [(a, b, math.floor(lag * scale + EPS)) for a, b, lag in pb.edges]
    head, tail = heads_tails(n, dur, edges)
    floor = max([head[i] + dur[i] + tail[i] for i in range(n)]
                + [min(head[i] for i in ts) + sum(dur[i] for i in ts) + min(tail[i] for i in ts)
                   for ts in pb.stage_tasks if ts])
    horizon = max(horizon, floor)
    m = cp_model.CpModel()
    starts = [m.NewIntVar(head[i], horizon - dur[i] - tail[i], f"s{i}") for i in range(n)]
    ivs = [m.NewFixedSizeIntervalVar(starts[i], dur[i], f"i{i}") for i in range(n)]
    for a, b, lag in edges:
        m.Add(starts[b] >= starts[a] + dur[a] + lag)
    for tasks in pb.stage_tasks:
        m.AddNoOverlap([ivs[i] for i in tasks])
    mk = m.NewIntVar(floor, horizon, "makespan")
    for i in range(n):
        m.Add(mk >= starts[i] + dur[i] + tail[i])
    m.Minimize(mk)
    if best_hint is not None:
        at = {Task(e.kind, e.subnet, e.stage): e.start for e in best_hint[1].compute_events()}
        for i, t in enumerate(pb.tasks):
            m.AddHint(starts[i], math.floor(at[t] * scale + EPS))
        m.AddHint(mk, horizon - 1)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = workers
    if workers >= 2:
        solver.parameters.subsolvers.extend(["objective_lb_search", "default_lp"][:workers - 1])
    solver.parameters.relative_gap_limit = gap
    status = solver.Solve(m)
    name = solver.StatusName(status)
    bound = solver.BestObjectiveBound() / scale if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0.0
    makespan, at = math.inf, ()
    if best_hint is not None:
        hint = {Task(e.kind, e.subnet, e.stage): e.start for e in best_hint[1].compute_events()}
        makespan, at = best_hint[0], tuple(hint[t] for t in pb.tasks)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        order = [sorted(tasks, key=lambda i: (solver.Value(starts[i]), i)) for tasks in pb.stage_tasks]
        try:
            found, real = replay(pb, order)
            if found < makespan:
                makespan, at = found, tuple(real)
        except ValueError:  # ties between zero-length tasks ordered against an edge: keep the hint
            pass
    # a stop at the gap limit reports OPTIMAL too: proven only where the bound meets the schedule
    proven = status == cp_model.OPTIMAL and solver.BestObjectiveBound() >= solver.ObjectiveValue()
    return Solution(makespan, min(bound, makespan), proven, time.perf_counter() - t0, name, at)
