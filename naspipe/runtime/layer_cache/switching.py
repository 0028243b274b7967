"""Context switching in the runtime: a stage's candidates in host memory, a byte-budgeted device cache.

Why it exists: ``naspipe train --device-memory SIZE|P%`` runs each stage with its candidates' parameters
in a host store and only a working set on the "device" (``naspipe.runtime.layer_cache.context.ContextCache``; on CPU a
separate buffer pool, so every load and write-back is a real copy). Off by default: without
``device_memory`` none of this is built.

Wiring (``naspipe.runtime.processes.worker``): before each task ``before(task)``: a forward ``acquire``s the
candidates its subnet uses on this stage (a miss loads them synchronously and records a ``stall`` event);
a backward (and ``W``) finds them still pinned. After the subnet's write (``B``, or ``W`` with a split
backward) ``after(task)`` releases them (dirty: the weights changed). With ``pin="task"`` every task
acquires and releases its subnet's candidates, and the forward runs inside ``context(task)``, where
autograd saves them by reference (``ContextCache.saved_by_reference``): between forward and backward
they may leave the device, and the backward's ``acquire`` brings them back (CSP lets nobody write them
in between). The budget counts candidates, not activations, so the default pins per subnet.
``--swap predictive`` then prefetches, on the cache's background worker, the candidates of the next
``prefetch_depth`` forwards the stage is likely to run (``ContextSwitch.forecast``: the stage's scheduler
run speculatively by ``naspipe.sched.predictor`` on the messages already delivered, then the
lowest-numbered subnets not forwarded yet); the cache evicts the least recently used unpinned candidates
to make room.
``--swap on-demand`` (vPipe-style) prefetches nothing and evicts right after the release. ``--swap
resident`` loads every candidate before the clock starts and never swaps (the stage share and its
optimizer state must fit the budget). Nothing pinned is ever evicted. ``next_task`` puts the stage's
decisions through the simulator's admission gate (``naspipe.sim.memory.Gate``) over the cache's bytes.

Metrics (per stage, merged into ``metrics.json["memory"]``): ``hit_rate`` = share of forward tasks whose
candidates were all resident at their start (backward tasks always find theirs pinned; ``task_hit_rate``
counts them too), stall seconds and share of the stage loop, bytes moved each way, peak device bytes.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from naspipe.inputs.memsize import parse_budget
from naspipe.sched.predictor import Predictor
from naspipe.sched.speculate import gated_next_task
from naspipe.sched.tasks import FORWARD, Task
from naspipe.sim.memory import SWAP_MODES, Gate

SWAPS = SWAP_MODES  # the swap modes are declared once, in naspipe.sim.memory
# optimizer state tensors per parameter element (they move with the candidate once created)
STATE_FACTOR = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2, "rmsprop": 1}


def candidate_modules(model: Any) -> dict[tuple[int, int], nn.Module]:
    """``(block, choice) -> module`` for every candidate of the stage's choice blocks."""
    space = model.space
    return {(b, c): model.candidate(b, c) for b in model.blocks if not space.blocks[b].fixed
            for c in range(space.blocks[b].k)}


def _nbytes(m: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*m.parameters(), *m.buffers()])


def stage_requirements(model: Any, optimizer: str) -> tuple[int, int]:
    """(the stage's supernet share in candidate bytes, the bytes one subnet's candidates need at most,
    optimizer state included)."""
    mods = candidate_modules(model)
    share = sum(_nbytes(m) for m in mods.values())
    per_block: dict[int, int] = {}
    for (b, _), m in mods.items():
        per_block[b] = max(per_block.get(b, 0), _nbytes(m) + state_bytes(m, optimizer))
    return share, sum(per_block.values())


def state_bytes(m: nn.Module, optimizer: str) -> int:
    """Bytes the optimizer's state for module ``m`` takes once a step has created it (an upper bound)."""
    factor = STATE_FACTOR.get(optimizer, 2)
    return sum(factor * p.numel() * p.element_size() + 8 for p in m.parameters()) if factor else 0


