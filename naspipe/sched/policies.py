"""Scheduling policies behind one interface: each stage owns a ``StageScheduler``.

A scheduler is told what arrived (the activation or the gradient of subnet ``j``) and what finished, and
answers "what do I run next?" (``next_task``; None means wait for the next event). It reads the subnet
sequence only through its ``Window`` and never touches tensors. The simulator and the runtime drive the
very same objects.

Policies:

* ``sequential``: one subnet in the pipeline at a time (CSP with a window of one);
* ``csp``: NASPipe's causal synchronous parallelism: any ready backward first (oldest), then the oldest
  forward whose causal dependencies are met, window-limited (the paper's order);
* ``csp-chain``: CSP, backward first, then the free forward that heads the longest chain of conflicts
  among the next subnets (``naspipe.sched.chains``), oldest on ties: a critical-path list scheduler that
  sees no further than its window;
* ``csp-cp``: CSP ranked by critical path: the ready task, backward or forward, that heads the longest path
  of work behind it (``naspipe.sched.critical``) runs first, so a just-freed forward heading a chain of
  conflicts may overtake ready backwards;
* ``csp-plan`` (the default of the command line and the library): csp-cp with every priority scaled by a
  per-task factor ``1 + eps * u(plan, stage, kind, j)`` (a hash); ``plan=0`` is csp-cp; without a plan option
  the simulator and ``TrainConfig`` first choose one by simulation (``naspipe.sim.plan_choice``);
* ``csp-bw``: CSP with a split backward: ``B`` (input gradient) goes first, the causal rule waits on
  ``W`` (weight gradient + update); ``W`` and forwards are ordered by conflict chains, so a ``W`` that
  later forwards wait for runs early and the rest fill idle time; ``W`` tasks are bounded by
  ``max_pending_w``;
* ``bsp``: GPipe: groups of ``M`` subnets, all forwards, all backwards, flush;
* ``asp``: PipeDream 1F1B: at most ``P - s`` subnets in flight on stage ``s``, no causal rule;
* ``pipedream``, ``2bw``, ``pipemare``, ``pipeoptim``: the same 1F1B order (``AsyncScheduler``, with an
  optional synchronous warm-up); their update semantics are in ``naspipe.runtime.update_rules.async_rules``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from naspipe.inputs.wholes import whole
from naspipe.sched.async_options import ASYNC_OPTIONS, check_async_options
from naspipe.sched.async_options import FLAGS as ASYNC_FLAGS
from naspipe.sched.causal import CausalTracker
from naspipe.sched.chains import ConflictChains
from naspipe.sched.critical import CriticalPaths, PathTable
from naspipe.sched.registry import (
    Policy,
    PolicyError,
    SchedulerTable,
    get_policy,
    parse_policy,
    register_policy,
    whole_numbers_from_one,
)
from naspipe.sched.registry import policy_names as policy_names
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


_COPY, _CLONE, _TRACKER, _CHECK = 1, 2, 3, 4  # how ``clone`` treats an attribute (the rest is shared)
_PLANS: dict[tuple[type, tuple[str, ...]], tuple[tuple[str, int], ...]] = {}


def _copy_plan(sched: Any) -> tuple[tuple[str, int], ...]:
    key = (type(sched), tuple(sched.__dict__))
    plan = _PLANS.get(key)
    if plan is None:
        out = []
        for name, value in sched.__dict__.items():
            if isinstance(value, CausalTracker):
                out.append((name, _TRACKER))
            elif isinstance(value, (list, set, dict)):
                out.append((name, _COPY))
            elif hasattr(value, "clone"):
                out.append((name, _CLONE))
            elif value is None:  # decided per copy: it may hold a container later
                out.append((name, _CHECK))
        plan = _PLANS[key] = tuple(out)
    return plan


class StageScheduler:
    """Data readiness, window admission and the write frontier; subclasses choose the order."""

    name = "base"
    options: tuple[str, ...] = ()  # keyword options the policy takes (e.g. "policy:N" sets the first)
    write_kind = BACKWARD  # the task whose completion releases this stage's candidates
    # the write of subnet j waits for the forwards of its whole aligned group [g*G, (g+1)*G) on every stage
    # (BSP's flush: G = micro_batches); 1: a subnet's write waits for no younger subnet's forward. A memory
    # gate must admit those forwards, or the oldest subnet never finishes (naspipe.sim.memory.Gate)
    flush_group = 1
    micro_batches: int | None = None  # the update's group of subnets (bsp); None: one subnet per update

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

    # ---- one write order across replicas (naspipe.sched.ordered) --------------------------------
    @property
    def _write_heap(self) -> str:
        """The attribute holding this policy's ready writes (a heap of subnets)."""
        return "_w_ready" if self.write_kind == WEIGHT else "_b_ready"

    def next_task_writing(self, allowed: int | None) -> Task | None:
        """``next_task()`` that may start no write but that of subnet ``allowed`` (None: no write), and that
        starts no forward while that write is ready (the leader waits for it in the gradient exchange); every
        other choice stays free. The followers among a stage's replicas schedule with it."""
        ready: list[int] = getattr(self, self._write_heap)
        later = [x for x in ready if x != allowed]
        setattr(self, self._write_heap, [x for x in ready if x == allowed])
        try:  # the announced write, once ready, goes before any forward: its leader waits for it
            if len(later) < len(ready):
                return self.next_task_without_forward()
            return self.next_task()
        finally:
            merged = later + getattr(self, self._write_heap)
            heapq.heapify(merged)
            setattr(self, self._write_heap, merged)

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

    def next_task(self) -> Task | None:
        """Pick and start the next task, or None when nothing is runnable now."""
        if self._running is not None:
            raise PolicyError(f"stage {self.spec.stage} asked for a task while {self._running} runs")
        self.decisions += 1
        t = self._choose()
        self._running = t
        return t

    def next_task_forwarding(self, j: int) -> Task | None:
        """``next_task()`` with ``F(j)`` as the only forward it may choose (None if ``j`` is not ready or a
        task runs). For a driver whose memory gate refuses the forward the policy prefers: the oldest forward
        not started always fits, so running it keeps the pipeline live whatever order the policy prefers.
        The policy may still answer with a backward or weight task."""
        if self._running is not None or j not in self._f_ready:
            return None
        rest = [x for x in self._f_ready if x != j]
        self._f_ready = [j]
        try:
            return self.next_task()
        finally:
            self._f_ready = rest + self._f_ready
            heapq.heapify(self._f_ready)

    def next_task_without_forward(self) -> Task | None:
        """``next_task()`` choosing no forward (None if no backward or weight task is ready, or a task runs).
        For a driver whose memory gate refuses a forward that the policy prefers to ready backwards (csp-cp):
        a backward needs no admission and frees memory, so waiting for an event instead can deadlock."""
        if self._running is not None:
            return None
        held, self._f_ready = self._f_ready, []
        try:
            return self.next_task()
        finally:
            self._f_ready = held + self._f_ready
            heapq.heapify(self._f_ready)

    def next_weight_task(self) -> Task | None:
        """Start the oldest pending weight task now (split-backward policies; None here): a driver that
        refuses a forward for lack of memory must not wait for memory only a pending ``W`` would free."""
        return None

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

    @property
    def finished(self) -> bool:
        return self.lo >= self.n

    def clone(self, tracker: Callable[[Any], Any] | None = None) -> StageScheduler:
        """An independent copy for speculation (what would I run next if...?); shares the stream.

        Containers are copied and helpers with a ``clone`` cloned; ``tracker`` makes the copy of the causal
        tracker (default: its full ``clone``; ``naspipe.sched.predictor`` passes a copy-on-write or a
        read-only one). The one copy mechanism of a scheduler; which attribute is copied how is decided once
        per class and attribute layout, so a copy before every task stays cheap."""
        other = object.__new__(type(self))
        d = self.__dict__.copy()
        for name, how in _copy_plan(self):
            v = d[name]
            if v is None:
                continue
            if how == _COPY or (how == _CHECK and isinstance(v, (list, set, dict))):
                d[name] = v.copy()
            elif how == _TRACKER and tracker is not None:
                d[name] = tracker(v)
            elif how != _CHECK or hasattr(v, "clone"):
                d[name] = v.clone()
        other.__dict__ = d
        return other

    @property
    def running(self) -> Task | None:
        return self._running

    # ---- hooks -------------------------------------------------------------------------------------
    def _choose(self) -> Task | None:
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


