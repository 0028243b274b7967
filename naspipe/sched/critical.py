"""Critical paths through the window: how long the longest chain of work behind each ready task is.

The exact CSP problem is a DAG: each subnet's forwards run down the pipeline and its backwards back up,
and the write of a candidate on stage ``t`` (``B(i,t)``) must end before the next subnet ``k`` that uses
that candidate runs ``F(k,t)``. A list scheduler that always runs the ready task heading the longest path
to the end (its *tail*) is the classic near-optimal heuristic for such problems; this module keeps those
tails for the subnets in a bounded horizon, with each task's estimated duration from the space's cost
model (a scheduler knows no measured durations; the order stays exact whatever they are).

For subnet ``k`` with per-stage forward and backward estimates ``f_t``, ``b_t``, its backward phase heads
``X(k) = max(sum_t b_t, max over links (t, m) of  b_t + ... + b_{P-1} + f_t(m) + ... + f_{P-1}(m) + X(m))``,
a link ``(t, m)`` meaning ``m`` is the next subnet using one of ``k``'s candidates on stage ``t``. Then
``F(k,s)`` heads ``f_s + ... + f_{P-1} + X(k)`` and ``B(k,s)`` heads ``b_0 + ... + b_s`` or, through a link
``(t, m)`` with ``t <= s``, ``b_t + ... + b_s + f_t(m) + ... + f_{P-1}(m) + X(m)``. Admitting a subnet (always
the newest) links it after the last earlier user of each of its candidates and raises ``X`` of its
ancestors where the new path is longer; values only grow, so the propagation stops early.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from naspipe.space import SearchSpace


class CriticalPaths:
    def __init__(self, space: SearchSpace, blocks_per_stage: Sequence[Sequence[int]]):
        """``blocks_per_stage[t]``: every block of stage ``t`` (its cost counts); choice blocks make links."""
        self.P = len(blocks_per_stage)
        # per stage: (block, its candidates, {candidate: newest admitted user} or None for a fixed block). The space's
        # own candidate tuples are read per admitted subnet and a block's users hold only the candidates admitted
        # subnets chose: no per-scheduler table of every candidate, which cost O(K) per scheduler and block
        # (csp-plan makes hundreds of schedulers). A block belongs to one stage: its users are that stage's links.
        blocks = [b for stage in blocks_per_stage for b in stage]
        assert len(blocks) == len(set(blocks)), f"a block on two stages: {blocks_per_stage}"
        self._stage_blocks = [[(b, space.blocks[b].candidates, None if space.blocks[b].fixed else {})
                               for b in stage] for stage in blocks_per_stage]
        # k -> (i, t, b_t(i) + ... + b_{P-1}(i)): k next uses i's candidate on stage t (the lowest such t)
        self._preds: dict[int, list[tuple[int, int, float]]] = {}
        self.links: dict[int, list[tuple[int, int]]] = {}  # i -> (t, k)
        self.fwd_tail: dict[int, list[float]] = {}  # k -> [f_s + ... + f_{P-1} for s] + [0]
        self.bwd_head: dict[int, list[float]] = {}  # k -> [0] + [b_0 + ... + b_s for s]
        self.x: dict[int, float] = {}

    def admit(self, k: int, subnet: Sequence[int]) -> None:
        P = self.P
        f = [0.0] * P
        b = [0.0] * P
        preds: dict[int, int] = {}  # i -> lowest stage of a link i -> k (it dominates: longer on both sides)
        x = self.x
        for t, blocks in enumerate(self._stage_blocks):
            ft = bt = 0.0
            for blk, cands, last in blocks:
                c = subnet[blk]
                cand = cands[c]
                ft += cand.fwd
                bt += cand.bwd
                if last is not None:
                    i = last.get(c)
                    if i is not None and i not in preds and i in x:
                        preds[i] = t  # stages come in increasing order: the first link is the lowest
                    last[c] = k
            f[t], b[t] = ft, bt
        ft_ = [0.0] * (P + 1)
        for t in range(P - 1, -1, -1):
            ft_[t] = ft_[t + 1] + f[t]
        bh = [0.0] * (P + 1)
        for t in range(P):
            bh[t + 1] = bh[t] + b[t]
        self.fwd_tail[k], self.bwd_head[k] = ft_, bh
        bwd = self.bwd_head
        self._preds[k] = [(i, t, bwd[i][P] - bwd[i][t]) for i, t in preds.items()]
        self.links[k] = []
        for i, t in preds.items():
            self.links[i].append((t, k))
        x[k] = bh[P]
        # raise the ancestors, newest first: every successor of a subnet is newer, so each is final when popped
        heap = [-k]
        queued = {k}
        while heap:
            m = -heapq.heappop(heap)
            fm, xm = self.fwd_tail[m], x[m]
            for i, t, b_it in self._preds[m]:
                xi = x.get(i)
                if xi is not None:
                    v = b_it + fm[t] + xm
                    if v > xi:
                        x[i] = v
                        if i not in queued:
                            queued.add(i)
                            heapq.heappush(heap, -i)

    def forward(self, k: int, s: int) -> float:
        """Length of the longest path ``F(k,s)`` heads (0 for a subnet not admitted)."""
        ft = self.fwd_tail.get(k)
        return ft[s] + self.x[k] if ft is not None else 0.0

    def backward(self, j: int, s: int) -> float:
        """Length of the longest path ``B(j,s)`` heads (0 for a subnet not admitted)."""
        bh = self.bwd_head.get(j)
        if bh is None:
            return 0.0
        best = bh[s + 1]
        for t, m in self.links[j]:
            if t <= s and m in self.x:
                v = bh[s + 1] - bh[t] + self.fwd_tail[m][t] + self.x[m]
                if v > best:
                    best = v
        return best

    def forget(self, j: int) -> None:
        """Drop ``j`` once it and every earlier subnet are done on this stage."""
        for d in (self.x, self._preds, self.links, self.fwd_tail, self.bwd_head):
            d.pop(j, None)

    def clone(self) -> CriticalPaths:
        other = CriticalPaths.__new__(CriticalPaths)
        other.__dict__.update(self.__dict__)
        other._stage_blocks = [[(b, cands, None if last is None else last.copy()) for b, cands, last in blocks]
                               for blocks in self._stage_blocks]
        other._preds = self._preds.copy()
        other.links = {j: v.copy() for j, v in self.links.items()}
        other.fwd_tail = self.fwd_tail.copy()
        other.bwd_head = self.bwd_head.copy()
        other.x = self.x.copy()
        return other