def resident_bytes(model: Any, optimizer: str) -> int:
    """What ``--swap resident`` keeps on the device: every candidate of the stage with its optimizer state."""
    return sum(_nbytes(m) + state_bytes(m, optimizer) for m in candidate_modules(model).values())


def stage_budget(device_memory: str, model: Any, optimizer: str) -> tuple[int, int, int]:
    """(budget bytes, supernet share bytes, one subnet's need) for a stage."""
    share, need = stage_requirements(model, optimizer)
    budget = parse_budget(device_memory).resolve(share)
    return (share if budget is None else budget), share, need


class _CacheFootprint:
    """The byte view ``naspipe.sim.memory.Gate`` reads, from the cache's real sizes (optimizer state room
    included); activations are not part of the runtime's budget, so they count zero."""

    batch = 1

    def __init__(self, stage: int, key_bytes: dict[tuple[int, int], int], blocks: list[int]):
        self.key_bytes = {stage: key_bytes}
        self._blocks = blocks
        per_block: dict[int, int] = {}
        for (b, _), n in key_bytes.items():
            per_block[b] = max(per_block.get(b, 0), n)
        self._max = sum(per_block.values())
        self._cache: dict[Any, tuple[tuple[tuple[int, int], ...], int]] = {}

    def _entry(self, sub: Any) -> tuple[tuple[tuple[int, int], ...], int]:
        e = self._cache.get(sub)
        if e is None:
            kb = next(iter(self.key_bytes.values()))
            keys = tuple((b, sub[b]) for b in self._blocks if (b, sub[b]) in kb)
            e = self._cache[sub] = (keys, sum(kb[k] for k in keys))
        return e

    def keys(self, stage: int, sub: Any) -> tuple[tuple[int, int], ...]:
        """The subnet's candidates on this stage (one per choice block), computed once per subnet."""
        return self._entry(sub)[0]

    def act(self, stage: int, sub: Any) -> int:
        return 0

    def params(self, stage: int, sub: Any) -> int:
        return self._entry(sub)[1]

    def need(self, stage: int, sub: Any) -> int:
        return self._entry(sub)[1]

    def max_params(self, stage: int) -> int:
        return self._max

    def act_per_sample(self, stage: int) -> int:
        return 0


