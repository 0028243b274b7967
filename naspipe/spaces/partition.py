"""Cost-balanced contiguous partition of a supernet's blocks over pipeline stages.

A stage owns a contiguous range of blocks. The partition minimises the largest per-stage cost, where a
block's cost is the mean ``fwd + bwd`` over its candidates (the expected cost of a uniformly sampled
subnet) or a measured profile given per block. Ties go to the partition that puts fewer blocks on the
later stages (the last stage also computes the loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from naspipe.spaces.space import SearchSpace, SpaceError


@dataclass(frozen=True)
class Partition:
    """``bounds[s]`` is the half-open block range ``[start, stop)`` owned by stage ``s``."""

    bounds: tuple[tuple[int, int], ...]

    @property
    def stages(self) -> int:
        return len(self.bounds)

    def blocks(self, stage: int) -> range:
        a, b = self.bounds[stage]
        return range(a, b)

    def stage_of(self, block: int) -> int:
        for s, (a, b) in enumerate(self.bounds):
            if a <= block < b:
                return s
        raise IndexError(block)

    def to_list(self) -> list[list[int]]:
        return [list(b) for b in self.bounds]


def split_error(part: Partition, space: SearchSpace) -> str | None:
    """Why ``part`` is not a split of ``space``'s blocks into contiguous non-empty stages (None: it is). A gap
    silently dropped blocks from a simulation, an overlap or another space's partition failed deep inside it."""
    nb, bounds = space.num_blocks, part.bounds if isinstance(part, Partition) else None
    if not bounds or bounds[0][0] != 0 or bounds[-1][1] != nb or any(a >= b for a, b in bounds) or any(
            bounds[i][1] != bounds[i + 1][0] for i in range(len(bounds) - 1)):
        shown = part.to_list() if isinstance(part, Partition) else repr(part)
        return f"partition {shown} does not split the {nb} blocks of {space.name!r} into contiguous non-empty stages"
    return None


def block_costs(space: SearchSpace) -> list[float]:
    """Expected ``fwd + bwd`` per block under uniform sampling."""
    return [sum(c.fwd + c.bwd for c in b.candidates) / b.k for b in space.blocks]


def partition(space: SearchSpace, stages: int, profile: Sequence[float] | None = None) -> Partition:
    """Split ``space.blocks`` into ``stages`` contiguous, non-empty ranges minimising the max stage cost."""
    n = space.num_blocks
    if not isinstance(stages, int) or stages < 1:
        raise SpaceError(f"stages must be an integer >= 1, got {stages!r}")
    if stages > n:
        raise SpaceError(f"cannot split {n} blocks of space {space.name!r} over {stages} stages "
                         f"(each stage needs at least one block; use at most {n} stages)")
    costs = list(profile) if profile is not None else block_costs(space)
    if len(costs) != n:
        raise SpaceError(f"profile has {len(costs)} entries, space {space.name!r} has {n} blocks")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)

    def seg(a: int, b: int) -> float:
        return prefix[b] - prefix[a]

    inf = float("inf")
    # best[p][i]: minimal max-cost splitting blocks [0, i) into p stages; cut[p][i]: start of the last one
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    eps = 1e-12
    for p in range(1, stages + 1):
        for i in range(p, n - (stages - p) + 1):
            for a in range(p - 1, i):
                v = max(best[p - 1][a], seg(a, i))
                # prefer later cuts on ties: earlier stages take more blocks
                if v < best[p][i] - eps or (abs(v - best[p][i]) <= eps and a > cut[p][i]):
                    best[p][i], cut[p][i] = v, a
    bounds = []
    i = n
    for p in range(stages, 0, -1):
        a = cut[p][i]
        bounds.append((a, i))
        i = a
    return Partition(tuple(reversed(bounds)))
