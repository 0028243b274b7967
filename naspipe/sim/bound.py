"""Lower bounds on a CSP makespan for a given subnet sequence, and the efficiency against them.

No schedule that respects the data and causal dependencies can finish before
``max(per-stage work, causal critical path)`` (``Bound.lower_bound``, the bound of the issue tracker).
The critical path runs through data edges (``F(j,s-1) -> F(j,s)``, ``F(j,P-1) -> B(j,P-1)``,
``B(j,s+1) -> B(j,s)``, ``B(j,s) -> W(j,s)``, each inter-stage edge costing one message ``hop``) and
causal edges (the write of the previous subnet that selected the same candidate -> ``F(j,s)``; for trained
shared layers under ``delayed:D``, every write ``i <= j-D-1`` on a stage with fixed blocks). The order
"subnet by subnet; forwards down, backwards up, then weight tasks" is topological, so one pass computes
every task's earliest start (its *head*) and a reverse pass its *tail* (the longest path after it ends).

``Bound.tight_bound`` is the one-machine relaxation with heads and tails: on each stage, the tasks whose
head is at least ``t`` all run after ``t`` on that stage, one at a time, and the last of them still has its
tail to go, so ``makespan >= t + sum(durations) + min(tails)`` for every ``t``. It captures how the
critical path and the per-stage work interact, where the plain maximum of the two is loose.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.spaces.partition import Partition
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, Subnet


def causal_writers(space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
                   shared: SharedLayers | None = None) -> Iterator[tuple[int, int, list[int]]]:
    """The causal edges of a subnet sequence, the one definition ``lower_bound`` and ``naspipe.viz.dag`` share.

    Yields ``(j, s, writers)`` for every forward ``F(j,s)`` (``j`` ascending, then ``s``): the earlier subnets
    ``i`` (ascending) whose write on stage ``s`` ``F(j,s)`` must wait for: the last subnet that selected each
    candidate ``j`` selects there, and for trained shared layers (``serial`` / ``delayed:D``) on a stage with
    fixed blocks every ``i <= j-D-1`` (those after the last ``D+1`` are implied, so ``i >= j-2D-1`` suffices).
    """
    shared = shared or SharedLayers()
    P = part.stages
    choice = [[b for b in part.blocks(s) if not space.blocks[b].fixed] for s in range(P)]
    gated = [shared.gate is not None and any(space.blocks[b].fixed for b in part.blocks(s)) for s in range(P)]
    d = shared.gate or 0
    last_writer: list[dict[tuple[int, int], int]] = [{} for _ in range(P)]
    for j, sub in enumerate(subnets):
        for s in range(P):
            writers = {last_writer[s][(b, sub[b])] for b in choice[s] if (b, sub[b]) in last_writer[s]}
            if gated[s]:
                writers.update(range(max(0, j - 2 * d - 1), j - d))
            yield j, s, sorted(writers)
        for s in range(P):
            for b in choice[s]:
                last_writer[s][(b, sub[b])] = j


@dataclass(frozen=True)
class Bound:
    stage_work: tuple[float, ...]
    critical_path: float
    stage_bound: float  # max over stages of the head-body-tail bound

    @property
    def lower_bound(self) -> float:
        return max(max(self.stage_work), self.critical_path)

    @property
    def tight_bound(self) -> float:
        return max(self.stage_bound, self.lower_bound)


def result_bound(result: Any, space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
                 shared: SharedLayers | None = None) -> Bound:
    """The bound matching a simulated run (``naspipe.sim.SimResult``): its durations and message hop, split
    when its policy splits the backward (the scheduler writes at ``W``)."""
    split = result.schedulers[0].write_kind == WEIGHT
    return lower_bound(space, part, subnets, result.costs.duration, shared=shared, split_backward=split,
                       hop=result.costs.transfer())


def lower_bound(space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
                duration: Callable[[Task], float], *, shared: SharedLayers | None = None,
                split_backward: bool = False, hop: float = 0.0, causal: bool = True) -> Bound:
    """Bounds for ``subnets`` on ``part``; ``causal=False`` drops causal edges (for bsp/asp)."""
    P = part.stages
    edges = causal_writers(space, part, subnets, shared) if causal else None

    # tasks are indices; per task: stage, duration, earliest end, successors (task, edge weight)
    stage_of: list[int] = []
    dur: list[float] = []
    end: list[float] = []
    succ: list[list[tuple[int, float]]] = []

    def new(s: int, p: float, ready: float) -> int:
        stage_of.append(s)
        dur.append(p)
        end.append(ready + p)
        succ.append([])
        return len(dur) - 1

    writes: list[dict[int, int]] = [{} for _ in range(P)]  # subnet -> its write task index, per stage
    for j, _sub in enumerate(subnets):
        prev = -1
        for s in range(P):
            preds: list[tuple[int, float]] = []
            if prev >= 0:
                preds.append((prev, hop))
            if edges is not None:
                _, _, writers = next(edges)
                preds += [(writes[s][i], 0.0) for i in writers]
            ready = max((end[t] + w for t, w in preds), default=0.0)
            prev = new(s, duration(Task(FORWARD, j, s)), ready)
            for t, w in preds:
                succ[t].append((prev, w))
        for s in range(P - 1, -1, -1):
            w_hop = 0.0 if s == P - 1 else hop
            b = new(s, duration(Task(BACKWARD, j, s)), end[prev] + w_hop)
            succ[prev].append((b, w_hop))
            write = b
            if split_backward:
                write = new(s, duration(Task(WEIGHT, j, s)), end[b])
                succ[b].append((write, 0.0))
            writes[s][j] = write
            prev = b
    n = len(dur)
    work = [0.0] * P
    for t in range(n):
        work[stage_of[t]] += dur[t]
    cp = max(end, default=0.0)
    # tails, in reverse topological order
    tail = [0.0] * n
    for t in range(n - 1, -1, -1):
        best = 0.0
        for u, w in succ[t]:
            v = w + dur[u] + tail[u]
            if v > best:
                best = v
        tail[t] = best
    per_stage: list[list[int]] = [[] for _ in range(P)]
    for t in range(n):
        per_stage[stage_of[t]].append(t)
    stage_bound = 0.0
    for tasks in per_stage:
        tasks.sort(key=lambda t: end[t] - dur[t], reverse=True)
        body = 0.0
        min_tail = float("inf")
        for t in tasks:
            body += dur[t]
            min_tail = min(min_tail, tail[t])
            stage_bound = max(stage_bound, end[t] - dur[t] + body + min_tail)
    return Bound(tuple(work), cp, stage_bound)
