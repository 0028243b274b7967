"""Versions of a stage's shared fixed-block weights under ``serial`` and ``delayed:D``.

Why it exists: subnet ``j`` must read the fixed weights as ``v_{max(0, j-D)}``, where ``v_k`` is the
state after the updates of subnets ``< k`` (``serial`` is ``D = 0``). A forward runs the fixed blocks on a
fresh requires-grad leaf that shares storage with an immutable snapshot of that version; the leaf lives in
the subnet's stash until its backward, which leaves the gradient on it. Updates of the live fixed weights
are applied strictly in subnet order: the gradient of ``j`` waits until ``j-1``'s has been applied. After
applying ``j``'s update the stage snapshots ``v_{j+1}`` if some subnet will read it, and drops a version
once its last reader has run its forward. The scheduler's gate (``F(j)`` waits until every write
``i < j - D`` is done on this stage) guarantees the needed version exists at ``F(j)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor


class FixedVersions:
    def __init__(self, live: Mapping[str, Tensor], delay: int, n: int,
                 apply: Callable[[Mapping[str, Tensor | None]], None]):
        """``live``: the stage's fixed parameters by global name; ``apply(grads)`` performs one update."""
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self.live = dict(live)
        self.delay, self.n = delay, n
        self._apply = apply
        self.next = 0  # the next subnet whose update is applied
        self._waiting: dict[int, dict[str, Tensor | None]] = {}
        self._versions: dict[int, dict[str, Tensor]] = {}
        self._readers: dict[int, int] = {}
        self.peak_versions = 0
        self._snapshot(0)

    def version_of(self, j: int) -> int:
        return max(0, j - self.delay)

    def _reader_count(self, k: int) -> int:
        if k == 0:
            return min(self.delay + 1, self.n)
        return 1 if k + self.delay < self.n else 0

    def _snapshot(self, k: int) -> None:
        readers = self._reader_count(k)
        if readers:
            with torch.no_grad():
                self._versions[k] = {name: p.detach().clone() for name, p in self.live.items()}
            self._readers[k] = readers
            self.peak_versions = max(self.peak_versions, len(self._versions))

    def leaves(self, j: int) -> dict[str, Tensor]:
        """Fresh requires-grad leaves holding ``v_{max(0, j-D)}`` for the forward of ``j``."""
        k = self.version_of(j)
        snap = self._versions.get(k)
        if snap is None:
            raise RuntimeError(f"fixed-weight version {k} for subnet {j} is not available (next update to apply: "
                               f"{self.next}); the scheduler's gate should have prevented this forward")
        self._readers[k] -= 1
        if self._readers[k] == 0:
            del self._versions[k], self._readers[k]
        return {name: t.detach().requires_grad_(True) for name, t in snap.items()}

    def submit(self, j: int, grads: Mapping[str, Tensor | None]) -> None:
        """The gradient of ``j`` w.r.t. its leaves; applied once every earlier subnet's has been."""
        if j < self.next or j in self._waiting:
            raise RuntimeError(f"fixed-weight gradient of subnet {j} submitted twice")
        self._waiting[j] = dict(grads)
        while self.next in self._waiting:
            self._apply(self._waiting.pop(self.next))
            self.next += 1
            self._snapshot(self.next)

    def state_dict(self) -> dict:
        """The versions kept, the gradients waiting and the next update (plain data, for checkpoints)."""
        return {"next": int(self.next), "waiting": {int(j): dict(g) for j, g in self._waiting.items()},
                "versions": {int(k): dict(v) for k, v in self._versions.items()},
                "readers": {int(k): int(r) for k, r in self._readers.items()}, "peak": int(self.peak_versions)}

    def load_state_dict(self, state: Mapping) -> None:
        self.next = int(state["next"])
        self._waiting = {int(j): dict(g) for j, g in state["waiting"].items()}
        self._versions = {int(k): dict(v) for k, v in state["versions"].items()}
        self._readers = {int(k): int(r) for k, r in state["readers"].items()}
        self.peak_versions = int(state["peak"])

    @property
    def held(self) -> int:
        """Versions kept right now."""
        return len(self._versions)