class CSPScheduler(StageScheduler):
    """NASPipe's CSP: backward first, then the oldest causally-free forward, window-limited.

    The public hooks of a user policy (``docs/policies.md``): subclass it and override ``choose_forward``
    and/or ``choose_backward``. The scheduler computes what may run (a forward only once the subnet's
    activation arrived, every earlier conflicting write on this stage ended and the shared-layer gate allows
    it), asks the hook to pick one of those and refuses any other answer (``PolicyError``), so a hook orders
    tasks but cannot break the causal rule. While a task is ready the stage never idles. A hook may read
    ``self.spec`` (stage, stages, choice blocks), ``self.window[j]`` (subnet ``j``'s candidate per block),
    ``self.lo`` (the oldest subnet not written on this stage) and ``self.n`` (subnets in the run); it must
    decide from those alone (no clock, no global randomness), or simulation and training order differently.
    The built-in orders below (``csp-chain``, ``csp-cp``, ``csp-plan``, ``csp-bw``) order by their own
    priorities: overriding a hook in a subclass of theirs is refused.
    """

    name = "csp"
    _hooked = False  # a subclass overrides choose_forward or choose_backward (set by __init_subclass__)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._hooked = (cls.choose_forward is not CSPScheduler.choose_forward
                       or cls.choose_backward is not CSPScheduler.choose_backward)
        if cls._hooked and cls._choose is not CSPScheduler._choose:
            raise TypeError(f"{cls.__name__}: choose_forward/choose_backward are the hooks of CSPScheduler's "
                            "order; subclass CSPScheduler itself (this class orders tasks its own way)")

    # ---- the public hooks of a user policy -------------------------------------------------------
    def choose_backward(self, ready: tuple[int, ...]) -> int | None:
        """Which ready backward runs now: one of ``ready`` (subnets, oldest first, never empty), or None to
        run a free forward first (when no forward may run, ``ready[0]`` runs: the stage never idles with work
        ready). Any ready backward is causally safe. Default: ``ready[0]``, backward first (CSP's order)."""
        return ready[0]

    def choose_forward(self, ready: tuple[int, ...]) -> int:
        """Which forward runs now: one of ``ready`` (the subnets whose forward may run on this stage now:
        arrived, causally free, allowed by the shared-layer gate; oldest first, never empty). Asked only when
        no backward was chosen. Default: ``ready[0]``, the oldest (CSP's order)."""
        return ready[0]

    def free_forwards(self) -> tuple[int, ...]:
        """The subnets whose forward may run on this stage now, oldest first (what ``choose_forward`` gets)."""
        return tuple(j for j in sorted(self._f_ready) if self._forward_allowed(j))

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, **base: Any):
        self.tracker = CausalTracker()
        self._arrived: set[int] = set()
        self._gate = spec.shared.gate if spec.has_fixed else None
        super().__init__(spec, stream, window, **base)

    def _keys(self, j: int) -> list[tuple[int, int]]:
        sub = self.window[j]
        return [(b, sub[b]) for b in self.spec.choice_blocks]

    def _register(self, j: int) -> None:
        if self.tracker.admit(j, self._keys(j)) and j in self._arrived:
            heapq.heappush(self._f_ready, j)

    def _on_arrived(self, j: int) -> None:
        self._arrived.add(j)
        if self.tracker.is_free(j):
            heapq.heappush(self._f_ready, j)

    def _forward_allowed(self, j: int) -> bool:
        return self._gate is None or j <= self.lo + self._gate

    def _pop_forward(self) -> Task | None:
        if self._f_ready and self._forward_allowed(self._f_ready[0]):
            j = heapq.heappop(self._f_ready)
            self._arrived.discard(j)
            return self._task(FORWARD, j)
        return None

    def _choose(self) -> Task | None:
        if self._hooked:
            return self._choose_by_hooks()
        if self._b_ready:
            return self._task(BACKWARD, heapq.heappop(self._b_ready))
        return self._pop_forward()

    def _choose_by_hooks(self) -> Task | None:
        backwards = tuple(sorted(self._b_ready))
        if backwards:
            j = self.choose_backward(backwards)
            if j is not None:
                return self._take_backward(self._checked("choose_backward", j, backwards))
        forwards = self.free_forwards()
        if forwards:
            j = self._checked("choose_forward", self.choose_forward(forwards), forwards)
            self._f_ready.remove(j)
            heapq.heapify(self._f_ready)
            self._arrived.discard(j)
            return self._task(FORWARD, j)
        return self._take_backward(backwards[0]) if backwards else None

    def _take_backward(self, j: int) -> Task:
        self._b_ready.remove(j)
        heapq.heapify(self._b_ready)
        return self._task(BACKWARD, j)

    def _checked(self, hook: str, j: Any, ready: tuple[int, ...]) -> int:
        if type(j) is not int or j not in ready:  # bool and numpy ints are not subnets either
            raise PolicyError(f"policy {self.name!r}: {hook} returned {j!r} on stage {self.spec.stage}; "
                              f"it must return one of the ready subnets {list(ready)}")
        return j

    def _finished(self, task: Task) -> None:
        if task.kind == self.write_kind:
            for f in self.tracker.release(task.subnet):
                if f in self._arrived:
                    heapq.heappush(self._f_ready, f)


