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

What admitting a subnet reads from the space (its per-stage sums and its links) depends on the sequence and
the stage layout alone, not on a scheduler's progress: ``PathTable`` computes it once per subnet for every
scheduler over the same stream and layout (a simulation's stages and their speculative copies).
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

from naspipe.spaces.space import SearchSpace


class Link(NamedTuple):
    """Subnet ``subnet`` is the newest earlier user of one of the admitted subnet's candidates."""

    subnet: int
    stage: int  # the lowest stage where it is
    tail: float  # b_stage(subnet) + ... + b_{P-1}(subnet)
    stages: int  # a bit per stage where it is


class Entry(NamedTuple):
    """What admitting one subnet reads (``PathTable.entry``)."""

    fwd_tail: list[float]  # [f_s + ... + f_{P-1} for s] + [0]
    bwd_head: list[float]  # [0] + [b_0 + ... + b_s for s]
    links: list[Link]


class PathTableError(RuntimeError):
    """A path table asked for a subnet out of order, or for another subnet under a number it computed: a
    scheduling bug, never user input (not a ValueError, which a forecast's speculative copy takes for stale news)."""


class PathTable:
    """Per admitted subnet, in sequence order from ``start``: what every scheduler's critical paths or conflict
    chains read of it.

    ``entry(k, subnet)`` gives subnet ``k``'s ``Entry``: its forward tails, backward heads and ``Link`` s (one per
    earlier subnet it follows on some candidate). ``CriticalPaths`` and ``naspipe.sched.chains.ConflictChains``
    read them. Computing an entry passes over every block of every stage; a simulation's ``P`` schedulers used
    to do it ``P`` times per subnet. ``shared`` hands every scheduler over one stream, layout and start the same
    table, whatever thread drives it (``entry`` holds a lock). Subnets are admitted in order from ``start``, none
    skipped. A reader (``read_by``) keeps a ``next_subnet``: entries below every live reader's are dropped, so a
    long run holds a bounded table.
    """

    _shared: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], PathTable]] = weakref.WeakKeyDictionary()
    _shared_lock = threading.Lock()  # schedulers may run in threads (naspipe.experiments.jobs)
    PRUNE_EVERY = 256  # new entries between two drops of the entries no reader needs

    def __init__(self, space: SearchSpace, blocks_per_stage: Sequence[Sequence[int]], start: int | None = None):
        """``blocks_per_stage[t]``: every block of stage ``t`` (its cost counts); choice blocks make links.
        ``start``: the first subnet admitted (default: whichever comes first)."""
        self.P = len(blocks_per_stage)
        # per stage: (block, its candidates, {candidate: (newest admitted user, its backward heads)} or None for a
        # fixed block). The space's own candidate tuples are read per admitted subnet and a block's users hold
        # only the candidates admitted subnets chose: no table of every candidate, which cost O(K) per block.
        # A block belongs to one stage: its users are that stage's links.
        blocks = [b for stage in blocks_per_stage for b in stage]
        assert len(blocks) == len(set(blocks)), f"a block on two stages: {blocks_per_stage}"
        self._stage_blocks = [[(b, space.blocks[b].candidates, None if space.blocks[b].fixed else {})
                               for b in stage] for stage in blocks_per_stage]
        self.start = start
        self._next = start  # the next subnet to compute
        self._low = start  # entries [_low, _next) are kept
        self._entries: dict[int, tuple[Sequence[int], Entry]] = {}
        self._readers: weakref.WeakSet[Any] = weakref.WeakSet()  # each with a next_subnet
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, stream: Any, blocks_per_stage: Sequence[Sequence[int]], start: int) -> PathTable:
        """The table of every scheduler reading ``stream`` from ``start`` with this stage layout (made on first
        use; it lives as long as the stream). A new table when the last one dropped entries (its readers moved
        on), or for a stream that takes no weak reference."""
        key = (tuple(tuple(s) for s in blocks_per_stage), start)
        with cls._shared_lock:
            try:
                tables = cls._shared.setdefault(stream, {})
            except TypeError:
                return cls(stream.space, blocks_per_stage, start)
            table = tables.get(key)
            if table is None or table._low != start:  # (a table that dropped entries serves its readers on)
                table = tables[key] = cls(stream.space, blocks_per_stage, start)
            return table

    def entry(self, k: int, subnet: Sequence[int]) -> Entry:
        """Subnet ``k``'s entry; subnets are computed in order, each once (``subnet`` must be the sequence's ``k``)."""
        with self._lock:
            kept = self._entries.get(k)
            if kept is not None:
                if kept[0] is not subnet and tuple(kept[0]) != tuple(subnet):
                    raise PathTableError(f"subnet {k} differs from the one this table computed: {list(subnet)}")
                return kept[1]
            if self._next is None:
                self.start = self._next = self._low = k
            if k != self._next:
                raise PathTableError(f"subnet {k} asked of a path table at subnet {self._next} "
                                     f"(kept from {self._low})")
            e = self._compute(k, subnet)
            self._entries[k] = (subnet, e)
            self._next = k + 1
            if (k + 1 - self.start) % self.PRUNE_EVERY == 0:
                self._prune()
            return e

    def _compute(self, k: int, subnet: Sequence[int]) -> Entry:
        P = self.P
        f = [0.0] * P
        b = [0.0] * P
        bh = [0.0] * (P + 1)  # filled below; the users' table holds it for later subnets' links
        mine = (k, bh)
        preds: dict[int, tuple[int, list[float]]] = {}  # i -> (lowest stage of a link i -> k, i's backward heads)
        stages: dict[int, int] = {}  # i -> a bit per stage of a link i -> k
        for t, blocks in enumerate(self._stage_blocks):
            ft = bt = 0.0
            for blk, cands, last in blocks:
                c = subnet[blk]
                cand = cands[c]
                ft += cand.fwd
                bt += cand.bwd
                if last is not None:
                    prev = last.get(c)
                    if prev is not None:
                        i = prev[0]
                        if i not in preds:
                            preds[i] = (t, prev[1])  # stages come in increasing order: the first is the lowest
                            stages[i] = 1 << t
                        else:
                            stages[i] |= 1 << t
                    last[c] = mine
            f[t], b[t] = ft, bt
        ft_ = [0.0] * (P + 1)
        for t in range(P - 1, -1, -1):
            ft_[t] = ft_[t + 1] + f[t]
        for t in range(P):
            bh[t + 1] = bh[t] + b[t]
        return Entry(ft_, bh, [Link(i, t, bhi[P] - bhi[t], stages[i]) for i, (t, bhi) in preds.items()])

    def _prune(self) -> None:
        low = min((self.start if r.next_subnet is None else r.next_subnet for r in list(self._readers)),
                  default=self._next)
        while self._low < low:
            self._entries.pop(self._low, None)
            self._low += 1

    def read_by(self, reader: Any) -> None:
        """``reader`` will ask for entries from its ``next_subnet`` on (None: from ``start``), which it keeps up to
        date: they stay until it moves on or goes. (A copy of a reader is a reader of its own.)"""
        with self._lock:  # (not while another thread's entry() walks the readers)
            self._readers.add(reader)

    def __len__(self) -> int:
        """Entries kept."""
        return len(self._entries)


