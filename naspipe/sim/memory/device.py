"""One stage's device state in the simulator: candidates resident, loading or evicting, two copy engines,
stalls and statistics (``StageMemory``), driven by the engine's events and the forecast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from naspipe.inputs.memsize import format_bytes
from naspipe.sched.tasks import BACKWARD, FORWARD, Task
from naspipe.sched.trace import Trace
from naspipe.sim.memory.settings import Key, MemoryBudgetError

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
