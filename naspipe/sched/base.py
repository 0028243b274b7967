"""The machinery every scheduling policy shares (torch-free): what a stage knows, readiness, window admission,
the write frontier, speculative questions and copies. A policy (``naspipe.sched.csp``,
``naspipe.sched.baselines``) only chooses among the ready tasks it is handed (``StageScheduler._choose``).

A scheduler is told what arrived (the activation or the gradient of subnet ``j``) and what finished, and
answers "what do I run next?" (``next_task``; None means wait for the next event). It reads the subnet
sequence only through its ``Window`` and never touches tensors. The simulator and the runtime drive the
very same objects.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from naspipe.inputs.wholes import whole
from naspipe.sched.registry import PolicyError
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.sequences.sequence import SubnetStream, Window
from naspipe.spaces.shared import SharedLayers

DEFAULT_WINDOW = 200  # subnets a scheduler looks ahead (its Window), unless a run says otherwise


@dataclass(frozen=True)
class StageSpec:
    """What one stage knows statically: its index, the pipeline depth and which blocks it owns."""

    stage: int
    stages: int
    choice_blocks: tuple[int, ...]
    has_fixed: bool = False
    shared: SharedLayers = field(default_factory=SharedLayers)
    all_choice_blocks: tuple[tuple[int, ...], ...] = ()  # every stage's choice blocks (the partition)
    all_blocks: tuple[tuple[int, ...], ...] = ()  # every stage's blocks, fixed ones too (their costs count)

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1


def heap_remove(heap: list[int], x: int) -> None:
    """Remove ``x`` from ``heap`` (a heap of subnets that holds it): a pop when it is the smallest."""
    if heap[0] == x:
        heapq.heappop(heap)
    else:
        heap.remove(x)
        heapq.heapify(heap)


class Ready(NamedTuple):
    """The ready tasks a decision chooses among, as heaps of subnets (the smallest first; nothing else about
    their layout is read). ``next_task`` hands the scheduler's own heaps; a narrowed question
    (``next_task_forwarding``, ``next_task_without_forward``, ``next_task_writing``) hands smaller ones. A
    decision reads only these and takes its choice from the scheduler's own heaps (``StageScheduler._take``)."""

    forwards: list[int]
    backwards: list[int]
    weights: list[int]  # split-backward policies; empty otherwise


