"""Conflict chains in the window: how much later work hangs on each subnet, kept up to date incrementally.

A subnet ``j`` that shares a candidate (on any stage) with a later subnet ``k`` delays ``k`` by about one
round trip from that stage: ``k``'s forward there waits for ``j``'s write. Chains of such conflicts form
the causal critical path. ``depth(j)`` is the weight of the longest chain of conflicts that starts at
``j`` among the subnets the stage has admitted: the window-limited estimate of how much of the future
waits on ``j``. Policies use it to break ties the way a critical-path list scheduler would, with no
knowledge beyond the window.

Admitting ``k`` (always the newest) links it after the last earlier user of each of its candidates (the
links come from ``naspipe.sched.critical.PathTable``, computed once per subnet for every scheduler of a run)
and raises the depth of its ancestors where the new chain is longer; values only grow, so propagation stops
at the first ancestor that is already deep enough.
"""

from __future__ import annotations

from collections.abc import Sequence

from naspipe.sched.critical import PathTable
from naspipe.spaces.space import SearchSpace


class ConflictChains:
    def __init__(self, space: SearchSpace, blocks_per_stage: Sequence[Sequence[int]], weights: Sequence[float],
                 table: PathTable | None = None):
        """``blocks_per_stage[s]``: choice blocks on stage ``s``; ``weights[s]``: cost of a link on ``s``.
        ``table``: where each admitted subnet's links come from (``PathTable.shared``); default: a table of its own."""
        self._weights = tuple(weights)
        self._table = table if table is not None else PathTable(space, blocks_per_stage)
        assert self._table.P == len(blocks_per_stage) == len(self._weights), "the table has another stage layout"
        self.next_subnet = self._table.start  # the next subnet this admits (None: any, the first time)
        self._table.read_by(self)
        # a link's stages (a bit each) -> the weight of the heaviest (the same for every copy: copies share it)
        self._heaviest: dict[int, float] = {}
        self._preds: dict[int, list[tuple[int, float]]] = {}
        self.depth: dict[int, float] = {}

    def admit(self, k: int, subnet: Sequence[int]) -> None:
        links = self._table.entry(k, subnet).links
        self.next_subnet = k + 1
        preds = []
        for i, _, _, stages in links:  # (Link: subnet, lowest stage, tail, stages)
            if i in self.depth:  # a forgotten subnet is done: no chain through it
                w = self._heaviest.get(stages)
                if w is None:
                    w = self._heaviest[stages] = max(wt for t, wt in enumerate(self._weights) if stages >> t & 1)
                preds.append((i, w))
        self._preds[k] = preds
        self.depth[k] = 0.0
        stack = [k]
        while stack:
            j = stack.pop()
            dj = self.depth[j]
            for i, w in self._preds.get(j, ()):
                if i in self.depth and self.depth[i] < dj + w:
                    self.depth[i] = dj + w
                    stack.append(i)

    def forget(self, j: int) -> None:
        """Drop ``j`` once it and every earlier subnet are done on this stage: no chain through it matters."""
        self.depth.pop(j, None)
        self._preds.pop(j, None)

    def clone(self) -> ConflictChains:
        other = ConflictChains.__new__(ConflictChains)
        other.__dict__.update(self.__dict__)
        other._table.read_by(other)
        other._preds = self._preds.copy()
        other.depth = self.depth.copy()
        return other