class ChainCSPScheduler(CSPScheduler):
    """CSP with critical-path priorities: backward first, then the free forward heading the longest chain.

    The chains are built over the next ``CHAIN_HORIZON`` subnets after the oldest unfinished one (longer
    horizons measured no better and cost more); a link on stage ``t`` weighs the round trip from ``t``
    (``2 (P - t)`` tasks, one more with a split backward).
    """

    name = "csp-chain"
    CHAIN_HORIZON = 16

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, **base: Any):
        self.chains = self._make_chains(spec, stream, base.get("start", 0))  # (before the first admission)
        super().__init__(spec, stream, window, **base)
        self._chained = self.lo  # subnets [start, _chained) are in the chains

    def _make_chains(self, spec: StageSpec, stream: SubnetStream, start: int) -> Any:
        """The chains this policy ranks by. Every scheduler over this stream and layout from ``start`` (a
        simulation's stages, their copies) reads one ``PathTable``."""
        blocks = spec.all_choice_blocks or tuple(spec.choice_blocks if t == spec.stage else ()
                                                 for t in range(spec.stages))
        extra = 1.0 if self.write_kind == WEIGHT else 0.0
        weights = [2.0 * (spec.stages - t) + extra for t in range(spec.stages)]
        return ConflictChains(stream.space, blocks, weights, PathTable.shared(stream, blocks, start))

    def _sync_chains(self) -> None:
        hi = min(self.lo + self.CHAIN_HORIZON, self._admitted)
        while self._chained < hi:
            self.chains.admit(self._chained, self.window[self._chained])
            self._chained += 1

    def on_finish(self, task: Task) -> None:
        lo = self.lo
        super().on_finish(task)
        for j in range(lo, min(self.lo, self._chained)):
            self.chains.forget(j)

    def _forward_priority(self, j: int) -> float:
        return 2 * self.spec.stages - 1 - self.spec.stage + self.chains.depth.get(j, 0.0)

    def _best_forward(self) -> tuple[float, int] | None:
        """(priority, subnet) of the best allowed free forward; only chained subnets can beat the oldest."""
        if not self._f_ready or not self._forward_allowed(self._f_ready[0]):
            return None
        self._sync_chains()
        best = (self._forward_priority(self._f_ready[0]), -self._f_ready[0])
        for j in self._f_ready:
            if j < self._chained and self._forward_allowed(j):
                best = max(best, (self._forward_priority(j), -j))
        return best[0], -best[1]

    def _take_forward(self, j: int) -> Task:
        if self._f_ready[0] == j:
            heapq.heappop(self._f_ready)
        else:
            self._f_ready.remove(j)
            heapq.heapify(self._f_ready)
        self._arrived.discard(j)
        return self._task(FORWARD, j)

    def _choose(self) -> Task | None:
        if self._b_ready:
            return self._task(BACKWARD, heapq.heappop(self._b_ready))
        best = self._best_forward()
        return self._take_forward(best[1]) if best else None


