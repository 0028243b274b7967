"""Speculation on a stage's scheduler: what would it run next, without changing it?

Why it exists: the forecast (``naspipe.sched.predictor``), the simulator's memory run and the runtime's
context switching all ask a scheduler a hypothetical question, before every task. ``speculative_copy`` is a
copy that runs ahead (``StageScheduler.clone`` with a copy-on-write causal tracker); ``peek`` shares the
tracker read-only; ``gated_next_task`` is the scheduler's choice under an admission gate (device memory),
with ``fallback_task`` when the gate refuses it. Pure: no torch, no clocks.
"""

from __future__ import annotations

from typing import Any, Protocol

from naspipe.sched.causal import CausalTracker
from naspipe.sched.policies import StageScheduler
from naspipe.sched.tasks import FORWARD, Task


def speculative_copy(sched: StageScheduler) -> StageScheduler:
    """An independent copy of ``sched`` for a speculative decision, valid until ``sched`` next changes.

    Behaves exactly like ``sched.clone()`` (same decisions), but the causal tracker's queues are copied on
    write (``CausalTracker.clone(lazy=True)``), which makes it cheap enough to run before every task.
    """
    return sched.clone(_lazy_tracker)


def _lazy_tracker(t: Any) -> Any:
    return t.clone(lazy=True) if isinstance(t, CausalTracker) else t.clone()


class _Mutation(Exception):
    pass


class _ReadOnlyTracker:
    """Shares a tracker for a peek: reads pass through, any write aborts the peek (then a copy is made)."""

    __slots__ = ("_t",)

    def __init__(self, t: CausalTracker) -> None:
        self._t = t

    def is_free(self, j: int) -> bool:
        return self._t.is_free(j)

    def blockers(self, j: int) -> list[int]:
        return self._t.blockers(j)

    def pending(self) -> int:
        return self._t.pending()

    def __getattr__(self, name: str) -> Any:
        raise _Mutation(name)


def peek(sched: StageScheduler) -> Task | None:
    """What ``sched.next_task()`` would return now, without changing ``sched`` (None: nothing runnable).

    A decision only reads the causal tracker, so the peek shares it read-only (a policy that writes to it
    while choosing falls back to a full speculative copy).
    """
    if sched.running is not None:
        return None
    other = sched.clone(_ReadOnlyTracker)
    try:
        return other.next_task()
    except _Mutation:
        return speculative_copy(sched).next_task()


class SpeculativeGate(Protocol):
    """Optional admission control the driver applies before starting a task (e.g. device memory).

    ``copy`` gives an independent copy; ``may_bind`` False means nothing can be refused now (skip the
    check); ``admits(task)`` whether ``task`` may start; ``start``/``finish`` update its state;
    ``preferred_forward`` the subnet whose forward to run when the policy's choice is refused.
    """

    def copy(self) -> SpeculativeGate: ...

    def may_bind(self) -> bool: ...

    def admits(self, task: Task) -> bool: ...

    def start(self, task: Task) -> None: ...

    def finish(self, task: Task) -> None: ...

    def preferred_forward(self) -> int | None: ...


def fallback_task(sched: StageScheduler, gate: SpeculativeGate) -> Task | None:
    """What a driver starts when ``gate`` refuses the forward the policy offers: a pending ``W`` (it frees
    memory), else a ready backward (a policy may prefer a forward to it), else the gate's preferred forward
    if it is ready and admitted; None: wait for an event."""
    t = sched.next_weight_task()
    if t is not None:
        return t
    t = sched.next_task_without_forward()
    if t is not None:
        return t
    j = gate.preferred_forward()
    if j is not None and gate.admits(Task(FORWARD, j, sched.spec.stage)):
        return sched.next_task_forwarding(j)
    return None


def gated_next_task(sched: StageScheduler, gate: SpeculativeGate | None) -> tuple[Task | None, bool]:
    """``sched.next_task()`` through an admission ``gate``: ``(task, refused)``. When the gate refuses the
    forward the policy offers, the task is ``fallback_task``'s (None: wait for an event). The one decision
    rule of every memory-aware driver: the simulator, the predictor's speculation and the runtime."""
    if gate is None or not gate.may_bind():
        return sched.next_task(), False
    t = peek(sched)
    if t is None:
        return None, False
    if gate.admits(t):
        return sched.next_task(), False
    return fallback_task(sched, gate), True
