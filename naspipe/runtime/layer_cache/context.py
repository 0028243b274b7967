"""The context cache: every candidate lives in host memory; the device holds a byte-budgeted working set.

Why it exists: a supernet does not fit on one device. NASPipe keeps all candidates' weights in host
memory (pinned on CUDA, so copies are asynchronous) and moves a candidate to the device before a task
uses it; a forecast of the next tasks (``naspipe.sched.predictor``) lets the stage prefetch it in time.
This is the torch half of that; ``naspipe.sim.memory`` models the same thing in the simulator.

API (keys are any hashable, e.g. ``(block, choice)``; a key's module is any ``nn.Module``)::

    cache = ContextCache({key: module, ...}, device="cuda:0", budget="2GiB")
    cache.prefetch(next_keys, tag=j)     # background: load if there is room (never evicts what is in use)
    stall = cache.acquire(keys, tag=j)   # before a task: blocks until all keys are on the device (loads
                                         # the missing ones at once, records a stall) and pins them
    ...run the task with the modules...  # their parameters now live in device buffers
    cache.release(keys, dirty=True)      # after the subnet's write (B, or W when split): unpin;
                                         # dirty = the weights changed, a later eviction writes them back
    cache.evict(keys)                    # background: write back (if dirty) and free unpinned keys
    cache.events                         # [CacheEvent(kind, key, tag, bytes, start, end)], kind in
                                         # prefetch / evict / stall: map them onto the trace
    cache.close()                        # (or use it as a context manager)

Wiring it into a stage loop (with ``naspipe.sched.predictor``): after each decision, forecast the stage's
next tasks, ``prefetch`` the candidates of the forecast forwards in order and ``evict`` released
candidates no forecast needs; ``acquire`` a forward's candidates before it runs (a backward's are still
pinned from its forward), ``release`` them after the subnet's write on this stage, and add
``cache.events`` to the trace as ``prefetch`` / ``evict`` / ``stall`` events of that stage.

How it works: each key's tensors (parameters, buffers, and optional ``extra_tensors(key)`` such as that
key's optimizer state; ``extra_bytes(key)`` sets room aside for it before it exists) keep their
``nn.Parameter`` objects; only their storage moves, by assigning
``.data``: the host copy when absent, a device buffer when resident. So optimizers and autograd keep the
same parameter objects. One background worker thread does every copy in queue order; loads that an
``acquire`` waits for jump the queue. On CUDA the worker copies on its own stream from pinned memory and
the compute stream waits on an event; on CPU the "device" is a separate pool of buffers and every load
and write-back is a real copy, so the cost is honest. Nothing pinned by ``acquire`` is ever evicted; the
budget counts the bytes of resident keys (activations are the runtime's business). Every wait has a
timeout: ``acquire`` raises ``TimeoutError`` rather than hang, and worker errors surface in the caller.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from naspipe.inputs.memsize import parse_bytes

Key = Hashable
ABSENT, LOADING, RESIDENT, EVICTING = "absent", "loading", "resident", "evicting"


class CacheError(RuntimeError):
    """The cache cannot serve a request (e.g. the pinned working set exceeds the budget)."""


@dataclass(frozen=True)
class CacheEvent:
    kind: str  # "prefetch" | "evict" | "stall"
    key: Key | None  # None for a stall (it may cover several keys)
    tag: int  # the caller's label, e.g. the subnet the task belongs to (-1: none)
    bytes: int
    start: float
    end: float


@dataclass
class CacheStats:
    acquires: int = 0
    hits: int = 0  # acquires whose keys were all resident
    stall_seconds: float = 0.0
    bytes_h2d: int = 0
    bytes_d2h: int = 0
    prefetches: int = 0
    prefetches_dropped: int = 0  # no room without touching what is pinned or wanted
    evictions: int = 0
    peak_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.acquires if self.acquires else 1.0


@dataclass(frozen=True)
class _SavedRef:
    """What autograd keeps of a saved tensor that lives in a key's buffer: where, and the view's geometry."""

    key: Key
    slot: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class _Slot:
    """One tensor whose storage moves: ``host`` is its home copy, ``dev`` its device buffer when resident."""

    __slots__ = ("tensor", "host", "dev")

    def __init__(self, tensor: torch.Tensor, host: torch.Tensor) -> None:
        self.tensor, self.host, self.dev = tensor, host, None


class ContextCache:
    """A byte-budgeted device cache over host-resident modules (see the module docstring)."""

    def __init__(self, modules: Mapping[Key, nn.Module], *, device: str | torch.device = "cpu",
                 budget: int | str | None = None, extra_tensors: Callable[[Key], Iterable[torch.Tensor]] | None = None,
                 clock: Callable[[], float] = time.perf_counter, timeout: float = 120.0,
                 pin_memory: bool | None = None, extra_bytes: Callable[[Key], int] | None = None):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.budget = None if budget is None else parse_bytes(budget)
        self.clock, self.timeout = clock, timeout
        self._extra = extra_tensors
        pin = self.cuda if pin_memory is None else pin_memory
        self.modules = dict(modules)
        self._slots: dict[Key, list[_Slot]] = {}
        for k, m in self.modules.items():
            slots = []
            for t in [*m.parameters(), *m.buffers()]:
                if t.device.type != "cpu":
                    raise ValueError(f"key {k!r}: build the modules on the CPU; the cache owns their placement")
                host = t.data.pin_memory() if pin else t.data
                t.data = host
                slots.append(_Slot(t, host))
            self._slots[k] = slots
        self._state: dict[Key, str] = dict.fromkeys(self.modules, ABSENT)
        self._bytes: dict[Key, int] = {k: sum(s.host.numel() * s.host.element_size() for s in v)
                                       for k, v in self._slots.items()}
        # room set aside for tensors a key will gain on the device (optimizer state created by a step), so
        # the budget holds from the first step on; adopted tensors use it up before they add bytes
        self._reserve: dict[Key, int] = {k: max(0, int(extra_bytes(k))) if extra_bytes else 0 for k in self.modules}
        for k, n in self._reserve.items():
            self._bytes[k] += n
        if self.budget is not None and self._bytes and max(self._bytes.values()) > self.budget:
            big = max(self._bytes, key=self._bytes.__getitem__)
            raise CacheError(f"key {big!r} alone ({self._bytes[big]} bytes) exceeds the budget ({self.budget} bytes)")
        self._pins: collections.Counter[Key] = collections.Counter()
        self._dirty: set[Key] = set()
        self._wanted: set[Key] = set()  # prefetched, not yet acquired
        self._protected: set[Key] = set()  # keys of the caller's forecast: a prefetch never evicts them
        self._last_use: dict[Key, float] = {}
        self._used = 0
        self._pool: dict[tuple[tuple[int, ...], torch.dtype], list[torch.Tensor]] = {}
        self._ready_event: dict[Key, Any] = {}  # CUDA: the load's completion event
        self._lock = threading.Condition()
        self._queue: collections.deque[tuple[str, Key, int]] = collections.deque()
        self._error: BaseException | None = None
        self._closed = False
        self.events: list[CacheEvent] = []
        self.stats = CacheStats()
        self._stream = torch.cuda.Stream(device=self.device) if self.cuda else None
        self._worker = threading.Thread(target=self._run, name="naspipe-context-cache", daemon=True)
        self._worker.start()

    # ---- queries -----------------------------------------------------------------------------------
    def nbytes(self, key: Key) -> int:
        return self._bytes[key]

    def resident(self, key: Key) -> bool:
        return self._state[key] == RESIDENT

    @property
    def device_bytes(self) -> int:
        return self._used

    def resident_keys(self) -> set[Key]:
        with self._lock:
            return {k for k, s in self._state.items() if s == RESIDENT}

    # ---- autograd: saved weights by reference ------------------------------------------------------
    def saved_by_reference(self, keys: Iterable[Key]) -> Any:
        """A context for a forward over the acquired ``keys``: autograd saves their tensors (and views of
        them) as handles and reads the key's *current* device buffer at backward time, so between a forward
        and its backward the keys may be released, evicted and loaded again (the caller must acquire them
        before the backward and must not change them in between). Other saved tensors are kept as usual."""
        table: dict[int, tuple[Key, int]] = {}
        with self._lock:
            for k in keys:
                if self._state[k] != RESIDENT:
                    raise CacheError(f"saved_by_reference: {k!r} is not resident (acquire it first)")
                for i, slot in enumerate(self._slots[k]):
                    table[slot.tensor.data.untyped_storage().data_ptr()] = (k, i)

        def pack(t: torch.Tensor) -> Any:
            where = table.get(t.untyped_storage().data_ptr()) if t.device == self.device else None
            if where is None:
                return t
            return _SavedRef(where[0], where[1], tuple(t.size()), tuple(t.stride()), t.storage_offset())

        def unpack(h: Any) -> torch.Tensor:
            if not isinstance(h, _SavedRef):
                return h
            with self._lock:
                if self._state[h.key] != RESIDENT or not self._pins[h.key]:
                    raise CacheError(f"backward needs {h.key!r}: acquire it before the backward")
                base = self._slots[h.key][h.slot].tensor.data
            return base.as_strided(h.size, h.stride, h.offset)

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)

    # ---- requests ----------------------------------------------------------------------------------
    def prefetch(self, keys: Iterable[Key], tag: int = -1) -> None:
        """Load ``keys`` in the background, in order, as room allows; never blocks."""
        with self._lock:
            self._check()
            for k in keys:
                self._known(k)
                if self._state[k] == ABSENT and k not in self._wanted:
                    self._wanted.add(k)
                    self._queue.append(("prefetch", k, tag))
            self._lock.notify_all()

    def protect(self, keys: Iterable[Key]) -> None:
        """Replace the set of keys a forecast will need soon: a prefetch never evicts them to make room
        (an urgent load evicts them last). Keeps a deep prefetch from evicting what a nearer task needs."""
        with self._lock:
            self._protected = set(keys)

    def acquire(self, keys: Iterable[Key], tag: int = -1) -> float:
        """Pin ``keys`` and return once all are on the device; missing ones load first (a recorded stall).
        Returns the stall in seconds (0.0 on a hit)."""
        ks = list(dict.fromkeys(keys))
        t0 = self.clock()
        with self._lock:
            self._check()
            for k in ks:
                self._known(k)
            if self.budget is not None:
                need = sum(self._bytes[k] for k in set(ks) | {k for k, n in self._pins.items() if n})
                if need > self.budget:
                    raise CacheError(f"the pinned working set ({need} bytes) exceeds the budget ({self.budget} bytes)")
            for k in ks:
                self._pins[k] += 1
                self._wanted.discard(k)
                self._last_use[k] = t0
            missing = [k for k in ks if self._state[k] != RESIDENT]
            self.stats.acquires += 1
            if not missing:
                self.stats.hits += 1
            demand = 0
            for k in reversed(missing):
                if self._state[k] in (ABSENT, EVICTING):
                    demand += self._bytes[k]
                self._queue.appendleft(("load", k, tag))  # ahead of every prefetch
            self._lock.notify_all()
            deadline = time.monotonic() + self.timeout
            while any(self._state[k] != RESIDENT for k in ks):
                self._check()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"context cache: keys {[k for k in ks if self._state[k] != RESIDENT]} not "
                                       f"loaded within {self.timeout} s")
                self._lock.wait(min(left, 1.0))
            events = [self._ready_event.get(k) for k in ks]
        if self.cuda:
            cur = torch.cuda.current_stream(self.device)
            for ev in events:
                if ev is not None:
                    cur.wait_event(ev)
        if not missing:
            return 0.0
        t1 = self.clock()
        with self._lock:
            self.stats.stall_seconds += t1 - t0
            self.events.append(CacheEvent("stall", None, tag, demand, t0, t1))
        return t1 - t0

    def release(self, keys: Iterable[Key], dirty: bool = True) -> None:
        """Unpin ``keys`` (once per ``acquire``); ``dirty``: their weights changed on the device."""
        ev = None
        if self.cuda:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self.device))
        with self._lock:
            now = self.clock()
            for k in dict.fromkeys(keys):
                if self._pins[k] <= 0:
                    raise CacheError(f"release of {k!r}, which is not acquired")
                self._pins[k] -= 1
                if self._pins[k] == 0:
                    del self._pins[k]
                if dirty:
                    self._dirty.add(k)
                self._last_use[k] = now
                if ev is not None:
                    self._ready_event[k] = ev  # a write-back must wait for the compute that used the key

    def evict(self, keys: Iterable[Key]) -> None:
        """Write back (if dirty) and free ``keys`` in the background; pinned keys are skipped."""
        with self._lock:
            self._check()
            for k in keys:
                self._known(k)
                self._wanted.discard(k)
                if self._state[k] == RESIDENT and not self._pins[k]:
                    self._queue.append(("evict", k, -1))
            self._lock.notify_all()

    def drain(self) -> None:
        """Wait until the worker has nothing left to do."""
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while self._queue or self._busy:
                self._check()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"context cache: queue not drained within {self.timeout} s")
                self._lock.wait(min(left, 1.0))
            self._check()

    def close(self) -> None:
        """Stop the worker (pending requests are dropped); every module's tensors go back to host memory."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._lock.notify_all()
        self._worker.join(timeout=self.timeout)
        if self._worker.is_alive():  # a copy still running: moving the tensors now could race it
            raise CacheError(f"context cache: the copy worker did not stop within {self.timeout} s")
        if self.cuda:
            torch.cuda.synchronize(self.device)
        for k, slots in self._slots.items():
            if self._state[k] in (RESIDENT, EVICTING):
                for s in slots:
                    if k in self._dirty and s.dev is not None:
                        s.host.copy_(s.dev)
                    s.tensor.data = s.host
                    s.dev = None
                self._state[k] = ABSENT
        self._used = 0

    def __enter__(self) -> ContextCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the worker --------------------------------------------------------------------------------
    _busy = False

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                op, k, tag = self._queue.popleft()
                self._busy = True
            try:
                if op == "evict":
                    self._do_evict(k)
                else:
                    self._do_load(k, tag, urgent=op == "load")
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                with self._lock:
                    self._error = e
            finally:
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def _do_load(self, k: Key, tag: int, urgent: bool) -> None:
        with self._lock:
            if self._state[k] != ABSENT or (not urgent and k not in self._wanted):
                return  # resident already, or a prefetch nobody wants any more
            victims = self._victims(self._bytes[k], urgent)
            if victims is None:
                if urgent:
                    raise CacheError(f"no room for {k!r}: the pinned keys fill the budget")
                self._wanted.discard(k)
                self.stats.prefetches_dropped += 1
                return
            for v in victims:
                self._state[v] = EVICTING
            self._state[k] = LOADING
        for v in victims:
            self._do_evict(v, claimed=True)
        t0 = self.clock()
        with self._lock:
            self._use(self._bytes[k])
        ev = self._copy_in(k)
        t1 = self.clock()
        with self._lock:
            self._state[k] = RESIDENT
            self._ready_event[k] = ev
            self.stats.bytes_h2d += self._bytes[k]
            if not urgent:
                self.stats.prefetches += 1
                self.events.append(CacheEvent("prefetch", k, tag, self._bytes[k], t0, t1))
            self._lock.notify_all()

    def _victims(self, n: int, urgent: bool) -> list[Key] | None:
        """Unpinned resident keys to evict so ``n`` more bytes fit (least recently used first; keys a
        prefetch is waiting to have used only for an urgent load); None if impossible."""
        if self.budget is None:
            return []
        free = self.budget - self._used
        if free >= n:
            return []
        cands = [k for k, s in self._state.items() if s == RESIDENT and not self._pins[k]]
        if not urgent:
            cands = [k for k in cands if k not in self._wanted and k not in self._protected]
        cands.sort(key=lambda k: (k in self._wanted or k in self._protected, self._last_use.get(k, 0.0)))
        out = []
        for k in cands:
            if free >= n:
                break
            out.append(k)
            free += self._bytes[k]
        return out if free >= n else None

    def _do_evict(self, k: Key, claimed: bool = False) -> None:
        with self._lock:
            if not claimed:
                if self._state[k] != RESIDENT or self._pins[k]:
                    return
                self._state[k] = EVICTING
            dirty = k in self._dirty
            self._dirty.discard(k)
            wait = self._ready_event.get(k)
        dirty = self._adopt_extras(k, on_device=True) or dirty  # new state has no home copy yet
        t0 = self.clock()
        self._copy_out(k, dirty, wait)
        t1 = self.clock()
        with self._lock:
            n = self._bytes[k]
            self._state[k] = ABSENT
            self._ready_event.pop(k, None)
            self._used -= n
            self.stats.evictions += 1
            if dirty:
                self.stats.bytes_d2h += n
            self.events.append(CacheEvent("evict", k, -1, n if dirty else 0, t0, t1))
            self._lock.notify_all()

    # ---- copies --------------------------------------------------------------------------------------
    def _buffer(self, like: torch.Tensor) -> torch.Tensor:
        free = self._pool.get((tuple(like.shape), like.dtype))
        if free:
            return free.pop()
        return torch.empty(like.shape, dtype=like.dtype, device=self.device)

    def _copy_in(self, k: Key) -> Any:
        self._adopt_extras(k, on_device=False)
        slots = self._slots[k]
        if self.cuda:
            with torch.cuda.stream(self._stream):
                for s in slots:
                    s.dev = self._buffer(s.host)
                    s.dev.copy_(s.host, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(self._stream)
            ev.synchronize()  # the worker waits for its copies; the caller's stream then waits on the event
            for s in slots:
                s.tensor.data = s.dev
            return ev
        for s in slots:
            s.dev = self._buffer(s.host)
            s.dev.copy_(s.host)
            s.tensor.data = s.dev
        return None

    def _copy_out(self, k: Key, dirty: bool, wait: Any) -> None:
        slots = self._slots[k]
        if self.cuda:
            with torch.cuda.stream(self._stream):
                if wait is not None:
                    self._stream.wait_event(wait)
                if dirty:
                    for s in slots:
                        s.host.copy_(s.dev, non_blocking=True)
            self._stream.synchronize()
        elif dirty:
            for s in slots:
                s.host.copy_(s.dev)
        for s in slots:
            s.tensor.data = s.host
            self._pool.setdefault((tuple(s.dev.shape), s.dev.dtype), []).append(s.dev)
            s.dev = None

    def _adopt_extras(self, k: Key, on_device: bool) -> bool:
        """Tensors of ``extra_tensors(k)`` (e.g. the key's optimizer state, created during a step while the
        key was resident) join its slots: from the next eviction on they move with the key and count.
        True if any were adopted."""
        if self._extra is None:
            return False
        adopted = False
        known = {id(s.tensor) for s in self._slots[k]}
        for t in self._extra(k):
            if id(t) in known:
                continue
            n = t.numel() * t.element_size()
            covered = min(n, self._reserve[k])  # already counted in the key's bytes
            self._reserve[k] -= covered
            if on_device:  # it lives in device memory now: give it a home copy
                slot = _Slot(t, torch.empty_like(t.data, device="cpu", pin_memory=self.cuda))
                slot.dev = t.data
            else:
                slot = _Slot(t, t.data.pin_memory() if self.cuda else t.data)
                t.data = slot.host
            self._slots[k].append(slot)
            adopted = True
            with self._lock:
                self._bytes[k] += n - covered
                if on_device:
                    self._use(n - covered)
        return adopted

    # ---- helpers -------------------------------------------------------------------------------------
    def _use(self, n: int) -> None:
        self._used += n
        if self._used > self.stats.peak_bytes:
            self.stats.peak_bytes = self._used

    def _known(self, k: Key) -> None:
        if k not in self._state:
            raise KeyError(f"context cache: unknown key {k!r}")

    def _check(self) -> None:
        if self._error is not None:
            e, self._error = self._error, None
            raise CacheError(f"context cache worker failed: {e}") from e
        if self._closed:
            raise CacheError("context cache is closed")