class CriticalPathCSPScheduler(ChainCSPScheduler):
    """CSP by critical path: every ready task, backward or forward, ranked by the longest path it heads.

    The tails come from ``naspipe.sched.critical`` over the next ``CHAIN_HORIZON`` (16) subnets (32 measured
    the same at 30 and 1,000 subnets on naspipe-k48/k96 and costs twice as much), with durations
    estimated from the space's cost model. The ready task with the longest tail runs first, the oldest among
    equals, except that a forward overtakes ready backwards only when its tail is more than ``OVERTAKE``
    (5%) longer than theirs (a backward frees memory and unblocks the upstream stage; of 0-30%, 5-10% did
    best against the optimum at 30 subnets and the bound at 1,000 together). A ready forward beyond the
    horizon counts 0, so backwards go first as in ``csp``. A just-freed forward that heads a long chain of
    conflicts overtakes backwards nobody waits for, which "backward always first" never lets it do. The
    order stays exact (the causal rule decides what is ready), so results are bit-identical to ``csp``'s.
    """

    name = "csp-cp"
    OVERTAKE = 0.05  # a forward overtakes ready backwards only with a tail more than 5% longer

    def _make_chains(self, spec: StageSpec, stream: SubnetStream, start: int) -> CriticalPaths:
        """The critical paths over every block (fixed ones cost time too), fed by ``_sync_chains``."""
        blocks = spec.all_blocks or spec.all_choice_blocks or tuple(
            spec.choice_blocks if t == spec.stage else () for t in range(spec.stages))
        return CriticalPaths(stream.space, blocks, PathTable.shared(stream, blocks, start))

    @property
    def paths(self) -> CriticalPaths:
        return self.chains  # type: ignore[return-value]

    def _forward_priority(self, j: int) -> float:
        return self.paths.forward(j, self.spec.stage)

    def _backward_priority(self, j: int) -> float:
        return self.paths.backward(j, self.spec.stage)

    def _choose(self) -> Task | None:
        best_f = self._best_forward()
        if self._b_ready:
            self._sync_chains()
            pb, jb = max((self._backward_priority(j), -j) for j in self._b_ready)
            if best_f is not None and best_f[0] > pb * (1.0 + self.OVERTAKE):
                return self._take_forward(best_f[1])
            j = -jb
            if self._b_ready[0] == j:
                heapq.heappop(self._b_ready)
            else:
                self._b_ready.remove(j)
                heapq.heapify(self._b_ready)
            return self._task(BACKWARD, j)
        return self._take_forward(best_f[1]) if best_f else None