class ContextSwitch:
    """The worker's side of the context cache for one stage."""

    def __init__(self, model: Any, bank: Any, subnets: Any, n: int, *, device_memory: str, swap: str,
                 depth: int, optimizer: str, write_kind: str, clock: Any, timeout: float, start: int = 0,
                 pin: str = "subnet"):
        from naspipe.runtime.layer_cache.context import ContextCache

        self.model, self.subnets, self.n = model, subnets, n
        self.swap, self.depth, self.write_kind = swap, depth, write_kind
        self.pin_task = pin == "task" and swap != "resident"
        self.budget, self.share, self.need = stage_budget(device_memory, model, optimizer)
        self.mods = candidate_modules(model)
        opt = getattr(bank, "optimizer", None)
        params = {k: list(m.parameters()) for k, m in self.mods.items()}

        def state(k: Any) -> list[torch.Tensor]:
            if opt is None:
                return []
            return [v for p in params[k] for v in opt.state.get(p, {}).values() if isinstance(v, torch.Tensor)]

        self.cache = ContextCache(self.mods, device="cpu", budget=self.budget, extra_tensors=state, clock=clock,
                                  timeout=timeout, extra_bytes=lambda k: state_bytes(self.mods[k], optimizer))
        # the admission gate of the simulator over the cache's real bytes: a forward starts only if its
        # candidates fit next to those pinned by the subnets in flight, keeping room for any older subnet
        # not started yet (so the oldest always fits and the pipeline stays live)
        self.fp = fp = _CacheFootprint(0, {k: self.cache.nbytes(k) for k in self.mods}, list(model.blocks))
        self.gate = Gate(0, self.budget, fp, [subnets[j] for j in range(n)], write_kind,  # type: ignore[arg-type]
                         resident=swap == "resident", pin_task=self.pin_task)
        self.gate.start_at(start)
        self.refusals = 0
        # without arrival times only the order of tasks matters to the forecast, not their durations
        self.predictor = Predictor(lambda task: 1.0, depth)
        self.held: dict[int, list[tuple[int, int]]] = {}
        self.forwarded: set[int] = set()
        self.next_unforwarded = start
        self.tasks = self.task_hits = self.forwards = self.forward_hits = 0

    def keys(self, j: int) -> list[tuple[int, int]]:
        return list(self.fp.keys(0, self.gate.subnets[j]))

    def next_task(self, sched: Any) -> Task | None:
        """``sched.next_task()`` through the admission gate: a refused forward gives way to a pending ``W``
        or the oldest forward not started here; None: wait for a message (a backward frees room)."""
        task, refused = gated_next_task(sched, self.gate)
        self.refusals += refused
        return self._chosen(task)

    def _chosen(self, task: Task | None) -> Task | None:
        if task is not None:
            self.gate.start(task)
        return task

    def before(self, task: Task) -> float:
        """Make the task's candidates resident and pin them (a forward's stay pinned until the subnet's
        write unless ``pin="task"``); returns the stall in seconds."""
        self.tasks += 1
        j = task.subnet
        if task.kind != FORWARD:
            if not self.pin_task:
                self.task_hits += 1  # pinned since the forward
                return 0.0
            keys = self.held.get(j, [])
        else:
            keys = self.keys(j)
            self.held[j] = keys
            self.forwarded.add(j)
            while self.next_unforwarded in self.forwarded:
                self.next_unforwarded += 1
        from naspipe.runtime.layer_cache.context import CacheError

        try:
            stall = self.cache.acquire(keys, tag=j) if keys else 0.0
        except CacheError as e:
            if "pinned working set" not in str(e):
                raise
            raise CacheError(f"{task}: the candidates of the {len(self.held)} subnets in flight on this stage do "
                             f"not fit the device budget ({e}); raise --device-memory") from None
        hit = stall == 0.0
        self.task_hits += hit
        if task.kind == FORWARD:
            self.forwards += 1
            self.forward_hits += hit
        return stall

    def context(self, task: Task) -> Any:
        """Around the task's compute: with ``pin="task"`` a forward lets autograd save its candidates by
        reference, so they may leave the device until the backward acquires them again."""
        if self.pin_task and task.kind == FORWARD and self.held.get(task.subnet):
            return self.cache.saved_by_reference(self.held[task.subnet])
        return contextlib.nullcontext()

    def after(self, task: Task, sched: Any = None) -> None:
        """After a task: release its candidates (``pin="task"``: after every task; else at the subnet's
        write); then prefetch (predictive) or evict (on-demand); ``resident`` keeps everything in place."""
        self.gate.finish(task)
        write = task.kind == self.write_kind
        if write or self.pin_task:
            keys = self.held.pop(task.subnet, []) if write else self.held.get(task.subnet, [])
            if keys:
                self.cache.release(keys, dirty=write)
                if self.swap == "on-demand":
                    self.cache.evict(keys)
        if self.swap == "predictive":
            self.prefetch(sched)

    def warm_up(self) -> None:
        """Prefetch the first forecast forwards (``resident``: every candidate) and wait for them, before the
        run's clock starts."""
        if self.swap == "predictive":
            self.prefetch()
            self.cache.drain()
        elif self.swap == "resident":
            self.cache.prefetch(list(self.mods), tag=-1)
            self.cache.drain()

    def forecast(self, sched: Any = None) -> list[int]:
        """The subnets whose forwards this stage is expected to run next, nearest first: what the stage's
        own scheduler, run speculatively through the gate (``naspipe.sched.predictor``), would start from
        the messages already here, then the lowest-numbered subnets not forwarded yet (messages on their way
        are unknown to the stage; CSP runs forwards nearly in sequence order)."""
        out: list[int] = []
        if sched is not None:  # (pin="task": a backward's candidates may have to come back too)
            for p in self.predictor.forecast(sched, 0.0, gate=self.gate):
                if (p.task.kind == FORWARD or self.pin_task) and p.task.subnet not in out:
                    out.append(p.task.subnet)
        j = self.next_unforwarded
        while len(out) < self.depth and j < self.n:
            if j not in self.forwarded and j not in out:
                out.append(j)
            j += 1
        return out[:self.depth]

    def prefetch(self, sched: Any = None) -> None:
        plan = [(j, self.keys(j)) for j in self.forecast(sched)]
        self.cache.protect([k for _, ks in plan for k in ks])
        for j, ks in plan:
            self.cache.prefetch(ks, tag=j)

    def quiesce(self) -> None:
        """Let the cache finish every copy (no buffer is reused while a checkpoint reads the weights)."""
        self.cache.drain()

    def close(self) -> None:
        """Write everything back to host memory (the final weights, hashes and checkpoints read them)."""
        self.cache.close()  # (a second call does nothing)

    def trace_events(self, stage: int) -> list[Any]:
        from naspipe.sched.trace import TraceEvent

        return [TraceEvent(stage, e.kind, e.tag, e.start, e.end, bytes=e.bytes) for e in self.cache.events]

    def report(self, loop_s: float) -> dict[str, Any]:
        s = self.cache.stats
        return {
            "budget_bytes": self.budget, "supernet_share_bytes": self.share, "subnet_need_bytes": self.need,
            "swap": self.swap, "prefetch_depth": self.depth,
            "pin": "task" if self.pin_task else "subnet",
            "forwards": self.forwards, "forward_hits": self.forward_hits,
            "hit_rate": self.forward_hits / self.forwards if self.forwards else 1.0,
            "tasks": self.tasks, "task_hits": self.task_hits,
            "task_hit_rate": self.task_hits / self.tasks if self.tasks else 1.0,
            "stall_s": s.stall_seconds, "stall_share": s.stall_seconds / loop_s if loop_s > 0 else 0.0,
            "bytes_h2d": s.bytes_h2d, "bytes_d2h": s.bytes_d2h, "bytes_moved": s.bytes_h2d + s.bytes_d2h,
            "peak_device_bytes": s.peak_bytes, "prefetches": s.prefetches,
            "prefetches_dropped": s.prefetches_dropped, "evictions": s.evictions,
            "forwards_held_back": self.refusals,
        }


def merge_reports(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``metrics.json["memory"]`` from the stages' reports (None when the run did not swap)."""
    reps = [p.get("memory") for p in parts]
    if not reps or any(r is None for r in reps):
        return None
    fw = sum(r["forwards"] for r in reps)
    tasks = sum(r["tasks"] for r in reps)
    loops = sum(p["timing"]["loop"] for p in parts)
    stall = sum(r["stall_s"] for r in reps)
    return {
        "swap": reps[0]["swap"], "prefetch_depth": reps[0]["prefetch_depth"],
        "hit_rate": sum(r["forward_hits"] for r in reps) / fw if fw else 1.0,
        "task_hit_rate": sum(r["task_hits"] for r in reps) / tasks if tasks else 1.0,
        "stall_s": stall, "stall_share": stall / loops if loops > 0 else 0.0,
        "bytes_moved": sum(r["bytes_moved"] for r in reps),
        "peak_device_bytes": [r["peak_device_bytes"] for r in reps],
        "budget_bytes": [r["budget_bytes"] for r in reps],
        "stages": reps,
    }
