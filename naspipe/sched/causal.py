"""The causal tracker: the exact CSP rule on one stage, in O(blocks) per event.

If an earlier subnet ``i < j`` and ``j`` select the same candidate of a block on this stage, ``F(j,s)``
may not start before ``i``'s write of that candidate (``B(i,s)``, or ``W(i,s)`` with a split backward)
has finished. Every subnet in the stage's window is registered as a pending writer of the candidates it
selects the moment it enters the window, whether or not its activation has *arrived*, so an earlier
subnet that is still upstream blocks a later one that shares a candidate with it.

For each candidate key ``(block, choice)`` the tracker keeps the pending writers in sequence order; a
subnet is free when it is at the front of every queue it sits in. A finished write pops the writer from
the front of its queues and frees the subnets that become fronts everywhere.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any


class CausalTracker:
    def __init__(self) -> None:
        self._queues: dict[tuple[int, int], deque[int]] = {}
        self._blocked: dict[int, int] = {}  # subnet -> number of queues where it is not the front
        self._keys: dict[int, tuple[tuple[int, int], ...]] = {}

    def admit(self, j: int, keys: Iterable[tuple[int, int]]) -> bool:
        """Register ``j`` (admitted in increasing order) as pending writer of ``keys``; True if free."""
        ks = tuple(keys)
        self._keys[j] = ks
        blocked = 0
        for k in ks:
            q = self._queues.get(k)
            if q is None:
                q = self._queues[k] = deque()
            elif q and q[-1] >= j:
                raise ValueError(f"subnets must be admitted in order: {j} after {q[-1]}")
            if q:
                blocked += 1
            q.append(j)
        self._blocked[j] = blocked
        return blocked == 0

    def clone(self, lazy: bool = False) -> CausalTracker:
        """An independent copy. ``lazy``: its queues are copied on first write (``CopyOnWriteQueues``), for a
        speculation that is used at once and dropped; this tracker must not change meanwhile."""
        other = CausalTracker.__new__(CausalTracker)
        other._queues = (CopyOnWriteQueues(self._queues) if lazy  # type: ignore[assignment]
                         else {k: q.copy() for k, q in self._queues.items()})
        other._blocked = self._blocked.copy()
        other._keys = self._keys.copy()
        return other

    def is_free(self, j: int) -> bool:
        return self._blocked.get(j, 1) == 0

    def blockers(self, j: int) -> list[int]:
        """The earlier pending writers that ``j`` waits for (front of each queue it is not the front of)."""
        out = []
        for k in self._keys.get(j, ()):
            q = self._queues[k]
            if q[0] != j:
                out.append(q[0])
        return out

    def release(self, j: int) -> list[int]:
        """``j``'s write finished; return the subnets that became free, in increasing order."""
        freed = []
        for k in self._keys.pop(j):
            q = self._queues[k]
            if not q or q[0] != j:
                raise ValueError(f"subnet {j} released out of causal order on candidate {k}")
            q.popleft()
            if q:
                f = q[0]
                self._blocked[f] -= 1
                if self._blocked[f] == 0:
                    freed.append(f)
            else:
                del self._queues[k]
        del self._blocked[j]
        freed.sort()
        return freed

    def pending(self) -> int:
        return len(self._blocked)


class CopyOnWriteQueues:
    """Copy-on-write view of a ``CausalTracker``'s queue dict (``clone(lazy=True)``): a queue is copied when
    first touched.

    A full ``clone()`` copies one deque per candidate key of the stage (hundreds for K = 96), about a
    millisecond; a speculation touches a dozen. The view reads its base, which must not change while the
    view is in use (a speculative copy is used at once and dropped).
    """

    __slots__ = ("_base", "_own", "_gone")

    def __init__(self, base: Any) -> None:
        self._base = base
        self._own: dict = {}
        self._gone: set = set()

    def get(self, key: Any, default: Any = None) -> Any:
        q = self._own.get(key)
        if q is not None:
            return q
        if key in self._gone:
            return default
        b = self._base.get(key)
        if b is None:
            return default
        q = self._own[key] = b.copy()
        return q

    def __getitem__(self, key: Any) -> Any:
        q = self.get(key)
        if q is None:
            raise KeyError(key)
        return q

    def __setitem__(self, key: Any, value: Any) -> None:
        self._own[key] = value
        self._gone.discard(key)

    def __delitem__(self, key: Any) -> None:
        if self.get(key) is None:
            raise KeyError(key)
        del self._own[key]
        self._gone.add(key)

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def keys(self) -> Iterator[Any]:
        seen = set(self._own)
        yield from self._own
        for k in self._base.keys():
            if k not in seen and k not in self._gone:
                yield k

    def items(self) -> Iterator[tuple[Any, Any]]:
        for k in list(self.keys()):
            yield k, self[k]