_KIND_CODE = {FORWARD: 0, BACKWARD: 1, WEIGHT: 2}
_MASK = (1 << 64) - 1


def plan_factor_unit(plan: int, stage: int, kind: str, j: int) -> float:
    """``u(plan, stage, kind, j)`` in ``[0, 1)``: a hash (splitmix64 over the four integers), a pure function of
    its arguments, so a task keeps its factor whichever order tasks become ready in (simulator or runtime) and
    in every process (no Python ``hash``, which is salted per process)."""
    h = 0x9E3779B97F4A7C15
    for v in (plan, stage, _KIND_CODE[kind], j):
        h = (h ^ (v & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        h = (h + 0x9E3779B97F4A7C15) & _MASK
        h ^= h >> 31
        h = h * 0x94D049BB133111EB & _MASK
        h ^= h >> 29
    return (h >> 11) / float(1 << 53)


class PlannedCriticalPathCSPScheduler(CriticalPathCSPScheduler):
    """``csp-cp`` with every priority scaled by a fixed per-task factor ``1 + eps * u(plan, stage, kind, j)``.

    The factors are a hash of the task (``plan_factor_unit``), chosen by a plan number: ``plan=0`` is exactly
    ``csp-cp``; ``naspipe.sim.choose_plan`` simulates a fixed number of plans before a run and keeps the one with
    the shortest makespan (optimal schedules hold some ready tasks back, which no fixed greedy rule does on every
    instance; a plan picks, per instance, which near-equal priorities of csp-cp to order the other way; see
    ``naspipe.sim.plan_choice``). A decision costs
    what csp-cp's does plus a hash per ranked task; the order stays exact (the causal rule decides what is
    ready), so results are bit-identical to ``csp``'s whatever the plan.
    """

    name = "csp-plan"
    options = ("plan", "eps")
    EPS = 0.2  # the default largest relative perturbation

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, plan: int = 0,
                 eps: float | None = None, **base: Any):
        eps = self.EPS if eps is None else float(eps)
        if not isinstance(plan, int) or plan < 0 or not 0.0 <= eps <= 10.0:
            raise PolicyError(f"csp-plan needs plan >= 0 (a whole number) and eps in [0, 10], got {plan}, {eps}")
        self.plan, self.eps = plan, eps
        super().__init__(spec, stream, window, **base)

    def _factor(self, kind: str, j: int) -> float:
        if self.plan == 0:
            return 1.0
        return 1.0 + self.eps * plan_factor_unit(self.plan, self.spec.stage, kind, j)

    def _forward_priority(self, j: int) -> float:
        return super()._forward_priority(j) * self._factor(FORWARD, j)

    def _backward_priority(self, j: int) -> float:
        return super()._backward_priority(j) * self._factor(BACKWARD, j)


class SequentialScheduler(CSPScheduler):
    """One subnet at a time: CSP with a window of one."""

    name = "sequential"

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = 1, **base: Any):
        super().__init__(spec, stream, 1, **base)


