"""Data-parallel replicas of a stage: the exact, fixed-order combination of their gradients, and the write order.

Why it exists: with ``R`` replicas of every stage (global rank ``replica * stages + stage``), replica ``r``
of stage ``s`` computes shard ``r`` of every batch and talks only to replica ``r`` of its neighbours; the
``R`` replicas of a stage must apply the same update, and a run must be reproducible and equal to
``naspipe reference --replicas R`` bit for bit. A native ring all-reduce sums in an order that depends on
``R`` and on its chunking, so the exact mode gathers every replica's gradients (one ``all_gather`` of one
flat tensor per dtype per subnet, in the stage's own process group: gloo on CPU, NCCL on GPU) and sums them in
replica order with ``naspipe.models.shards.combine``, the function the reference uses. Shards may reach
different parameters (a data-dependent branch): a parameter with a gradient on any replica is combined with
zeros for the replicas that have none, one with none anywhere keeps None, as in the reference. On the last stage
the shard losses ride in the same tensor and are combined the same way (the run's loss of a subnet).

The gather is a collective, so every replica of a stage must reach the writes of its subnets in the same
order: replica 0 (the leader) schedules freely and announces each write as it starts it (``announce``, one
int64 per write on a channel per follower); a follower's receiver thread puts each announcement into its
inbox as a ``WriteOrder`` and its loop lets a write start only when it is the next one announced
(``naspipe.sched.ordered.next_task_writing``). Every other choice of a follower stays free.

``native=True`` (``--replica-exchange native``) all-reduces with the backend instead: it moves less data,
and for a fixed replica count it sums in a fixed order, so runs repeat bit for bit, but its order (ring,
chunking) is not the reference's; ``run.json`` records the exchange and ``verify`` refuses to compare.
"""

from __future__ import annotations

import datetime
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from naspipe.models.shards import combine
from naspipe.runtime.stagerun import StageRun
from naspipe.runtime.transport.comm import ChannelFailure, SendFailure, TransportError
from naspipe.sched.ordered import next_task_writing

__all__ = ["ReplicaGroup", "ReplicaMismatch", "WriteOrder", "next_task_writing"]


class ExchangeFailure(TransportError):
    """The replicas' gradient exchange failed (a replica went away): names the other replica's global rank when
    there is one other (2 replicas), so a lost host on the replica side is named as on the pipeline side."""

    def __init__(self, text: str, peer: int | None):
        super().__init__(text)
        self.peer = peer


@dataclass
class WriteOrder:
    """The leader of a follower's stage started the write of ``subnet``: the follower's next write."""

    subnet: int


class ReplicaMismatch(RuntimeError):
    """The replicas of a stage reached different subnets' writes (or different gradient sizes)."""


