"""Task durations from the cost model, with optional seeded jitter, and message transfer times.

A duration depends only on (task, subnet choices, seed), never on the order tasks run in, so jittered
simulations are reproducible and the lower bound can be computed from the very same durations.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.spaces.partition import Partition
from naspipe.spaces.space import SearchSpace, Subnet


class CostModel:
    """Durations of ``F``/``B``/``W`` tasks and stage-to-stage transfers for one partitioned space.

    ``split_backward``: ``B`` costs only the input-gradient share of the backward and ``W`` the rest.
    ``jitter``: each duration is multiplied by ``1 + jitter * u`` with ``u`` uniform in [-1, 1], drawn
    from a hash of (seed, task), so it is the same whatever order the tasks run in.
    """

    def __init__(self, space: SearchSpace, part: Partition, subnets: Sequence[Subnet], *,
                 split_backward: bool = False, jitter: float = 0.0, seed: int = 0,
                 latency: float = 0.0, bandwidth: float = math.inf, batch_size: int | None = None,
                 time_scale: float = 1.0):
        if jitter < 0 or jitter >= 1:
            raise ValueError("jitter must lie in [0, 1)")
        self.space, self.part, self.subnets = space, part, subnets
        self.split_backward, self.jitter, self.seed = split_backward, jitter, seed
        self.latency, self.bandwidth = latency, bandwidth
        self.batch_size = batch_size or space.batch_size
        self.time_scale = time_scale
        self._stage_blocks = [list(part.blocks(s)) for s in range(part.stages)]
        self._cache: dict[Task, float] = {}

    def base(self, task: Task) -> float:
        sub = self.subnets[task.subnet]
        total = 0.0
        for b in self._stage_blocks[task.stage]:
            c = self.space.candidate(b, sub[b])
            if task.kind == FORWARD:
                total += c.fwd
            elif task.kind == BACKWARD:
                total += c.bwd_input if self.split_backward else c.bwd
            elif task.kind == WEIGHT:
                total += c.bwd_weight
        return total * self.time_scale

    def duration(self, task: Task) -> float:
        d = self._cache.get(task)
        if d is None:
            d = self.base(task)
            if self.jitter:
                raw = hashlib.blake2b(f"{self.seed}:{task.kind}:{task.subnet}:{task.stage}".encode(),
                                      digest_size=8).digest()
                u = int.from_bytes(raw, "little") / 2**64 * 2 - 1
                d *= 1 + self.jitter * u
            self._cache[task] = d
        return d

    def transfer(self) -> float:
        """Seconds to move one activation or gradient between neighbouring stages."""
        nbytes = self.space.message_bytes * self.batch_size
        return self.latency + (nbytes / self.bandwidth if self.bandwidth != math.inf else 0.0)


# ---- task time against batch size ---------------------------------------------------------------------
# A task at batch b takes time(b) = time(b0) * (alpha + (1 - alpha) * b / b0): a fixed share alpha (kernel
# launches, per-layer latency, GEMMs too small to fill the device) plus a part proportional to the samples.
# alpha = 0.1 is an estimate, not a measurement: for a 1024-wide transformer layer at 128 tokens per sample,
# GEMM throughput at batch 1 (128 rows) is roughly a third of what it is at batch 32 (4096 rows) on
# V100/A100-class devices, i.e. time(1) ~ 0.1 * time(32), which the linear model reproduces with
# alpha ~ 0.07-0.1. Smaller batches therefore deliver fewer samples per second: at b0/2 the rate is
# 0.5 / 0.55 = 91% of the reference, at b0/8 it is 0.125 / 0.2125 = 59%. Override it per run.
DEFAULT_BATCH_ALPHA = 0.1


def batch_time_scale(batch: int, reference: int, alpha: float = DEFAULT_BATCH_ALPHA) -> float:
    """Factor on a task's reference-batch time when it runs ``batch`` samples instead of ``reference``."""
    if batch < 1 or reference < 1:
        raise ValueError("batch sizes must be >= 1")
    if not 0 <= alpha < 1:
        raise ValueError("alpha must lie in [0, 1)")
    return alpha + (1 - alpha) * batch / reference
