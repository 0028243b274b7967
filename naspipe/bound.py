"""The lower bound on a CSP makespan for a given subnet sequence, and the efficiency against it.

No schedule that respects the data and causal dependencies can finish before
``max(per-stage work, causal critical path)``. The critical path runs through data edges
(``F(j,s-1) -> F(j,s)``, ``F(j,P-1) -> B(j,P-1)``, ``B(j,s+1) -> B(j,s)``, ``B(j,s) -> W(j,s)``) and causal
edges (the write of the previous subnet that selected the same candidate -> ``F(j,s)``; for trained
shared layers under ``delayed:D``, every write ``i <= j-D-1`` on a stage with fixed blocks). The order
"subnet by subnet; forwards down, backwards up" is topological, so one pass computes it.

``stage_bound`` tightens the per-stage term: stage ``s`` cannot start before some subnet's forwards on
stages ``< s`` finished, and (unsplit) its last backward still has to travel back to stage 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from naspipe.partition import Partition
from naspipe.sched.shared import SharedLayers
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.space import SearchSpace, Subnet


@dataclass(frozen=True)
class Bound:
    stage_work: tuple[float, ...]
    critical_path: float
    stage_bound: float  # per-stage work with unavoidable head and tail

    @property
    def lower_bound(self) -> float:
        return max(max(self.stage_work), self.critical_path)

    @property
    def tight_bound(self) -> float:
        return max(self.stage_bound, self.critical_path)


def lower_bound(space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
                duration: Callable[[Task], float], *, shared: SharedLayers | None = None,
                split_backward: bool = False, hop: float = 0.0) -> Bound:
    shared = shared or SharedLayers()
    P = part.stages
    write = WEIGHT if split_backward else BACKWARD
    choice = [[b for b in part.blocks(s) if not space.blocks[b].fixed] for s in range(P)]
    gated = [shared.gate is not None and any(space.blocks[b].fixed for b in part.blocks(s)) for s in range(P)]
    d = shared.gate or 0
    last_writer: list[dict[tuple[int, int], int]] = [{} for _ in range(P)]
    write_end: list[dict[int, float]] = [{} for _ in range(P)]
    work = [0.0] * P
    head = [float("inf")] * P  # earliest possible start on stage s
    tail = [float("inf")] * P  # shortest backward chain from stage s-1 down to 0 (unsplit)
    cp = 0.0
    for j, sub in enumerate(subnets):
        f_end = [0.0] * P
        ready = 0.0
        fsum = 0.0
        for s in range(P):
            head[s] = min(head[s], fsum + s * hop)
            start = ready
            for b in choice[s]:
                i = last_writer[s].get((b, sub[b]))
                if i is not None:
                    start = max(start, write_end[s][i])
            if gated[s]:
                for i in range(max(0, j - 2 * d - 1), j - d):
                    start = max(start, write_end[s][i])
            dur = duration(Task(FORWARD, j, s))
            fsum += dur
            work[s] += dur
            f_end[s] = start + dur
            ready = f_end[s] + hop
        ready = f_end[P - 1]
        bsum = 0.0
        for s in range(P - 1, -1, -1):
            tail[s] = min(tail[s], bsum + s * hop) if not split_backward else 0.0
            db = duration(Task(BACKWARD, j, s))
            bsum += db
            work[s] += db
            b_end = ready + db
            w_end = b_end
            if split_backward:
                dw = duration(Task(WEIGHT, j, s))
                work[s] += dw
                w_end = b_end + dw
            cp = max(cp, w_end)
            write_end[s][j] = w_end if write == WEIGHT else b_end
            ready = b_end + hop
        for s in range(P):
            for b in choice[s]:
                last_writer[s][(b, sub[b])] = j
    sb = max(work[s] + (head[s] if head[s] != float("inf") else 0.0) + (tail[s] if tail[s] != float("inf") else 0.0)
             for s in range(P)) if subnets else 0.0
    return Bound(tuple(work), cp, sb)
