"""The baselines NASPipe is compared with (torch-free): orders that ignore the causal rule.

* ``bsp``: GPipe: groups of ``M`` subnets, all forwards, all backwards, flush;
* ``asp``: PipeDream 1F1B: at most ``P - s`` subnets in flight on stage ``s``, no causal rule;
* ``pipedream``, ``2bw``, ``pipemare``, ``pipeoptim``: the same 1F1B order (``AsyncScheduler``, with an
  optional synchronous warm-up); their update semantics are in ``naspipe.runtime.update_rules.async_rules``.
"""

from __future__ import annotations

import heapq
from typing import Any

from naspipe.sched.base import DEFAULT_WINDOW, Ready, StageScheduler, StageSpec
from naspipe.sched.registry import PolicyError
from naspipe.sched.tasks import BACKWARD, FORWARD, Task
from naspipe.sequences.sequence import SubnetStream


class ASPScheduler(StageScheduler):
    """PipeDream's 1F1B: backward first, at most ``P - s`` subnets in flight, causal rule ignored."""

    name = "asp"

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, **base: Any):
        self.in_flight = 0
        self.limit = spec.stages - spec.stage
        super().__init__(spec, stream, window, **base)

    def _choose(self, ready: Ready) -> Task | None:
        if ready.backwards:
            return self._take(BACKWARD, ready.backwards[0])
        if ready.forwards and self.in_flight < self.limit:
            return self._take(FORWARD, ready.forwards[0])
        return None

    def _finished(self, task: Task) -> None:
        if task.kind == FORWARD:
            self.in_flight += 1
        elif task.kind == BACKWARD:
            self.in_flight -= 1


def group_resume_error(start: int, micro_batches: int) -> str | None:
    """Why a run of groups of ``micro_batches`` subnets cannot resume at subnet ``start`` (None: it can): one
    update per group, so only at a group boundary (the run's configuration and every stage's scheduler ask)."""
    if start % micro_batches:
        return f"bsp resumes only at a group boundary (a multiple of {micro_batches})"
    return None


class BSPScheduler(StageScheduler):
    """GPipe: groups of ``M`` subnets; all forwards, then all backwards, then a flush (one update)."""

    name = "bsp"
    _containers = (*StageScheduler._containers, "_f_done_in_group", "_held_b")

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, micro_batches: int = 4,
                 **base: Any):
        """``micro_batches``: checked by the policy's declaration (a whole number >= 1)."""
        if (why := group_resume_error(base.get("start", 0), micro_batches)) is not None:
            raise PolicyError(why)
        self.m = self.flush_group = self.micro_batches = micro_batches
        self._f_done_in_group: dict[int, int] = {}
        self._held_b: list[int] = []
        super().__init__(spec, stream, max(window, micro_batches), **base)

    def _group_size(self, g: int) -> int:
        return min(self.m, self.n - g * self.m)

    def _choose(self, ready: Ready) -> Task | None:
        if ready.backwards:
            return self._take(BACKWARD, ready.backwards[0])
        if ready.forwards:
            j = ready.forwards[0]
            if self.lo >= (j // self.m) * self.m:  # the previous group is flushed on this stage
                return self._take(FORWARD, j)
        return None

    def _loss_computed(self, j: int) -> None:
        # on the last stage a group's backwards start only after all its forwards
        g = j // self.m
        self._f_done_in_group[g] = self._f_done_in_group.get(g, 0) + 1
        self._held_b.append(j)
        if self._f_done_in_group[g] == self._group_size(g):
            for i in self._held_b:
                heapq.heappush(self._b_ready, i)
            self._held_b.clear()


class AsyncScheduler(ASPScheduler):
    """1F1B for the asynchronous baselines; their update semantics live in ``naspipe.runtime.update_rules.async_rules``.

    Options come in the policy string (``naspipe.sched.async_options``); the scheduler reads ``warmup``:
    a forward of a subnet ``j < warmup`` waits until nothing is in flight on its stage, so the first
    subnets run one at a time through the pipeline (synchronous warm-up)."""

    name = "pipedream"
    text_options = True

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, warmup: int = 0,
                 **base: Any):
        self.warmup = warmup
        super().__init__(spec, stream, window, **base)

    def _choose(self, ready: Ready) -> Task | None:
        if not ready.backwards and ready.forwards and ready.forwards[0] < self.warmup and self.in_flight:
            return None
        return super()._choose(ready)


class TwoBWScheduler(AsyncScheduler):
    name = "2bw"


class PipeMareScheduler(AsyncScheduler):
    name = "pipemare"


class PipeOptimScheduler(AsyncScheduler):
    name = "pipeoptim"
