"""One write order for the replicas of a stage: a follower may start only the write its leader announced.

Why it exists: the replicas of a stage combine their gradients with a collective before every write
(``naspipe.runtime.transport.replica_group``), so they must reach their writes in the same order, whatever order
messages arrive in. Replica 0 of a stage (the leader) schedules freely and announces each write (``B``, or ``W`` with
a split backward) as it starts it; the other replicas (followers) drive their schedulers through
``next_task_writing``, which lets a write start only when it is the next one announced. Every other
choice (forwards, input-gradient ``B`` of a split backward) stays free. The leader's order is a schedule
that happened, and a follower's writes are a prefix of it, so the followers cannot deadlock where the
leader did not. No torch here.
"""

from __future__ import annotations

from typing import Any

from naspipe.sched.tasks import Task


def next_task_writing(sched: Any, allowed: int | None) -> Task | None:
    """``sched.next_task()`` that may start no write but that of subnet ``allowed`` (None: no write).

    The scheduler holds its ready writes itself (``StageScheduler.next_task_writing``); a policy whose
    scheduler lacks the method cannot train with replicas (``Policy.replicas``)."""
    return sched.next_task_writing(allowed)
