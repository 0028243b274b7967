"""Device memory of a pipeline stage: a byte budget, candidates swapped over PCIe, activations in flight.

Why it exists: a supernet does not fit on one device. NASPipe keeps the whole supernet in host memory
and holds on each stage's device only the candidates its running and soon-to-run tasks need, which
leaves room for a large batch; a baseline that keeps its whole stage share resident must shrink its
batch instead. This module models that trade-off for the simulator; ``naspipe.runtime.context`` is the
torch counterpart.

What occupies a stage's device (``StageMemory.used``, never above the budget):

* parameters of resident candidates (``param_bytes`` of each ``(block, choice)`` key on the stage);
* activations of in-flight subnets: ``act_bytes`` per sample x batch, summed over the stage's blocks,
  held from the start of ``F(j,s)`` until the write of ``j`` on ``s`` ends (``B``, or ``W`` when the
  backward is split).

A candidate is *pinned* while a task that uses it is chosen or running (``pin="task"``, the default), or,
with ``pin="subnet"``, from ``F(j,s)`` until ``j``'s write (the simple choice when autograd keeps
references to the weights). Pinned candidates are never evicted. Pinning per task is what lets a stage
hold many subnets in flight on a small budget: between ``F(j,s)`` and its backward, ``j`` holds only its
activations; its layers are clean (CSP lets no other subnet write them in between), so they may be
dropped and fetched again before the backward, which the forecast covers (on the runtime side this is a
``torch.autograd.graph.saved_tensors_hooks`` pair: the runtime offers both modes, ``pin="subnet"`` by default
because its budget counts candidates only, and ``pin="task"`` through ``naspipe.runtime.switching``).

Host <-> device copies run on two copy engines per stage (host-to-device and device-to-host, PCIe is
full duplex) that overlap compute. A load moves ``param_bytes`` at ``bandwidth_h2d``; evicting a candidate
that was updated on the device (dirty) writes it back at ``bandwidth_d2h``, and its memory is free only
when the copy ends; a clean candidate is dropped at once. A task whose candidates are not resident when
it is chosen loads them synchronously (ahead of any prefetch) and the stage *stalls*.

Swap modes:

* ``resident``: no swapping; the whole stage share is loaded before the run (not timed) and stays;
* ``on-demand`` (vPipe-style): load right before each task, evict right after the last use (no forecast);
* ``predictive`` (NASPipe): the predictor forecasts the next tasks; their candidates are prefetched in
  forecast order while the projected memory (pinned + activations + what the forecast tasks add) fits;
  dirty candidates that no forecast or in-flight task needs are written back and evicted as soon as
  they are released; clean leftovers are dropped when room is needed.

The *admission gate* keeps every schedule live: ``F(x,s)`` may start only if the committed memory
(pinned parameters + activations) plus what ``x`` adds, plus the largest need of any older subnet that
has not started its forward on ``s`` yet, fits the budget (with ``pin="task"``: activations plus room for
the largest in-flight subnet's layers, so a backward can always fetch its own). The oldest unfinished
subnet therefore always finds room on every stage, so no causal chain can be starved of memory (see
``Gate.admits``); under BSP so does the rest of its group, whose forwards its backward waits for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from naspipe.memsize import Budget, SizeError, format_bytes, parse_budget
from naspipe.partition import Partition
from naspipe.sched.registry import parse_policy
from naspipe.sched.tasks import BACKWARD, FORWARD, Task
from naspipe.sim.costs import DEFAULT_BATCH_ALPHA
from naspipe.space import SearchSpace, Subnet
from naspipe.trace import Trace

SWAP_MODES = ("predictive", "on-demand", "resident")  # the one list (runtime and CLI import it)
PIN_MODES = ("subnet", "task")
Key = tuple[int, int]  # (block, choice)

# copy-engine default: PCIe 4.0 x16 moves about 25 GB/s host-to-device in practice (32 GB/s raw); PCIe 3.0
# x16 about 12 GB/s
DEFAULT_BANDWIDTH = 25e9


class MemoryBudgetError(ValueError):
    """A memory configuration that cannot work (a budget too small, resident mode that does not fit...)."""


@dataclass(frozen=True)
class MemoryConfig:
    """How the simulator models device memory. ``device_memory``: per-stage budget (bytes, ``"2GiB"``,
    ``"25%"`` of the stage's supernet parameters, None = unlimited, or one such entry per stage).
    ``batch_size``: None picks the largest batch the policy can afford, at most the space's ``batch_size``.
    ``batch_alpha``: the fixed share of a task's time at the reference batch (see
    ``naspipe.sim.costs.batch_time_scale``). ``bandwidth_d2h`` defaults to ``bandwidth_h2d``. ``headroom``:
    in predictive mode, the gate keeps room for the layers of this many younger subnets, so they can be
    prefetched while the admitted ones run (0 admits more subnets but prefetches less). ``pin``: how long a
    candidate must stay on the device: ``"subnet"`` from ``F(j,s)`` until ``j``'s write on ``s`` ends;
    ``"task"`` only while a task that uses it runs, so between ``F(j,s)`` and its backward a waiting subnet
    holds just its activations and its (clean) candidates may be dropped and fetched again before the
    backward (CSP lets no other subnet write them in between, so the copy fetched again is the one read)."""

    device_memory: Budget | str | int | Sequence[Budget | str | int | None] | None = None
    swap: str = "predictive"
    prefetch_depth: int = 4
    bandwidth_h2d: float = DEFAULT_BANDWIDTH
    bandwidth_d2h: float | None = None
    batch_size: int | None = None
    batch_alpha: float = DEFAULT_BATCH_ALPHA
    headroom: int = 1
    pin: str = "task"

    def stage_budgets(self, shares: Sequence[int]) -> tuple[int | None, ...]:
        """Bytes per stage (None = unlimited); a sequence ``device_memory`` gives one entry per stage."""
        dm = self.device_memory
        if isinstance(dm, (list, tuple)):
            if len(dm) != len(shares):
                raise MemoryBudgetError(f"device memory lists {len(dm)} budgets for {len(shares)} stages")
            return tuple(parse_budget(d).resolve(n) for d, n in zip(dm, shares, strict=True))
        b = parse_budget(dm)
        return tuple(b.resolve(n) for n in shares)


# ---- static footprint of a partitioned space ------------------------------------------------------
class Footprint:
    """Per-stage keys, parameter and activation bytes of subnets, for one batch size."""

    def __init__(self, space: SearchSpace, part: Partition, batch: int):
        self.space, self.part, self.batch = space, part, batch
        self.blocks = [list(part.blocks(s)) for s in range(part.stages)]
        self.key_bytes: list[dict[Key, int]] = [
            {(b, c): space.candidate(b, c).param_bytes for b in bl for c in range(space.blocks[b].k)}
            for bl in self.blocks]
        self._cache: dict[tuple[int, Subnet], tuple[tuple[Key, ...], int, int]] = {}

    def keys(self, s: int, sub: Subnet) -> tuple[Key, ...]:
        """The subnet's candidates on stage ``s``, one per block (so no key repeats)."""
        return self._entry(s, sub)[0]

    def act(self, s: int, sub: Subnet) -> int:
        return self._entry(s, sub)[1]

    def params(self, s: int, sub: Subnet) -> int:
        """Parameter bytes of the subnet's candidates on stage ``s``."""
        return self._entry(s, sub)[2]

    def need(self, s: int, sub: Subnet) -> int:
        """Parameters plus activation of one subnet on stage ``s``."""
        _, act, params = self._entry(s, sub)
        return act + params

    def _entry(self, s: int, sub: Subnet) -> tuple[tuple[Key, ...], int, int]:
        ck = (s, sub)
        e = self._cache.get(ck)
        if e is None:
            keys = tuple((b, sub[b]) for b in self.blocks[s])
            act = self.batch * sum(self.space.candidate(b, sub[b]).act_bytes for b in self.blocks[s])
            kb = self.key_bytes[s]
            e = self._cache[ck] = (keys, act, sum(kb[k] for k in keys))
        return e

    # worst cases over the candidates of each block (the stream is produced at run time)
    def share(self, s: int) -> int:
        return self.space.supernet_param_bytes(self.blocks[s])

    def max_params(self, s: int) -> int:
        return sum(max(c.param_bytes for c in self.space.blocks[b].candidates) for b in self.blocks[s])

    def fixed_params(self, s: int) -> int:
        return sum(self.space.blocks[b].candidates[0].param_bytes for b in self.blocks[s] if self.space.blocks[b].fixed)

    def max_choice_params(self, s: int) -> int:
        return sum(max(c.param_bytes for c in self.space.blocks[b].candidates) for b in self.blocks[s]
                   if not self.space.blocks[b].fixed)

    def mean_choice_params(self, s: int) -> float:
        return sum(sum(c.param_bytes for c in self.space.blocks[b].candidates) / self.space.blocks[b].k
                   for b in self.blocks[s] if not self.space.blocks[b].fixed)

    def act_per_sample(self, s: int) -> int:
        return sum(max(c.act_bytes for c in self.space.blocks[b].candidates) for b in self.blocks[s])


