"""The causal family of policies (torch-free): CSP and the orders built on it.

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
  ``max_pending_w``.

Every one of them decides only what runs first among the tasks the causal rule allows, so their results are
bit-identical to sequential training's.
"""

from __future__ import annotations

import heapq
from typing import Any

from naspipe.sched.base import DEFAULT_WINDOW, Ready, StageScheduler, StageSpec
from naspipe.sched.causal import CausalTracker
from naspipe.sched.chains import ConflictChains
from naspipe.sched.critical import CriticalPaths, PathTable
from naspipe.sched.registry import PolicyError
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.sequences.sequence import SubnetStream


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
    _containers = (*StageScheduler._containers, "_arrived")  # and the causal tracker (``clone``)

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
        return self._free_forwards(self._f_ready)

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

    def _free_forwards(self, forwards: list[int]) -> tuple[int, ...]:
        return tuple(j for j in sorted(forwards) if self._forward_allowed(j))

    def _take(self, kind: str, j: int) -> Task:
        if kind == FORWARD:
            self._arrived.discard(j)
        return super()._take(kind, j)

    def _choose(self, ready: Ready) -> Task | None:
        if self._hooked:
            return self._choose_by_hooks(ready)
        if ready.backwards:
            return self._take(BACKWARD, ready.backwards[0])
        if ready.forwards and self._forward_allowed(ready.forwards[0]):
            return self._take(FORWARD, ready.forwards[0])
        return None

    def _choose_by_hooks(self, ready: Ready) -> Task | None:
        backwards = tuple(sorted(ready.backwards))
        if backwards:
            j = self.choose_backward(backwards)
            if j is not None:
                return self._take(BACKWARD, self._checked("choose_backward", j, backwards))
        forwards = self._free_forwards(ready.forwards)
        if forwards:
            return self._take(FORWARD, self._checked("choose_forward", self.choose_forward(forwards), forwards))
        return self._take(BACKWARD, backwards[0]) if backwards else None

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


class SequentialScheduler(CSPScheduler):
    """One subnet at a time: CSP with a window of one."""

    name = "sequential"

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = 1, **base: Any):
        super().__init__(spec, stream, 1, **base)


class ChainCSPScheduler(CSPScheduler):
    """CSP with critical-path priorities: backward first, then the free forward heading the longest chain.

    The chains are built over the next ``CHAIN_HORIZON`` subnets after the oldest unfinished one (longer
    horizons measured no better and cost more); a link on stage ``t`` weighs the round trip from ``t``
    (``2 (P - t)`` tasks, one more with a split backward).
    """

    name = "csp-chain"
    CHAIN_HORIZON = 16
    _helpers = (*CSPScheduler._helpers, "chains")

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

    def _best_forward(self, forwards: list[int]) -> tuple[float, int] | None:
        """(priority, subnet) of the best allowed forward of ``forwards`` (a heap); only chained subnets can
        beat the oldest."""
        if not forwards or not self._forward_allowed(forwards[0]):
            return None
        self._sync_chains()
        best = (self._forward_priority(forwards[0]), -forwards[0])
        for j in forwards:
            if j < self._chained and self._forward_allowed(j):
                best = max(best, (self._forward_priority(j), -j))
        return best[0], -best[1]

    def _choose(self, ready: Ready) -> Task | None:
        if ready.backwards:
            return self._take(BACKWARD, ready.backwards[0])
        best = self._best_forward(ready.forwards)
        return self._take(FORWARD, best[1]) if best else None


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

    def _choose(self, ready: Ready) -> Task | None:
        best_f = self._best_forward(ready.forwards)
        if ready.backwards:
            self._sync_chains()
            pb, jb = max((self._backward_priority(j), -j) for j in ready.backwards)
            if best_f is not None and best_f[0] > pb * (1.0 + self.OVERTAKE):
                return self._take(FORWARD, best_f[1])
            return self._take(BACKWARD, -jb)
        return self._take(FORWARD, best_f[1]) if best_f else None


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


