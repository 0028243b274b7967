"""Data-parallel replicas of a stage: the exact, fixed-order combination of their gradients, and the write order.

Why it exists: with ``R`` replicas of every stage (global rank ``replica * stages + stage``), replica ``r``
of stage ``s`` computes shard ``r`` of every batch and talks only to replica ``r`` of its neighbours; the
``R`` replicas of a stage must apply the same update, and a run must be reproducible and equal to
``naspipe reference --replicas R`` bit for bit. A native ring all-reduce sums in an order that depends on
``R`` and on its chunking, so the exact mode gathers every replica's gradients (one ``all_gather`` of one
flat tensor per subnet, in the stage's own process group: gloo on CPU, NCCL on GPU) and sums them in
replica order with ``naspipe.models.shards.combine``, the function the reference uses. On the last stage
the shard losses ride in the same tensor and are combined the same way (the run's loss of a subnet).

The gather is a collective, so every replica of a stage must reach the writes of its subnets in the same
order: ``next_task_in_write_order`` lets a stage's scheduler start only the write (``B``, or ``W`` with a
split backward) of its oldest unwritten subnet. Every replica then writes in subnet order, which the exact
policies allow (a later forward waits on earlier writes anyway); their other choices may differ freely.
"""

from __future__ import annotations

import datetime
import heapq
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from naspipe.models.shards import combine
from naspipe.sched.tasks import WEIGHT, Task


class ReplicaMismatch(RuntimeError):
    """The replicas of a stage reached different subnets' writes (or different gradient sizes)."""


def stage_and_replica(rank: int, stages: int) -> tuple[int, int]:
    """``(stage, replica)`` of global rank ``rank``."""
    return rank % stages, rank // stages


class ReplicaGroup:
    """The replicas of one stage: the exact gradient combination (collective construction: every rank calls
    it once, in the same order, and creates every stage's group)."""

    def __init__(self, stage: int, stages: int, replica: int, replicas: int, device: torch.device, timeout: float):
        self.stage, self.replica, self.replicas = stage, replica, replicas
        self.device = device
        self.timeout = datetime.timedelta(seconds=timeout)
        self.group: Any = None
        for s in range(stages):
            g = dist.new_group([r * stages + s for r in range(replicas)])
            if s == stage:
                self.group = g
        self.bytes_gathered = 0

    def _gather(self, t: Tensor) -> list[Tensor]:
        out = [torch.empty_like(t) for _ in range(self.replicas)]
        work = dist.all_gather(out, t, group=self.group, async_op=True)
        work.wait(self.timeout)
        return out

    def __call__(self, j: int, tensors: Sequence[Tensor | None]) -> list[Tensor | None]:
        """Subnet ``j``'s tensors (None stays None) combined over the replicas, in replica order."""
        present = [t for t in tensors if t is not None]
        numel = sum(t.numel() for t in present)
        head = self._gather(torch.tensor([j, numel], dtype=torch.int64, device=self.device))
        seen = [tuple(h.tolist()) for h in head]
        if any(s != (j, numel) for s in seen):
            raise ReplicaMismatch(f"stage {self.stage} replica {self.replica}: the replicas write (subnet, "
                                  f"gradient size) {seen}; they must agree")
        if not present:
            return list(tensors)
        dtype = present[0].dtype
        flat = torch.cat([t.detach().reshape(-1).to(dtype) for t in present])
        total = combine(self._gather(flat))
        self.bytes_gathered += flat.numel() * flat.element_size() * (self.replicas - 1)
        out: list[Tensor | None] = []
        at = 0
        for t in tensors:
            if t is None:
                out.append(None)
                continue
            out.append(total[at:at + t.numel()].reshape(t.shape).to(t.dtype).clone())
            at += t.numel()
        return out


def next_task_in_write_order(sched: Any) -> Task | None:
    """``sched.next_task()`` allowed to start only the write of its oldest unwritten subnet (``sched.lo``)."""
    attr = "_w_ready" if sched.write_kind == WEIGHT else "_b_ready"
    ready: list[int] = getattr(sched, attr)
    later = [x for x in ready if x != sched.lo]
    if not later:
        return sched.next_task()
    setattr(sched, attr, [x for x in ready if x == sched.lo])
    try:
        return sched.next_task()
    finally:
        merged = later + getattr(sched, attr)
        heapq.heapify(merged)
        setattr(sched, attr, merged)