# ---- planning: budgets, validation and the batch each policy can afford -------------------------
@dataclass(frozen=True)
class MemoryPlan:
    budgets: tuple[int | None, ...]
    batch_size: int
    stage_param_bytes: tuple[int, ...]
    note: str


def policy_in_flight(policy: str, stages: int, stage: int, options: dict[str, Any] | None = None) -> int:
    """Subnets a static policy must hold in flight on ``stage`` to make progress at full speed.

    ``bsp``: the whole group of ``M`` micro-batches (all forwards before any backward); 1F1B (``asp``,
    ``pipedream``, ``2bw``, ``pipemare``, ``pipeoptim``): ``P - s``; the CSP family adapts to memory through
    the admission gate and needs only one.
    """
    pol, text = parse_policy(policy)  # declared by the Policy; an unknown policy fails here
    kind = pol.in_flight
    if kind == "group":
        return int(text.get("micro_batches") or (options or {}).get("micro_batches") or 4)
    if kind == "pipeline":  # 1F1B, the asynchronous baselines included
        return stages - stage
    return 1


# Capping CSP's in-flight subnets per stage (the admission gate with an activation-only budget) costs
# little once four fit: with 1 / 2 / 3 / 4 / 5 / 6 subnets in flight, naspipe-k96 on 4 stages keeps
# 0.38 / 0.67 / 0.87 / 0.96 / 0.98 / 0.99 of its uncapped throughput and naspipe-k48 on 8 stages
# 0.47 / 0.79 / 0.94 / 0.98 / 0.99 / 0.99 (1,000 subnets; benchmarks/memory.py measures this curve).
# When a waiting subnet holds only its activations (``pin="task"``) a fifth slot is cheap, so the batch
# is chosen for five.
CSP_SLOTS = 4
CSP_SLOTS_PIN_TASK = 5


