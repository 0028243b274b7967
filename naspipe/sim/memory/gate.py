"""The admission gate of one stage: committed-memory bookkeeping that can be copied for speculation.
"""

from __future__ import annotations

from collections.abc import Sequence

from naspipe.sched.tasks import FORWARD, Task
from naspipe.sim.memory.footprint import Footprint
from naspipe.sim.memory.settings import Key
from naspipe.spaces.space import Subnet


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