class SplitBackwardCSPScheduler(ChainCSPScheduler):
    """CSP with the backward split into ``B`` (input gradient) and ``W`` (weight gradient + update).

    Order: the oldest ``W`` when ``max_pending_w`` are pending (each holds activations and output
    gradients); any ready ``B`` (it unblocks the upstream stage); then a ``W`` or a forward by conflict-chain
    priority: a ``W`` whose subnet heads a long chain of later conflicting subnets outranks a forward,
    a ``W`` that nobody waits for only fills idle time.
    """

    name = "csp-bw"
    options = ("max_pending_w",)
    write_kind = WEIGHT

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW,
                 max_pending_w: int | None = None, **base: Any):
        self._w_ready: list[int] = []
        self.max_pending_w = whole("max_pending_w", max_pending_w if max_pending_w is not None else 2 * spec.stages,
                                   1, PolicyError)
        super().__init__(spec, stream, window, **base)

    @property
    def pending_w(self) -> int:
        return len(self._w_ready)

    def next_weight_task(self) -> Task | None:
        if self._running is not None or not self._w_ready:
            return None
        limit = self.max_pending_w
        self.max_pending_w = 1  # the policy's own rule for a full W queue: the oldest W first
        try:
            return self.next_task()
        finally:
            self.max_pending_w = limit

    def _finished(self, task: Task) -> None:
        if task.kind == BACKWARD:
            heapq.heappush(self._w_ready, task.subnet)
        super()._finished(task)

    def _choose(self) -> Task | None:
        if self._w_ready and len(self._w_ready) >= self.max_pending_w:
            return self._task(WEIGHT, heapq.heappop(self._w_ready))
        if self._b_ready:
            return self._task(BACKWARD, heapq.heappop(self._b_ready))
        best_f = self._best_forward()
        if self._w_ready:
            self._sync_chains()
            depth = self.chains.depth
            w = max(self._w_ready, key=lambda i: (depth.get(i, 0.0), -i))
            if best_f is None or depth.get(w, 0.0) > best_f[0]:
                self._w_ready.remove(w)
                heapq.heapify(self._w_ready)
                return self._task(WEIGHT, w)
        return self._take_forward(best_f[1]) if best_f else None


class ASPScheduler(StageScheduler):
    """PipeDream's 1F1B: backward first, at most ``P - s`` subnets in flight, causal rule ignored."""

    name = "asp"

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, **base: Any):
        self.in_flight = 0
        self.limit = spec.stages - spec.stage
        super().__init__(spec, stream, window, **base)

    def _choose(self) -> Task | None:
        if self._b_ready:
            return self._task(BACKWARD, heapq.heappop(self._b_ready))
        if self._f_ready and self.in_flight < self.limit:
            return self._task(FORWARD, heapq.heappop(self._f_ready))
        return None

    def _finished(self, task: Task) -> None:
        if task.kind == FORWARD:
            self.in_flight += 1
        elif task.kind == BACKWARD:
            self.in_flight -= 1