def check_plan_options(name: str, options: dict[str, object]) -> None:
    """csp-plan's rule beyond types and signs (its ``Policy.check``): ``eps`` lies in [0, 10]."""
    eps = options.get("eps")
    if isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps > 10.0:
        raise PolicyError(f"csp-plan needs plan >= 0 (a whole number) and eps in [0, 10], "
                          f"got {options.get('plan', 0)}, {float(eps)}")


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
    EPS = 0.2  # the default largest relative perturbation

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, plan: int = 0,
                 eps: float | None = None, **base: Any):
        """``plan``, ``eps``: checked by the policy's declaration (``check_plan_options``)."""
        self.plan, self.eps = plan, self.EPS if eps is None else float(eps)
        self._factors: dict[tuple[str, int], float] = {}  # a task's factor, hashed once (ranked again and again)
        super().__init__(spec, stream, window, **base)

    def _factor(self, kind: str, j: int) -> float:
        if self.plan == 0:
            return 1.0
        f = self._factors.get((kind, j))
        if f is None:
            f = self._factors[kind, j] = 1.0 + self.eps * plan_factor_unit(self.plan, self.spec.stage, kind, j)
        return f

    def on_finish(self, task: Task) -> None:
        lo = self.lo
        super().on_finish(task)
        for j in range(lo, self.lo):  # done on this stage: never ranked again (a long run keeps no factor of it)
            self._factors.pop((FORWARD, j), None)
            self._factors.pop((BACKWARD, j), None)

    def _forward_priority(self, j: int) -> float:
        return super()._forward_priority(j) * self._factor(FORWARD, j)

    def _backward_priority(self, j: int) -> float:
        return super()._backward_priority(j) * self._factor(BACKWARD, j)


class SplitBackwardCSPScheduler(ChainCSPScheduler):
    """CSP with the backward split into ``B`` (input gradient) and ``W`` (weight gradient + update).

    Order: the oldest ``W`` when ``max_pending_w`` are pending (each holds activations and output
    gradients); any ready ``B`` (it unblocks the upstream stage); then a ``W`` or a forward by conflict-chain
    priority: a ``W`` whose subnet heads a long chain of later conflicting subnets outranks a forward,
    a ``W`` that nobody waits for only fills idle time.
    """

    name = "csp-bw"
    write_kind = WEIGHT
    _containers = (*ChainCSPScheduler._containers, "_w_ready")

    def __init__(self, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW,
                 max_pending_w: int | None = None, **base: Any):
        """``max_pending_w`` (default ``2 P``): checked by the policy's declaration (a whole number >= 1)."""
        self._w_ready: list[int] = []
        self.max_pending_w = 2 * spec.stages if max_pending_w is None else max_pending_w
        super().__init__(spec, stream, window, **base)

    @property
    def pending_w(self) -> int:
        return len(self._w_ready)

    def next_weight_task(self) -> Task | None:
        if self._running is not None or not self._w_ready:
            return None
        self.decisions += 1  # the policy's own rule for a full W queue: the oldest W first
        self._running = self._take(WEIGHT, self._w_ready[0])
        return self._running

    def _ready(self) -> Ready:
        return Ready(self._f_ready, self._b_ready, self._w_ready)

    def _heap(self, kind: str) -> list[int]:
        return self._w_ready if kind == WEIGHT else super()._heap(kind)

    def _finished(self, task: Task) -> None:
        if task.kind == BACKWARD:
            heapq.heappush(self._w_ready, task.subnet)
        super()._finished(task)

    def _choose(self, ready: Ready) -> Task | None:
        if ready.weights and len(ready.weights) >= self.max_pending_w:
            return self._take(WEIGHT, ready.weights[0])
        if ready.backwards:
            return self._take(BACKWARD, ready.backwards[0])
        best_f = self._best_forward(ready.forwards)
        if ready.weights:
            self._sync_chains()
            depth = self.chains.depth
            w = max(ready.weights, key=lambda i: (depth.get(i, 0.0), -i))
            if best_f is None or depth.get(w, 0.0) > best_f[0]:
                return self._take(WEIGHT, w)
        return self._take(FORWARD, best_f[1]) if best_f else None