class StageScheduler:
    """Data readiness, window admission and the write frontier; subclasses choose the order (``_choose``).

    ``clone`` copies the containers named in ``_containers`` and clones the helpers named in ``_helpers`` (a
    subclass that keeps state of its own adds its names); every other attribute (the spec, the stream,
    numbers) a copy shares or rebinds.
    """

    name = "base"
    write_kind = BACKWARD  # the task whose completion releases this stage's candidates
    # the write of subnet j waits for the forwards of its whole aligned group [g*G, (g+1)*G) on every stage
    # (BSP's flush: G = micro_batches); 1: a subnet's write waits for no younger subnet's forward. A memory
    # gate must admit those forwards, or the oldest subnet never finishes (naspipe.sim.memory.Gate)
    flush_group = 1
    micro_batches: int | None = None  # the update's group of subnets (bsp); None: one subnet per update
    _containers: tuple[str, ...] = ("_written", "_arrived_early", "_f_ready", "_b_ready")
    _helpers: tuple[str, ...] = ("window",)

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, *, start: int = 0,
                 fence: int | None = None):
        """``start``: subnets ``< start`` are already done (resuming from a checkpoint taken at a fence);
        ``fence``: admit no subnet ``>= fence`` until ``set_fence`` moves it (see ``set_fence``)."""
        window = whole("window", window, 1, PolicyError)
        if not 0 <= start <= len(stream):
            raise PolicyError(f"start must lie in [0, {len(stream)}], got {start}")
        self.spec = spec
        self.window = Window(stream, window)
        self.window.advance(start)
        self.n = len(stream)
        self.fence = fence  # no subnet >= fence is admitted (checkpoints)
        self.lo = start  # oldest subnet whose write on this stage is not done
        self._admitted = start  # subnets [start, _admitted) are registered
        self._written: set[int] = set()
        self._arrived_early: set[int] = set()
        self._f_ready: list[int] = []
        self._b_ready: list[int] = []
        self._running: Task | None = None
        self.decisions = 0
        self._admit()

    # ---- events from the driver ------------------------------------------------------------------
    def on_activation(self, j: int) -> None:
        """The activation of ``j`` arrived from the previous stage (never called on stage 0)."""
        if j >= self._admitted:
            self._arrived_early.add(j)  # cannot happen with equal windows; kept for safety
        else:
            self._on_arrived(j)

    def on_gradient(self, j: int) -> None:
        """The output gradient of ``j`` arrived from the next stage (never called on the last stage)."""
        heapq.heappush(self._b_ready, j)

    def set_fence(self, fence: int | None) -> None:
        """Admit no subnet ``>= fence`` (None lifts it): at the fence the stage is quiescent, so its state
        (weights, optimizer, versions) is exactly the state after subnets ``< fence``, a checkpoint."""
        if fence is not None and fence < self._admitted:
            raise PolicyError(f"fence {fence} is behind subnets already admitted (< {self._admitted})")
        self.fence = fence
        self._admit()

    @property
    def at_fence(self) -> bool:
        """Every subnet before the fence is done on this stage and none after it was admitted."""
        return self.fence is not None and self.lo >= min(self.fence, self.n)

    def on_results(self) -> None:
        """A run-time generated stream received results: admit the subnets that became readable."""
        self._admit()

    def on_finish(self, task: Task) -> None:
        if task != self._running:
            raise PolicyError(f"stage {self.spec.stage}: finished {task}, but {self._running} was running")
        self._running = None
        if task.kind == FORWARD and self.spec.last:
            self._loss_computed(task.subnet)
        self._finished(task)
        if task.kind == self.write_kind:
            self._written.add(task.subnet)
            advanced = False
            while self.lo in self._written:
                self._written.discard(self.lo)
                self.lo += 1
                advanced = True
            if advanced:
                self.window.advance(self.lo)
                self._admit()

    # ---- decisions -----------------------------------------------------------------------------------
    def next_task(self) -> Task | None:
        """Pick and start the next task, or None when nothing is runnable now."""
        return self._decide(self._ready())

    def next_task_forwarding(self, j: int) -> Task | None:
        """``next_task()`` with ``F(j)`` as the only forward it may choose (None if ``j`` is not ready or a
        task runs). For a driver whose memory gate refuses the forward the policy prefers: the oldest forward
        not started always fits, so running it keeps the pipeline live whatever order the policy prefers.
        The policy may still answer with a backward or weight task."""
        if self._running is not None or j not in self._f_ready:
            return None
        return self._decide(self._ready()._replace(forwards=[j]))

    def next_task_without_forward(self) -> Task | None:
        """``next_task()`` choosing no forward (None if no backward or weight task is ready, or a task runs).
        For a driver whose memory gate refuses a forward that the policy prefers to ready backwards (csp-cp):
        a backward needs no admission and frees memory, so waiting for an event instead can deadlock."""
        if self._running is not None:
            return None
        return self._decide(self._ready()._replace(forwards=[]))

    def next_task_writing(self, allowed: int | None) -> Task | None:
        """``next_task()`` that may start no write but that of subnet ``allowed`` (None: no write), and that
        starts no forward while that write is ready (the leader waits for it in the gradient exchange); every
        other choice stays free. The followers among a stage's replicas schedule with it
        (``naspipe.sched.ordered``)."""
        ready = self._ready()
        writes = ready.weights if self.write_kind == WEIGHT else ready.backwards
        only = [allowed] if allowed is not None and allowed in writes else []
        ready = ready._replace(weights=only) if self.write_kind == WEIGHT else ready._replace(backwards=only)
        if only:  # the announced write, once ready, goes before any forward: its leader waits for it
            if self._running is not None:
                return None
            ready = ready._replace(forwards=[])
        return self._decide(ready)

    def next_weight_task(self) -> Task | None:
        """Start the oldest pending weight task now (split-backward policies; None here): a driver that
        refuses a forward for lack of memory must not wait for memory only a pending ``W`` would free."""
        return None

    @property
    def finished(self) -> bool:
        return self.lo >= self.n

    @property
    def running(self) -> Task | None:
        return self._running

    def clone(self, tracker: Callable[[Any], Any] | None = None) -> StageScheduler:
        """An independent copy for speculation (what would I run next if...?); shares the stream.

        The containers named in ``_containers`` are copied and the helpers named in ``_helpers`` cloned;
        ``tracker`` makes the copy of the causal tracker (attribute ``tracker``; default: its full ``clone``;
        ``naspipe.sched.speculate`` passes a copy-on-write or a read-only one). The one copy mechanism of a
        scheduler, cheap enough to run before every task."""
        other = object.__new__(type(self))
        d = self.__dict__.copy()
        for name in self._containers:
            d[name] = d[name].copy()
        for name in self._helpers:
            d[name] = d[name].clone()
        t = d.get("tracker")
        if t is not None:
            d["tracker"] = t.clone() if tracker is None else tracker(t)
        other.__dict__ = d
        return other

    # ---- hooks -------------------------------------------------------------------------------------
    def _choose(self, ready: Ready) -> Task | None:
        """The policy's order: one of ``ready``'s tasks, taken with ``_take`` (or built with ``_task`` after
        removing it from the scheduler's own heap), or None to wait."""
        raise NotImplementedError

    def _finished(self, task: Task) -> None:
        pass

    def _loss_computed(self, j: int) -> None:
        """The last stage finished ``F(j)``: its backward may start."""
        heapq.heappush(self._b_ready, j)

    def _register(self, j: int) -> None:
        """Subnet ``j`` entered the window."""

    def _on_arrived(self, j: int) -> None:
        heapq.heappush(self._f_ready, j)

    # ---- shared machinery --------------------------------------------------------------------------
    def _ready(self) -> Ready:
        return Ready(self._f_ready, self._b_ready, [])

    def _decide(self, ready: Ready) -> Task | None:
        if self._running is not None:
            raise PolicyError(f"stage {self.spec.stage} asked for a task while {self._running} runs")
        self.decisions += 1
        t = self._choose(ready)
        self._running = t
        return t

    def _take(self, kind: str, j: int) -> Task:
        """Remove the ready ``kind`` task of subnet ``j`` from the scheduler's own heap and return it."""
        heap_remove(self._heap(kind), j)
        return self._task(kind, j)

    def _heap(self, kind: str) -> list[int]:
        return self._f_ready if kind == FORWARD else self._b_ready

    def _admit(self) -> None:
        horizon = self.window.horizon if self.fence is None else min(self.window.horizon, self.fence)
        while self._admitted < horizon:
            j = self._admitted
            self._admitted += 1
            self._register(j)
            if self.spec.first or j in self._arrived_early:
                self._arrived_early.discard(j)
                self._on_arrived(j)

    def _task(self, kind: str, j: int) -> Task:
        return Task(kind, j, self.spec.stage)


def stage_specs(space, partition, shared: SharedLayers | None = None) -> list[StageSpec]:  # noqa: ANN001
    """One StageSpec per stage of a partitioned space."""
    shared = shared or SharedLayers()
    out = []
    for s in range(partition.stages):
        blocks = partition.blocks(s)
        out.append(StageSpec(
            stage=s, stages=partition.stages,
            choice_blocks=tuple(b for b in blocks if not space.blocks[b].fixed),
            has_fixed=any(space.blocks[b].fixed for b in blocks), shared=shared,
            all_choice_blocks=tuple(tuple(b for b in partition.blocks(t) if not space.blocks[b].fixed)
                                    for t in range(partition.stages)),
            all_blocks=tuple(tuple(partition.blocks(t)) for t in range(partition.stages)),
        ))
    return out