class CriticalPaths:
    def __init__(self, space: SearchSpace, blocks_per_stage: Sequence[Sequence[int]], table: PathTable | None = None):
        """``blocks_per_stage[t]``: every block of stage ``t`` (its cost counts); choice blocks make links.
        ``table``: the entries to read (``PathTable.shared``); default: a table of its own."""
        self.P = len(blocks_per_stage)
        self._table = table if table is not None else PathTable(space, blocks_per_stage)
        assert self._table.P == self.P, "the table has another stage layout"
        self.next_subnet = self._table.start  # the next subnet this admits (None: any, the first time)
        self._table.read_by(self)
        self._preds: dict[int, list[Link]] = {}  # k -> the links of k to the earlier subnets still admitted
        self.links: dict[int, list[tuple[int, int]]] = {}  # i -> (t, k)
        self.fwd_tail: dict[int, list[float]] = {}  # k -> [f_s + ... + f_{P-1} for s] + [0]
        self.bwd_head: dict[int, list[float]] = {}  # k -> [0] + [b_0 + ... + b_s for s]
        self.x: dict[int, float] = {}

    def admit(self, k: int, subnet: Sequence[int]) -> None:
        ft_, bh, links = self._table.entry(k, subnet)
        self.next_subnet = k + 1
        P = self.P
        x = self.x
        self.fwd_tail[k], self.bwd_head[k] = ft_, bh
        preds = self._preds[k] = [p for p in links if p[0] in x]  # a forgotten subnet is done: no link
        self.links[k] = []
        for i, t, _, _ in preds:
            self.links[i].append((t, k))
        x[k] = bh[P]
        # raise the ancestors, newest first: every successor of a subnet is newer, so each is final when popped
        heap = [-k]
        queued = {k}
        while heap:
            m = -heapq.heappop(heap)
            fm, xm = self.fwd_tail[m], x[m]
            for i, t, b_it, _ in self._preds[m]:
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
        other._table.read_by(other)
        other._preds = self._preds.copy()
        other.links = {j: v.copy() for j, v in self.links.items()}
        other.fwd_tail = self.fwd_tail.copy()
        other.bwd_head = self.bwd_head.copy()
        other.x = self.x.copy()
        return other
