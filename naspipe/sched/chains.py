"""Conflict chains in the window: how much later work hangs on each subnet, kept up to date incrementally.

A subnet ``j`` that shares a candidate (on any stage) with a later subnet ``k`` delays ``k`` by about one
round trip from that stage: ``k``'s forward there waits for ``j``'s write. Chains of such conflicts form
the causal critical path. ``depth(j)`` is the weight of the longest chain of conflicts that starts at
``j`` among the subnets the stage has admitted: the window-limited estimate of how much of the future
waits on ``j``. Policies use it to break ties the way a critical-path list scheduler would, with no
knowledge beyond the window.

Admitting ``k`` (always the newest) links it after the last earlier user of each of its candidates and
raises the depth of its ancestors where the new chain is longer; values only grow, so propagation stops
at the first ancestor that is already deep enough.
"""

from __future__ import annotations

from collections.abc import Sequence


class ConflictChains:
    def __init__(self, blocks_per_stage: Sequence[Sequence[int]], weights: Sequence[float]):
        """``blocks_per_stage[s]``: choice blocks on stage ``s``; ``weights[s]``: cost of a link on ``s``."""
        self._blocks = [(b, weights[s]) for s, blocks in enumerate(blocks_per_stage) for b in blocks]
        self._last: dict[tuple[int, int], int] = {}  # candidate -> newest admitted user
        self._preds: dict[int, list[tuple[int, float]]] = {}
        self.depth: dict[int, float] = {}

    def admit(self, k: int, subnet: Sequence[int]) -> None:
        preds: dict[int, float] = {}
        for b, w in self._blocks:
            key = (b, subnet[b])
            i = self._last.get(key)
            if i is not None and i in self.depth and preds.get(i, -1.0) < w:
                preds[i] = w
            self._last[key] = k
        self._preds[k] = list(preds.items())
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
        other._blocks = self._blocks
        other._last = self._last.copy()
        other._preds = self._preds.copy()
        other.depth = self.depth.copy()
        return other