class BSPScheduler(StageScheduler):
    """GPipe: groups of ``M`` subnets; all forwards, then all backwards, then a flush (one update)."""

    name = "bsp"
    options = ("micro_batches",)

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, micro_batches: int = 4,
                 **base: Any):
        micro_batches = whole("bsp's micro_batches", micro_batches, 1, PolicyError)  # (2.5 deadlocked its groups)
        if base.get("start", 0) % micro_batches:
            raise PolicyError(f"bsp resumes only at a group boundary (a multiple of {micro_batches})")
        self.m = self.flush_group = self.micro_batches = micro_batches
        self._f_done_in_group: dict[int, int] = {}
        self._held_b: list[int] = []
        super().__init__(spec, stream, max(window, micro_batches), **base)

    def _group_size(self, g: int) -> int:
        return min(self.m, self.n - g * self.m)

    def _choose(self) -> Task | None:
        if self._b_ready:
            return self._task(BACKWARD, heapq.heappop(self._b_ready))
        if self._f_ready:
            j = self._f_ready[0]
            if self.lo >= (j // self.m) * self.m:  # the previous group is flushed on this stage
                heapq.heappop(self._f_ready)
                return self._task(FORWARD, j)
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

    def _choose(self) -> Task | None:
        if not self._b_ready and self._f_ready and self._f_ready[0] < self.warmup and self.in_flight:
            return None
        return super()._choose()


class TwoBWScheduler(AsyncScheduler):
    name = "2bw"


class PipeMareScheduler(AsyncScheduler):
    name = "pipemare"


class PipeOptimScheduler(AsyncScheduler):
    name = "pipeoptim"


# The built-in policies, declared once (``naspipe.sched.registry``); ``register_policy`` adds a user's own.
for _policy in (
    Policy("sequential", SequentialScheduler, causal=True, replicas=True,
           doc="one subnet in the pipeline at a time"),
    Policy("csp", CSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="causal synchronous parallelism: backward first, then the oldest ready forward"),
    Policy("csp-chain", ChainCSPScheduler, causal=True, replicas=True,
           doc="CSP; among ready forwards the head of the longest conflict chain"),
    Policy("csp-cp", CriticalPathCSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="CSP ranked by critical path: the ready task heading the longest path of work runs first"),
    Policy("csp-plan", PlannedCriticalPathCSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="csp-cp with per-task priority factors chosen by a plan number (naspipe.sim.plan_choice picks one)",
           options={"plan": int, "eps": float}),
    Policy("csp-bw", SplitBackwardCSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="CSP with a split backward (B, then W)", options={"max_pending_w": int},
           check=whole_numbers_from_one),
    Policy("bsp", BSPScheduler, causal=False, updates="group", in_flight="group", delayed_shared=False,
           doc="GPipe: groups of M subnets, flush", options={"micro_batches": int}, check=whole_numbers_from_one),
    Policy("asp", ASPScheduler, causal=False, updates="stashed", in_flight="pipeline", delayed_shared=False,
           doc="PipeDream 1F1B with weight stashing"),
    *(Policy(name, cls, causal=False, updates="async", in_flight="pipeline", delayed_shared=False,
             doc="asynchronous baseline (naspipe.runtime.update_rules.async_rules)", options=ASYNC_OPTIONS[name],
             flags=ASYNC_FLAGS & set(ASYNC_OPTIONS[name]), check=check_async_options)
      for name, cls in (("pipedream", AsyncScheduler), ("2bw", TwoBWScheduler), ("pipemare", PipeMareScheduler),
                        ("pipeoptim", PipeOptimScheduler))),
):
    register_policy(_policy)

POLICIES = SchedulerTable()  # {name: scheduler class}, a live view of the registry


DEFAULT_POLICY = "csp-plan"  # what `naspipe simulate` and `naspipe train` run without --policy ("csp" is the paper's);
# without a plan option a plan is chosen by simulation first (naspipe.sim.plan_choice)


def policy_class(policy: str) -> type[StageScheduler]:
    """The scheduler class of ``policy`` (``bsp:8``, ``pipemare:t1=4`` name it before the colon)."""
    return get_policy(policy).scheduler


def follows_causal_rule(policy: str) -> bool:
    """True for the causal policies (the CSP family and those registered with ``causal=True``): sequential
    semantics, so the causal lower bound binds them and their traces must pass ``naspipe.sched.trace.check_causal``."""
    return get_policy(policy).causal


def make_scheduler(policy: str, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, *, start: int = 0,
                   fence: int | None = None, **options: int) -> StageScheduler:
    """A fresh scheduler of ``policy`` for one stage. Options: ``micro_batches`` (bsp), ``max_pending_w``."""
    pol, text = parse_policy(policy)  # the one grammar (naspipe.sched.registry)
    name, cls = pol.name, pol.scheduler
    text_options = getattr(cls, "text_options", False)  # asynchronous baselines: the scheduler reads warmup only
    options = {**options, **{k: v for k, v in text.items()
                             if k in cls.options or (text_options and k == "warmup" and v)}}
    opts = {k: v for k, v in options.items() if v is not None}
    bad = set(opts) - set(cls.options) - ({"warmup"} if getattr(cls, "text_options", False) else set())
    if bad:
        raise PolicyError(f"policy {name!r} takes no option {sorted(bad)}")
    return cls(spec, stream, window, start=start, fence=fence, **opts)


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