class ReplicaGroup:
    """The replicas of one stage: the exact gradient combination (collective construction: every rank calls
    it once, in the same order, and creates every stage's group)."""

    def __init__(self, run: StageRun, timeout: float, native: bool = False):
        stage, stages, replica, replicas, device = run.stage, run.stages, run.replica, run.replicas, run.device
        self.stage, self.replica, self.replicas = stage, replica, replicas
        self.native = native  # the backend's all-reduce (its own summation order) instead of the exact gather
        self.device = device
        # the write order travels point to point, which gloo does for host memory only (CUDA on gloo: host)
        self._order_device = torch.device("cpu") if dist.get_backend() != "nccl" else device
        self.timeout = datetime.timedelta(seconds=timeout)
        self.group: Any = None
        self.leader = stage  # the global rank of replica 0 of this stage
        self._followers: list[tuple[int, Any]] = []  # leader: (global rank, order channel) per follower
        self._channel: Any = None  # follower: the order channel from the leader
        for s in range(stages):
            g = dist.new_group([r * stages + s for r in range(replicas)])
            if s == stage:
                self.group = g
        for s in range(stages):
            for r in range(1, replicas):
                g = dist.new_group([s, r * stages + s])
                if s == stage and replica == 0:
                    self._followers.append((r * stages + s, g))
                elif s == stage and r == replica:
                    self._channel = g
        self.bytes_gathered = 0
        self._pending: deque[tuple[Any, Tensor, int]] = deque()  # (work, tensor, destination rank)
        self._members = [r * stages + stage for r in range(replicas)]  # this stage's replicas' global ranks
        self._thread: threading.Thread | None = None

    # ---- the write order ---------------------------------------------------------------------------------
    def start(self, expected: int, inbox: queue.Queue) -> None:
        """Follower: receive the ``expected`` announced writes into ``inbox`` (a thread; ends by itself)."""
        if self.replica == 0:
            return

        def receive() -> None:
            got = 0
            try:
                if self.device.type == "cuda":
                    torch.cuda.set_device(self.device)
                buf = torch.empty(1, dtype=torch.int64, device=self._order_device)
                for _ in range(expected):
                    dist.recv(buf, src=self.leader, group=self._channel)
                    got += 1
                    inbox.put(WriteOrder(int(buf.item())))
            except Exception as e:  # noqa: BLE001 - reported to the stage loop, which fails the run
                inbox.put(ChannelFailure(f"stage {self.stage} replica {self.replica}: receiving the write order "
                                         f"from rank {self.leader} failed after {got} of {expected}: "
                                         f"{type(e).__name__}: {e}", self.leader))

        self._thread = threading.Thread(target=receive, daemon=True, name="naspipe-recv-write-order")
        self._thread.start()

    def announce(self, j: int) -> None:
        """Leader: tell every follower that the next write is subnet ``j``'s."""
        while self._pending and self._pending[0][0].is_completed():
            work, _, dst = self._pending.popleft()
            self._waited(work, None, dst)
        for dst, g in self._followers:
            t = torch.tensor([j], dtype=torch.int64, device=self._order_device)
            try:  # gloo raises here once the follower's connection closed
                self._pending.append((dist.isend(t, dst=dst, group=g), t, dst))
            except Exception as e:
                raise SendFailure(f"stage {self.stage}: announcing subnet {j}'s write to replica rank {dst} failed: "
                                  f"{type(e).__name__}: {e}", dst) from e

    def _waited(self, work: Any, timeout: float | None, dst: int) -> None:
        """A completed announcement's failure names its follower; one that did not complete within ``timeout``
        names nobody (slow or hung is not lost, as ``comm.Links.flush``)."""
        try:
            work.wait() if timeout is None else work.wait(datetime.timedelta(seconds=timeout))
        except Exception as e:
            if timeout is None:
                raise SendFailure(f"stage {self.stage}: a write announcement to replica rank {dst} was not sent: "
                                  f"{type(e).__name__}: {e}", dst) from e
            raise TransportError(f"stage {self.stage}: a write announcement to replica rank {dst} was not sent "
                                 f"within {timeout:g} s: {type(e).__name__}: {e}") from e

    def close(self, timeout: float) -> None:
        """Wait for the announcements to be sent and the receiver to end: ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        while self._pending:
            work, _, dst = self._pending.popleft()
            self._waited(work, max(0.001, deadline - time.monotonic()), dst)
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                raise TransportError(f"stage {self.stage} replica {self.replica}: the write-order receiver "
                                     f"still runs after {timeout:g} s")

    def _exchange(self, start: Any) -> None:
        """Run one collective of the gradient exchange (``start()`` returns its work) and wait for it. One that
        fails before the timeout (a replica's connection closed) names the other replica; one that outlasts
        it names nobody (slow or hung is not lost, as ``comm.Links.flush``)."""
        t0 = time.monotonic()
        try:
            start().wait(self.timeout)
        except Exception as e:
            others = [r for r in self._members if r != self._members[self.replica]]
            what = (f"stage {self.stage} replica {self.replica}: the gradient exchange with replica rank(s) "
                    f"{', '.join(map(str, others))}")
            if time.monotonic() - t0 >= 0.9 * self.timeout.total_seconds():
                raise TransportError(f"{what} did not complete within {self.timeout.total_seconds():g} s: "
                                     f"{type(e).__name__}: {e}") from e
            raise ExchangeFailure(f"{what} failed: {type(e).__name__}: {e}",
                                  others[0] if len(others) == 1 else None) from e

    def _gather(self, t: Tensor) -> list[Tensor]:
        out = [torch.empty_like(t) for _ in range(self.replicas)]
        self._exchange(lambda: dist.all_gather(out, t, group=self.group, async_op=True))
        return out

    def __call__(self, j: int, tensors: Sequence[Tensor | None],
                 like: Sequence[Tensor | None] | None = None) -> list[Tensor | None]:
        """Subnet ``j``'s tensors combined over the replicas, in replica order.

        Slot ``i`` holds ``tensors[i]`` (None: this replica has no gradient there, e.g. a candidate whose
        forward took another branch on this shard); ``like[i]`` is a tensor of that slot's shape and dtype
        (its parameter), needed wherever ``tensors[i]`` may be None. One rule, the one the reference applies
        per slot (``naspipe.models.shards.combine_present``): a slot with a gradient on at least one replica
        combines every replica's, zeros standing in for the replicas that have none; a slot with none on any
        replica stays None (so the optimizer skips it, as without replicas). Each dtype is combined in its
        own flat buffer, in that dtype (no cast)."""
        like = list(tensors) if like is None else list(like)
        if len(like) != len(tensors):
            raise ValueError(f"{len(tensors)} tensors but {len(like)} templates")
        for i, (t, m) in enumerate(zip(tensors, like, strict=True)):
            if m is None and t is None:
                raise ValueError(f"slot {i} has neither a tensor nor a template")
        shapes = [m if m is not None else t for t, m in zip(tensors, like, strict=True)]
        numel = sum(m.numel() for m in shapes)  # type: ignore[union-attr]
        head = self._gather(torch.tensor([j, len(shapes), numel], dtype=torch.int64, device=self.device))
        seen = [tuple(h.tolist()) for h in head]
        if any(s != (j, len(shapes), numel) for s in seen):
            raise ReplicaMismatch(f"stage {self.stage} replica {self.replica}: the replicas write (subnet, "
                                  f"slots, gradient size) {seen}; they must agree")
        if not shapes:
            return []
        # one flat buffer per dtype, in the order the dtypes first appear (the same on every replica); absent
        # slots are zeros, and the first buffer carries this replica's presence mask (0/1, exact in any dtype)
        dtypes: list[torch.dtype] = []
        for m in shapes:
            if m.dtype not in dtypes:  # type: ignore[union-attr]
                dtypes.append(m.dtype)  # type: ignore[union-attr]
        mask = [t is not None for t in tensors]
        flats: list[Tensor] = []
        for d in dtypes:
            parts = [(t.detach() if t is not None else torch.zeros_like(m, device=self.device)).reshape(-1)
                     for t, m in zip(tensors, shapes, strict=True) if m.dtype == d]  # type: ignore[union-attr]
            if not flats:
                parts.append(torch.tensor(mask, dtype=d, device=self.device))
            flats.append(torch.cat(parts))
        totals: list[Tensor] = []
        present: list[bool] = [False] * len(shapes)
        for k, flat in enumerate(flats):
            size = flat.numel() - (len(shapes) if k == 0 else 0)
            if self.native:
                self._exchange(lambda flat=flat: dist.all_reduce(flat, group=self.group, async_op=True))
                if k == 0:
                    present = flat[size:].ne(0).tolist()
                totals.append(flat[:size].div_(self.replicas))
            else:
                gathered = self._gather(flat)
                if k == 0:
                    present = torch.stack([g[size:] for g in gathered]).ne(0).any(0).tolist()
                totals.append(combine([g[:size] for g in gathered]))
            self.bytes_gathered += flat.numel() * flat.element_size() * (self.replicas - 1)
        out: list[Tensor | None] = []
        at = dict.fromkeys(dtypes, 0)
        for i, m in enumerate(shapes):
            d = m.dtype  # type: ignore[union-attr]
            total, a = totals[dtypes.index(d)], at[d]
            at[d] = a + m.numel()  # type: ignore[union-attr]
            out.append(total[a:a + m.numel()].reshape(m.shape).clone() if present[i] else None)  # type: ignore[union-attr]
        return out