def csp_target_in_flight(stages: int, stage: int, slots: int = CSP_SLOTS) -> int:
    """How many subnets a CSP stage should be able to hold for a batch to count as affordable.

    ``P - s`` is what a 1F1B pipeline keeps in flight on stage ``s``, one more lets CSP run ahead past a
    causally blocked subnet, and beyond ``slots`` the measured gain is small.
    """
    return max(1, min(slots, stages - stage + 1))


def plan_memory(space: SearchSpace, part: Partition, policy: str, cfg: MemoryConfig,
                options: dict[str, Any] | None = None) -> MemoryPlan:
    """Resolve budgets, validate them and choose the batch; raises ``MemoryBudgetError`` with one clear line."""
    if cfg.swap not in SWAP_MODES:
        raise MemoryBudgetError(f"unknown swap mode {cfg.swap!r}; choose one of {', '.join(SWAP_MODES)}")
    if cfg.pin not in PIN_MODES:
        raise MemoryBudgetError(f"unknown pin mode {cfg.pin!r}; choose one of {', '.join(PIN_MODES)}")
    if cfg.prefetch_depth < 1:
        raise MemoryBudgetError(f"prefetch depth must be >= 1, got {cfg.prefetch_depth}")
    for name, bw in (("host-to-device", cfg.bandwidth_h2d), ("device-to-host", cfg.bandwidth_d2h)):
        if bw is not None and not bw > 0:
            raise MemoryBudgetError(f"{name} bandwidth must be > 0 bytes/s, got {bw}")
    if cfg.headroom < 0:
        raise MemoryBudgetError(f"headroom must be >= 0, got {cfg.headroom}")
    if not 0 <= cfg.batch_alpha < 1:
        raise MemoryBudgetError(f"batch alpha must lie in [0, 1), got {cfg.batch_alpha}")
    b0 = space.batch_size
    bmax = cfg.batch_size if cfg.batch_size is not None else b0
    if bmax < 1:
        raise MemoryBudgetError(f"batch size must be >= 1, got {bmax}")
    P = part.stages
    fp = Footprint(space, part, 1)
    shares = tuple(fp.share(s) for s in range(P))
    try:
        budgets = cfg.stage_budgets(shares)
    except SizeError as e:
        raise MemoryBudgetError(str(e)) from None
    fixed_batch = cfg.batch_size is not None
    fits: list[int] = []
    for s in range(P):
        B = budgets[s]
        if B is None:
            fits.append(bmax)
            continue
        act1 = fp.act_per_sample(s)
        inflight = policy_in_flight(policy, P, s, options)
        where = f"stage {s}: budget {format_bytes(B)}"
        csp_family = inflight == 1 and not fixed_batch and act1 > 0
        if cfg.swap == "resident":
            room = B - shares[s]
            if room < inflight * act1:
                raise MemoryBudgetError(
                    f"{where} cannot hold the stage's supernet share {format_bytes(shares[s])} plus "
                    f"{inflight} activation(s) of one sample ({format_bytes(inflight * act1)}) in resident mode; "
                    "use a larger --device-memory or a swapping mode")
            fit = room // (inflight * act1) if act1 else bmax
            per_subnet, fixed_room = 0.0, float(shares[s])
        else:
            base = fp.fixed_params(s) + inflight * fp.max_choice_params(s)
            if B < base + inflight * act1:
                what = "one subnet's layers" if inflight == 1 else f"{inflight} subnets' layers (in flight together)"
                raise MemoryBudgetError(
                    f"{where} is smaller than {what} ({format_bytes(base)}) plus "
                    f"{'one activation' if inflight == 1 else 'their activations'} of one sample "
                    f"({format_bytes(inflight * act1)})")
            fit = (B - base) // (inflight * act1) if act1 else bmax
            # room to prefetch the next subnets' layers into (predictive), shared fixed blocks counted once
            prefetch_room = cfg.headroom * fp.mean_choice_params(s) if cfg.swap == "predictive" else 0.0
            if cfg.pin == "task":  # a waiting subnet holds only activations; one task's layers are in use
                per_subnet, fixed_room = 0.0, fp.fixed_params(s) + fp.mean_choice_params(s) + prefetch_room
            else:
                per_subnet, fixed_room = fp.mean_choice_params(s), fp.fixed_params(s) + prefetch_room
        if csp_family:
            # CSP adapts its in-flight count to memory (the gate); a batch counts as affordable if the target
            # number of subnets fits (choice blocks at their mean), or else as many as a batch of one allows
            slots = CSP_SLOTS_PIN_TASK if cfg.pin == "task" else CSP_SLOTS
            for n in range(csp_target_in_flight(P, s, slots), 0, -1):
                b_n = int((B - fixed_room - n * per_subnet) // (n * act1))
                if b_n >= 1:
                    fit = min(fit, b_n)
                    break
        if fixed_batch and fit < bmax:
            raise MemoryBudgetError(f"{where} cannot afford batch {bmax} (at most {max(fit, 0)} fits)")
        fits.append(int(min(fit, bmax)))
    batch = min(fits) if fits else bmax
    note = "fixed by the user" if fixed_batch else (
        f"largest that fits (at most the space's {b0})" if batch < bmax else "the space's batch")
    return MemoryPlan(budgets, max(1, batch), shares, note)


# ---- the admission gate ------------------------------------------------------------------------------
class Gate:
    """The admission gate of one stage, as committed-memory bookkeeping that can be copied for speculation.

    Committed memory = parameters pinned by in-flight subnets (counted once per candidate) + their
    activations. ``admits(task)``: a backward or weight task always passes (it adds nothing); ``F(x,s)``
    passes if committed + what ``x`` adds + the largest *full* need (activation + all its parameters) of
    any older subnet that has not started its forward here fits the budget. Liveness: when the oldest
    unfinished subnet ``i`` has not started on ``s``, every committed byte belongs to a younger subnet,
    and the last of those was admitted with ``i``'s need reserved, so ``i`` always fits; a backward or
    weight task never waits for memory, so ``i`` then moves on through the pipeline.
    In ``resident`` mode every parameter is pinned for good and the reserve counts activations only. With
    ``pin_task`` only the running task's candidates are pinned: the gate sets aside the largest task's
    parameters once and counts activations only (a backward then always finds room to fetch its layers).
    ``group``: the scheduler's ``flush_group``. Under BSP the oldest subnet's write waits for the forwards
    of its whole group, so those forwards are as vital as its own: the headroom (room to prefetch a
    younger subnet) is waived for every subnet of the oldest unfinished subnet's group, not only for the
    oldest itself; ``plan_memory`` sized the budget for the group (``policy_in_flight``), so they all fit.
    """

    def __init__(self, stage: int, budget: int | None, fp: Footprint, subnets: Sequence[Subnet],
                 write_kind: str, resident: bool = False, headroom: int = 0, pin_task: bool = False,
                 group: int = 1):
        if group < 1:
            raise ValueError(f"group must be >= 1, got {group}")
        self.stage, self.budget, self.fp, self.subnets = stage, budget, fp, subnets
        self.headroom, self.group = headroom, group
        self.write_kind, self.resident = write_kind, resident
        self.pin_task = pin_task and not resident
        self.acts_only = resident or self.pin_task  # parameters are not committed per subnet
        self.key_bytes = fp.key_bytes[stage]
        self.pins: dict[Key, int] = {}
        self.pinned_bytes = sum(self.key_bytes.values()) if resident else 0
        self.task_params: dict[int, int] = {}  # pin_task: parameter bytes of each in-flight subnet here
        self.act: dict[int, int] = {}
        self.act_total = 0
        self.started: set[int] = set()  # forwards started beyond next_unstarted
        self.next_unstarted = 0
        self.written: set[int] = set()  # writes done beyond lo
        self.lo = 0  # the oldest subnet whose write on this stage is not done
        self.max_need = fp.max_params(stage) + fp.act_per_sample(stage) * fp.batch

    def start_at(self, position: int) -> None:
        """A gate of a resumed run: the subnets ``< position`` are done here (started and written)."""
        self.next_unstarted = self.lo = position

    def copy(self) -> Gate:
        other = Gate.__new__(Gate)
        other.__dict__.update(self.__dict__)
        other.pins = self.pins.copy()
        other.act = self.act.copy()
        other.started = self.started.copy()
        other.written = self.written.copy()
        other.task_params = self.task_params.copy()
        return other

    @property
    def committed(self) -> int:
        return self.pinned_bytes + self.act_total + (max(self.task_params.values(), default=0) if self.pin_task
                                                      else 0)

    def _params(self, j: int) -> int:
        return self.fp.params(self.stage, self.subnets[j])

    def may_bind(self) -> bool:
        """False when no forward could be refused now (cheap test before a speculative peek)."""
        return self.budget is not None and self.committed + (1 + max(1, self.headroom)) * self.max_need > self.budget

    def preferred_forward(self) -> int | None:
        """The oldest subnet whose forward has not started here: it always fits (see the class doc)."""
        return self.next_unstarted if self.next_unstarted < len(self.subnets) else None

    def _full_need(self, j: int) -> int:
        sub = self.subnets[j]
        return self.fp.act(self.stage, sub) if self.acts_only else self.fp.need(self.stage, sub)

    def admits(self, task: Task) -> bool:
        if task.kind != FORWARD or self.budget is None:
            return True
        x = task.subnet
        reserve = 0
        running = max(self.task_params.values(), default=0)  # pin_task: room for the largest task's layers
        if self.pin_task:
            running = max(running, self._params(x))
        for y in range(self.next_unstarted, x):
            if y not in self.started:
                reserve = max(reserve, self._full_need(y))
                if self.pin_task:
                    running = max(running, self._params(y))
        y, extra = x + 1, 0
        # headroom: room to prefetch the next forward too; waived for the oldest unfinished subnet and the
        # rest of its flush group, whose forwards its write waits for (liveness)
        ahead = 0
        counted = set(self.fp.keys(self.stage, self.subnets[x]))  # shared keys (fixed blocks) count once
        vital = (self.lo // self.group + 1) * self.group  # forwards below it: the oldest's group
        while x >= vital and extra < self.headroom and y < len(self.subnets):
            if y not in self.started:
                for k in self.fp.keys(self.stage, self.subnets[y]):
                    if k not in counted:
                        counted.add(k)
                        ahead += self.key_bytes[k]
                extra += 1
            y += 1
        reserve = max(reserve, ahead)
        sub = self.subnets[x]
        add = self.fp.act(self.stage, sub)
        if not self.acts_only:
            add += sum(self.key_bytes[k] for k in self.fp.keys(self.stage, sub) if not self.pins.get(k))
        if self.pin_task:
            return self.act_total + add + reserve + running <= self.budget
        return self.committed + add + reserve <= self.budget

    def start(self, task: Task) -> None:
        if task.kind != FORWARD:
            return
        x = task.subnet
        sub = self.subnets[x]
        a = self.fp.act(self.stage, sub)
        self.act[x] = a
        self.act_total += a
        if self.pin_task:
            self.task_params[x] = self._params(x)
        if not self.acts_only:
            for k in self.fp.keys(self.stage, sub):
                n = self.pins.get(k, 0)
                self.pins[k] = n + 1
                if n == 0:
                    self.pinned_bytes += self.key_bytes[k]
        self.started.add(x)
        while self.next_unstarted in self.started:
            self.started.discard(self.next_unstarted)
            self.next_unstarted += 1

    def finish(self, task: Task) -> None:
        if task.kind != self.write_kind:
            return
        x = task.subnet
        self.written.add(x)
        while self.lo in self.written:
            self.written.discard(self.lo)
            self.lo += 1
        self.act_total -= self.act.pop(x, 0)
        self.task_params.pop(x, None)
        if not self.acts_only:
            for k in self.fp.keys(self.stage, self.subnets[x]):
                n = self.pins[k] - 1
                if n:
                    self.pins[k] = n
                else:
                    del self.pins[k]
                    self.pinned_bytes -= self.key_bytes[k]


# ---- per-stage device state -----------------------------------------------------------------------
RESIDENT, LOADING, EVICTING = "resident", "loading", "evicting"  # states of a candidate on the device
RESIDENT_MODE = "resident"


@dataclass
class _Waiting:
    task: Task
    keys: tuple[Key, ...]
    act: int
    since: float
    act_done: bool = False
    demand_bytes: int = 0


@dataclass
class StageStats:
    tasks: int = 0
    hits: int = 0
    forwards: int = 0
    forward_hits: int = 0
    stall_time: float = 0.0
    prefetch_bytes: int = 0
    demand_bytes: int = 0
    evict_bytes: int = 0
    evictions: int = 0
    wasted_prefetch_bytes: int = 0
    peak: int = 0
    gate_time: float = 0.0

    @property
    def bytes_moved(self) -> int:
        return self.prefetch_bytes + self.demand_bytes + self.evict_bytes


class StageMemory:
    """The device of one stage. The engine calls ``begin`` when a task is chosen, ``finish`` when its
    compute ends, ``set_forecast`` with the predictor's tasks, ``copy_done`` when a scheduled copy ends,
    and ``service`` after each of these; ``ready()`` says whether the chosen task may compute now.
    ``schedule(time, token)`` asks the engine to call ``copy_done(token, time)`` later."""

    def __init__(self, stage: int, budget: int | None, mode: str, key_bytes: dict[Key, int],
                 bw_h2d: float, bw_d2h: float, trace: Trace, schedule: Callable[[float, int], None],
                 written: Callable[[Key], bool], pin_task: bool = False, write_kind: str = BACKWARD):
        self.stage, self.budget, self.mode = stage, budget, mode
        self.write_kind = write_kind
        self.running: Task | None = None
        self.pin_task = pin_task and mode != RESIDENT_MODE
        self.awaited: dict[Key, int] = {}  # pin_task: candidates in-flight subnets will use again (backward)
        self.nbytes = key_bytes
        self.bw_h2d, self.bw_d2h = bw_h2d, bw_d2h
        self.trace, self._schedule, self._written = trace, schedule, written
        self.where: dict[Key, str] = {}
        self.dirty: set[Key] = set()
        self.rescued: set[Key] = set()
        self.pins: dict[Key, int] = {}
        self.pinned_bytes = 0
        self.act: dict[int, int] = {}
        self.act_total = 0
        self.used = 0
        self.last_use: dict[Key, float] = {}
        self.last_user: dict[Key, int] = {}
        self.unused_prefetch: set[Key] = set()
        self.h2d: tuple[Key, str, float, int] | None = None  # key, purpose, start, subnet
        self.d2h_free_at = 0.0
        self._tokens: dict[int, tuple[str, Key, float, int]] = {}
        self._next_token = 0
        self.waiting: _Waiting | None = None
        self.rank: dict[Key, int] = {}
        self.prefetch_order: list[tuple[Key, int]] = []
        self.stats = StageStats()
        self.evicted: list[tuple[float, float, Key]] = []  # (decided, memory freed, candidate), for checks
        self._evict_since: dict[Key, float] = {}
        if mode == RESIDENT_MODE:
            for k, n in key_bytes.items():
                self.where[k] = RESIDENT
                self.pins[k] = 1  # permanently pinned
                self.pinned_bytes += n
                self.used += n
            if budget is not None and self.used > budget:
                raise MemoryBudgetError(f"stage {stage}: the supernet share {format_bytes(self.used)} exceeds the "
                                        f"budget {format_bytes(budget)}")
            self.stats.peak = self.used

    # ---- queries -----------------------------------------------------------------------------------
    @property
    def committed(self) -> int:
        return self.pinned_bytes + self.act_total

    @property
    def free(self) -> float:
        return float("inf") if self.budget is None else self.budget - self.used

    def resident(self, k: Key) -> bool:
        """On the device and readable (a candidate being written back is still readable)."""
        return self.where.get(k) in (RESIDENT, EVICTING)

    def ready(self) -> bool:
        w = self.waiting
        return w is not None and w.act_done and all(self.resident(k) for k in w.keys)

    # ---- task lifecycle ----------------------------------------------------------------------------
    def begin(self, task: Task, keys: tuple[Key, ...], act: int, now: float) -> bool:
        """A task was chosen; True if every candidate is resident (a hit)."""
        if self.waiting is not None:
            raise RuntimeError(f"stage {self.stage}: {task} chosen while {self.waiting.task} waits")
        st = self.stats
        hit = all(self.resident(k) for k in keys)
        st.tasks += 1
        st.hits += hit
        if task.kind == FORWARD:
            st.forwards += 1
            st.forward_hits += hit
        if task.kind == FORWARD or self.pin_task:
            for k in keys:
                self._pin(k)
            if self.pin_task and task.kind == FORWARD:
                for k in keys:
                    self.awaited[k] = self.awaited.get(k, 0) + 1
        for k in keys:
            self.last_use[k] = now
            self.last_user[k] = task.subnet
            self.unused_prefetch.discard(k)
            if self.where.get(k) == EVICTING:
                self.rescued.add(k)
        self.waiting = _Waiting(task, keys, act if task.kind == FORWARD else 0, now, act_done=task.kind != FORWARD)
        return hit

    def start_compute(self, now: float) -> Task:
        """The waiting task's candidates are in: record any stall and hand the task back for compute."""
        w = self.waiting
        assert w is not None and self.ready()
        self.waiting = None
        self.running = w.task
        if now > w.since or w.demand_bytes:
            self.stats.stall_time += now - w.since
            self.trace.add(self.stage, "stall", w.task.subnet, w.since, now, bytes=w.demand_bytes)
        return w.task

    def finish(self, task: Task, keys: tuple[Key, ...], write: bool, now: float) -> None:
        """A task's compute ended. ``write``: it wrote the subnet's candidates here (B, or W when split)."""
        self.running = None
        for k in keys:
            self.last_use[k] = now
        if not write:
            if self.pin_task:  # the layers wait for the backward unpinned (droppable: nobody writes them)
                released = [k for k in keys if self._unpin(k)]
                if self.mode == "on-demand":
                    for k in released:
                        self._evict(k, now)
            return
        a = self.act.pop(task.subnet, 0)
        self.act_total -= a
        self.used -= a
        released = []
        for k in keys:
            if self._written(k):
                self.dirty.add(k)
            if self._unpin(k):
                released.append(k)
            if self.pin_task:
                n = self.awaited[k] - 1
                if n:
                    self.awaited[k] = n
                else:
                    del self.awaited[k]
        if self.mode == "on-demand":
            for k in released:
                self._evict(k, now)
        elif self.mode == "predictive":
            for k in released:
                if k not in self.rank:
                    self._evict(k, now)

    def set_forecast(self, forecast: Sequence[tuple[Task, tuple[Key, ...], int]], now: float) -> None:
        """The predictor's next tasks (with their keys and activation bytes): prefetch order and eviction."""
        if self.mode != "predictive":
            return
        rank: dict[Key, int] = {}
        order: list[tuple[Key, int]] = []
        proj = self.committed
        counted = {k for k, n in self.pins.items() if n}
        if self.waiting is not None and not self.waiting.act_done:
            proj += self.waiting.act
        if self.running is not None and self.running.kind == self.write_kind:
            proj -= self.act.get(self.running.subnet, 0)  # freed when the running write ends
        blocked = False
        for i, (task, keys, act) in enumerate(forecast):
            if task.kind != FORWARD and not self.pin_task:
                continue
            for k in keys:
                rank.setdefault(k, i)
            if blocked:
                continue
            if task.kind == FORWARD:
                proj += act
            elif task.kind == self.write_kind:
                proj -= self.act.get(task.subnet, 0)  # the write frees the subnet's activation here
            for k in keys:
                if k in counted:
                    continue
                if self.budget is not None and proj + self.nbytes[k] > self.budget:
                    blocked = True  # the projected memory is full: prefetch no further
                    break
                proj += self.nbytes[k]
                counted.add(k)
                order.append((k, task.subnet))
        self.rank = rank
        self.prefetch_order = order
        for k, state in list(self.where.items()):
            if (state == RESIDENT and not self.pins.get(k) and k not in rank and k in self.dirty
                    and k not in self.awaited):
                self._evict(k, now)

    # ---- the copy engines --------------------------------------------------------------------------
    def service(self, now: float) -> None:
        """Make progress: the waiting task's activation and demand loads first, then prefetches."""
        w = self.waiting
        if w is not None and not w.act_done and self._room(w.act, set(w.keys), urgent=True, now=now):
            self.act[w.task.subnet] = self.act.get(w.task.subnet, 0) + w.act
            self.act_total += w.act
            self._use(w.act)
            w.act_done = True
        if self.h2d is not None or (w is not None and not w.act_done):
            return
        if w is not None:
            for k in w.keys:
                if k not in self.where:
                    if self._room(self.nbytes[k], set(w.keys), urgent=True, now=now):
                        w.demand_bytes += self.nbytes[k]
                        self._load(k, "demand", w.task.subnet, now)
                    return
        if self.mode != "predictive":
            return
        for k, j in self.prefetch_order:
            if k in self.where:
                if self.where[k] == EVICTING:
                    self.rescued.add(k)
                continue
            if self._room(self.nbytes[k], set(), urgent=False, now=now):
                self._load(k, "prefetch", j, now)
            return

    def copy_done(self, token: int, now: float) -> None:
        kind, k, start, j = self._tokens.pop(token)
        if kind == "load":
            purpose = self.h2d[1] if self.h2d else "prefetch"
            self.h2d = None
            self.where[k] = RESIDENT
            n = self.nbytes[k]
            if purpose == "prefetch":
                self.stats.prefetch_bytes += n
                self.trace.add(self.stage, "prefetch", j, start, now, bytes=n)
                if not self.pins.get(k):
                    self.unused_prefetch.add(k)
            else:
                self.stats.demand_bytes += n
        else:  # write-back ended
            if k in self.rescued or self.pins.get(k):
                self.rescued.discard(k)
                self._evict_since.pop(k, None)
                self.where[k] = RESIDENT
            else:
                self._drop(k, now)

    # ---- internals ---------------------------------------------------------------------------------
    def _pin(self, k: Key) -> None:
        n = self.pins.get(k, 0)
        self.pins[k] = n + 1
        if n == 0:
            self.pinned_bytes += self.nbytes[k]

    def _unpin(self, k: Key) -> bool:
        n = self.pins[k] - 1
        if n:
            self.pins[k] = n
            return False
        del self.pins[k]
        self.pinned_bytes -= self.nbytes[k]
        return True

    def _use(self, n: int) -> None:
        self.used += n
        if self.used > self.stats.peak:
            self.stats.peak = self.used
        assert self.budget is None or self.used <= self.budget, "device memory over budget"

    def _load(self, k: Key, purpose: str, j: int, now: float) -> None:
        self.where[k] = LOADING
        self.dirty.discard(k)
        self._use(self.nbytes[k])
        self.h2d = (k, purpose, now, j)
        self._after(now + self.nbytes[k] / self.bw_h2d, ("load", k, now, j))

    def _evict(self, k: Key, now: float) -> None:
        """Start evicting a resident, unpinned candidate: write back if dirty, else drop at once."""
        if self.where.get(k) != RESIDENT or self.pins.get(k):
            return
        self.stats.evictions += 1
        if k in self.unused_prefetch:
            self.unused_prefetch.discard(k)
            self.stats.wasted_prefetch_bytes += self.nbytes[k]
        self._evict_since[k] = now
        if k in self.dirty:
            self.dirty.discard(k)
            n = self.nbytes[k]
            start = max(now, self.d2h_free_at)
            end = start + n / self.bw_d2h
            self.d2h_free_at = end
            self.where[k] = EVICTING
            self.stats.evict_bytes += n
            self.trace.add(self.stage, "evict", self.last_user.get(k, -1), start, end, bytes=n)
            self._after(end, ("evict", k, start, self.last_user.get(k, -1)))
        else:
            self.trace.add(self.stage, "evict", self.last_user.get(k, -1), now, now)
            self._drop(k, now)

    def _drop(self, k: Key, now: float) -> None:
        del self.where[k]
        self.used -= self.nbytes[k]
        self.evicted.append((self._evict_since.pop(k, now), now, k))

    def _after(self, t: float, what: tuple[str, Key, float, int]) -> None:
        token = self._next_token
        self._next_token += 1
        self._tokens[token] = what
        self._schedule(t, token)

    def _room(self, n: int, protect: set[Key], *, urgent: bool, now: float) -> bool:
        """Free ``n`` bytes, evicting unpinned candidates; True when they are free now.

        Prefetches (not urgent) only drop clean candidates no forecast needs. A task that waits (urgent)
        may also write back dirty ones, and then candidates needed later in the forecast, farthest first.
        """
        if self.budget is None or self.free >= n:
            return True
        coming = sum(self.nbytes[k] for k, s in self.where.items() if s == EVICTING and k not in self.rescued)
        if self.free + coming >= n:
            return False  # write-backs under way will make the room
        victims = [k for k, s in self.where.items() if s == RESIDENT and not self.pins.get(k) and k not in protect]
        if not urgent:
            victims = [k for k in victims if k not in self.rank and k not in self.dirty]
        far = len(self.rank) + 1
        # the forecast's candidates last, farthest first; before them those a waiting backward will use
        # (pin_task), most recently read first (the youngest subnet's backward comes last); else LRU
        victims.sort(key=lambda k: (k in self.rank, k in self.awaited, k in self.dirty, -self.rank.get(k, far),
                                    -self.last_use.get(k, 0.0) if k in self.awaited else self.last_use.get(k, 0.0),
                                    k))
        for k in victims:
            if self.free + coming >= n:
                break
            if k in self.dirty:
                coming += self.nbytes[k]
            self._evict(k, now)
        return self.free >= n


@dataclass
class MemoryReport:
    """Memory metrics of one simulated run (see ``summary`` for the JSON keys)."""

    swap: str
    budgets: tuple[int | None, ...]
    batch_size: int
    stages: list[StageStats]
    makespan: float
    predictor_accuracy: float | None = None
    predictor_coverage: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def hit_rate(self) -> float:
        t = self.tasks
        return sum(s.hits for s in self.stages) / t if t else 1.0

    @property
    def forward_hit_rate(self) -> float:
        f = sum(s.forwards for s in self.stages)
        return sum(s.forward_hits for s in self.stages) / f if f else 1.0

    @property
    def stall_time(self) -> float:
        return sum(s.stall_time for s in self.stages)

    @property
    def stall_share(self) -> float:
        """Stall time over all stages / (stages x makespan), like utilisation."""
        m = self.makespan * len(self.stages)
        return self.stall_time / m if m > 0 else 0.0

    @property
    def bytes_moved(self) -> int:
        return sum(s.bytes_moved for s in self.stages)

    def summary(self) -> dict[str, Any]:
        m = self.makespan
        return {
            "swap": self.swap,
            "device_memory": list(self.budgets),
            "batch_size": self.batch_size,
            "hit_rate": self.hit_rate,
            "forward_hit_rate": self.forward_hit_rate,
            "stall_time": self.stall_time,
            "stall_share": self.stall_share,
            "stage_stall_share": [s.stall_time / m if m > 0 else 0.0 for s in self.stages],
            "memory_wait_share": sum(s.gate_time for s in self.stages) / (m * len(self.stages)) if m > 0 else 0.0,
            "bytes_moved": self.bytes_moved,
            "bytes_prefetched": sum(s.prefetch_bytes for s in self.stages),
            "bytes_loaded_on_demand": sum(s.demand_bytes for s in self.stages),
            "bytes_written_back": sum(s.evict_bytes for s in self.stages),
            "bytes_prefetched_unused": sum(s.wasted_prefetch_bytes for s in self.stages),
            "peak_device_bytes": [s.peak for s in self.stages],
            "predictor_accuracy": self.predictor_accuracy,
            "predictor_coverage": self.predictor_coverage,
            **self.extra,
        }
