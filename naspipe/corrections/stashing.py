"""Weight versions of one pipeline stage, and the weight-version lags each policy really produces.

Why it exists: the baselines differ only in *which weight version* a forward and a backward read. This
module keeps those versions (copy-on-write, so a copy exists only while some reader still needs it),
records the version every forward and backward read, and so lets the lags be **measured** from an executed
schedule instead of assumed. It imports no torch: tensors are handled through ``detach().clone()``.

Versions are numbered by update count: version ``v`` is the stage's weights after ``v`` optimizer updates.
The lag of micro-batch ``j`` is counted at the update that applies ``j``'s gradient: if that update turns
version ``u`` into ``u + 1``, then ``forward lag = u - (version F(j) read)`` and ``backward lag = u -
(version B(j) read)``.

Policies (``STASH_POLICIES``):

* ``async`` (PipeMare, no stash): the forward reads the live weights at its time, the backward reads the
  live weights at its time; one update per micro-batch. 1F1B: F lag ``P-1-i``, B lag 0.
* ``stash`` (PipeDream): the forward reads the live weights; the backward reads the version its forward
  read (weight stashing); one update per micro-batch. 1F1B: F = B lag ``P-1-i``; stage ``i`` holds at most
  ``P-i`` distinct versions (the live one included).
* ``2bw`` (PipeDream-2BW): gradients of a batch of ``group`` micro-batches (``group >= P``) are applied in
  one update. A batch's version is fixed when its first micro-batch enters the pipeline, so every stage
  uses the same one: the newest version stage 0 has then, which in 1F1B with ``P >= 2`` is ``b-1`` for
  batch ``b`` (batch ``b-1`` is still in flight). Every micro-batch of batch ``b`` reads version
  ``max(0, b - delay)`` in forward and backward, ``delay = two_bw_delay(P)`` (1, or 0 on one stage), so
  ``W(b+1) = W(b) - lr * grad(W(b-1))``: lag 1 from the second batch on, two versions held.
* ``gpipe`` (BSP flush): all forwards of a batch of ``group`` micro-batches, all backwards, one update:
  forward and backward read the live weights, lag 0.

API::

    store = VersionStore(params, policy, group=1, delay=1)   # params: the stage's tensors (may be empty)
                                   # micro_batches=N (optional): the total, so no copy outlives the last reader
    ws = store.forward(j)          # tensors F(j) computes with (live tensors or read-only copies)
    ws = store.backward(j)         # tensors B(j) computes with
    store.update(step=opt.step)    # copy what readers still need, run the step, count the update
    store.lags()                   # {j: (forward lag, backward lag)} of every applied micro-batch
    store.version_read(j, "F")     # the version F(j) read, for the trace

    pipeline_schedule(stages, micro_batches, "1f1b" | "gpipe", group=...) -> list[ScheduledTask]
    measure_lags(policy, stages, steps, group=None) -> list[StageLags]
    replay_lags(policy, tasks, group=1, delay=1) -> StageLags  # one stage's executed (kind, j) order
    stage_orders(trace) -> list[list[tuple[str, int]]]         # per-stage (kind, j) order of a naspipe Trace
    two_bw_delay(stages) -> int;  theoretical_lag(policy, stage, stages) -> (forward, backward)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from torch import Tensor

    from naspipe.sched.trace import Trace

STASH_POLICIES: tuple[str, ...] = ("async", "stash", "2bw", "gpipe")
FWD, BWD = "F", "B"


class VersionStore:
    """The weight versions of one stage (or one candidate) under one policy."""

    def __init__(self, params: Sequence[Tensor] = (), policy: str = "async", *, group: int = 1, delay: int = 1,
                 micro_batches: int | None = None):
        """``group``: micro-batches per update (2bw, gpipe); ``delay``: batches a 2bw batch lags behind
        (``two_bw_delay(stages)``: 1 in a pipeline, 0 on a single stage); ``micro_batches``: the total, if
        known (no version is kept for forwards that will never come)."""
        if policy not in STASH_POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(STASH_POLICIES)}")
        if group < 1 or delay < 0:
            raise ValueError("need group >= 1 and delay >= 0")
        self.params = list(params)
        self.policy = policy
        self.group = group if policy in ("2bw", "gpipe") else 1
        self.delay = delay if policy == "2bw" else 0
        self.total = micro_batches
        self.updates = 0  # the live weights are this version
        self._copies: dict[int, list[Tensor]] = {}
        self._fwd: dict[int, int] = {}
        self._bwd: dict[int, int] = {}
        self._applied: dict[int, int] = {}
        self._in_flight: dict[int, int] = {}  # j -> version its forward read, until its update
        self._next_forward = 0  # forwards run in micro-batch order: later ones have larger j
        self.peak_versions = 1

    # -- reads ---------------------------------------------------------------------------------
    def _wanted_by_forward(self, j: int) -> int:
        if self.policy == "2bw":
            return max(0, j // self.group - self.delay)
        return self.updates

    def _tensors(self, v: int, what: str) -> list[Tensor]:
        if v == self.updates:
            return self.params
        if v in self._copies:
            return self._copies[v]
        raise RuntimeError(f"{self.policy}: {what} needs weight version {v}, but the stage holds "
                           f"{sorted({self.updates, *self._copies})} (version {v} was "
                           f"{'not produced yet' if v > self.updates else 'dropped'})")

    def forward(self, j: int) -> list[Tensor]:
        """The tensors the forward of micro-batch ``j`` reads; records its version."""
        if j in self._fwd:
            raise RuntimeError(f"forward of micro-batch {j} recorded twice")
        v = self._wanted_by_forward(j)
        out = self._tensors(v, f"F({j})")
        self._fwd[j] = v
        self._in_flight[j] = v
        self._next_forward = max(self._next_forward, j + 1)
        return out

    def backward(self, j: int) -> list[Tensor]:
        """The tensors the backward of micro-batch ``j`` reads; records its version."""
        if j not in self._fwd:
            raise RuntimeError(f"backward of micro-batch {j} before its forward")
        if j in self._bwd:
            raise RuntimeError(f"backward of micro-batch {j} recorded twice")
        v = self._fwd[j] if self.policy in ("stash", "2bw") else self.updates
        out = self._tensors(v, f"B({j})")
        self._bwd[j] = v
        return out

    # -- updates -------------------------------------------------------------------------------
    def _needed_after_update(self) -> set[int]:
        need = set(self._in_flight.values()) if self.policy in ("stash", "2bw") else set()
        more = self.total is None or self._next_forward < self.total
        if self.policy == "2bw" and more:  # forwards still to come read at least what the next one reads
            first = self._wanted_by_forward(self._next_forward)
            need |= {v for v in (*self._copies, self.updates) if v >= first}
        return need

    def update(self, micro_batches: Iterable[int] | None = None, step: Callable[[], Any] | None = None) -> None:
        """Apply one update carrying the gradients of ``micro_batches`` (default: every micro-batch whose
        backward ran and is not applied yet). Before ``step`` mutates the live weights, the live version is
        copied if a reader still needs it; afterwards versions nobody needs are dropped."""
        js = sorted(micro_batches) if micro_batches is not None else sorted(set(self._bwd) - set(self._applied))
        for j in js:
            if j not in self._bwd:
                raise RuntimeError(f"update carries micro-batch {j}, whose backward has not run")
            if j in self._applied:
                raise RuntimeError(f"micro-batch {j} applied twice")
            self._applied[j] = self.updates
            self._in_flight.pop(j, None)
        if self.updates in self._needed_after_update() and self.updates not in self._copies:
            self._copies[self.updates] = [p.detach().clone() for p in self.params]
        if step is not None:
            step()
        self.updates += 1
        need = self._needed_after_update()
        for v in [v for v in self._copies if v not in need]:
            del self._copies[v]
        self.peak_versions = max(self.peak_versions, self.held)

    # -- records -------------------------------------------------------------------------------
    @property
    def held(self) -> int:
        """Distinct weight versions kept right now, the live one included."""
        return len({self.updates, *self._copies})

    def version_read(self, j: int, kind: str) -> int:
        """The version ``F(j)`` (kind ``"F"``) or ``B(j)`` (kind ``"B"``) read."""
        return (self._fwd if kind == FWD else self._bwd)[j]

    def lags(self) -> dict[int, tuple[int, int]]:
        """``{j: (forward lag, backward lag)}`` for every micro-batch whose update has been applied."""
        return {j: (u - self._fwd[j], u - self._bwd[j]) for j, u in sorted(self._applied.items())}


# -- schedules ---------------------------------------------------------------------------------
class ScheduledTask(NamedTuple):
    start: float
    end: float
    stage: int
    kind: str  # "F" or "B"
    micro_batch: int


def pipeline_schedule(stages: int, micro_batches: int, kind: str = "1f1b", *, group: int | None = None,
                      fwd: float = 1.0, bwd: float = 2.0) -> list[ScheduledTask]:
    """A small discrete-event pipeline: every task of every stage with its start and end time.

    ``1f1b``: backward first; a forward on stage ``s`` only while fewer than ``P - s`` micro-batches are in
    flight there (PipeDream's admission). ``gpipe``: batches of ``group`` micro-batches (default ``P``); a
    stage runs all forwards of a batch, then its backwards, and starts the next batch only after its last
    backward of this one (the flush). Forwards and backwards run in micro-batch order on every stage.
    Returned sorted by (start, stage).
    """
    if stages < 1 or micro_batches < 0:
        raise ValueError("need stages >= 1 and micro_batches >= 0")
    if kind not in ("1f1b", "gpipe"):
        raise ValueError(f"unknown schedule {kind!r}")
    P, n, m = stages, micro_batches, group or stages
    act = [[0.0 if s == 0 else None for _ in range(n)] for s in range(P)]  # arrival time of F's input
    grad: list[list[float | None]] = [[None] * n for _ in range(P)]          # arrival time of B's input
    next_f, next_b = [0] * P, [0] * P
    free = [0.0] * P
    out: list[ScheduledTask] = []
    events: list[tuple[float, int]] = [(0.0, s) for s in range(P)]  # (time, stage): look at the stage then
    heapq.heapify(events)

    def candidates(s: int) -> list[tuple[float, str, int]]:
        found = []
        jb, jf = next_b[s], next_f[s]
        if jb < n and grad[s][jb] is not None and (kind == "1f1b" or next_f[s] >= min(n, (jb // m + 1) * m)):
            found.append((max(free[s], grad[s][jb]), BWD, jb))
        if jf < n and act[s][jf] is not None:
            ok = (jf - jb < P - s) if kind == "1f1b" else (jb >= (jf // m) * m)
            if ok:
                found.append((max(free[s], act[s][jf]), FWD, jf))
        return found

    while events:
        now, s = heapq.heappop(events)
        if free[s] > now:
            continue
        ready = [c for c in candidates(s) if c[0] <= now]
        if not ready:
            continue
        _, k, j = min(ready, key=lambda c: c[1] != BWD)  # backward first
        end = now + (fwd if k == FWD else bwd)
        out.append(ScheduledTask(now, end, s, k, j))
        free[s] = end
        if k == FWD:
            next_f[s] += 1
            if s + 1 < P:
                act[s + 1][j] = end
                heapq.heappush(events, (end, s + 1))
            else:
                grad[s][j] = end
        else:
            next_b[s] += 1
            if s > 0:
                grad[s - 1][j] = end
                heapq.heappush(events, (end, s - 1))
        heapq.heappush(events, (end, s))
    if len(out) != 2 * P * n:
        raise RuntimeError(f"schedule stalled after {len(out)} of {2 * P * n} tasks")
    return sorted(out, key=lambda t: (t.start, t.stage))


# -- measured lags -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StageLags:
    """Measured lags of one stage: per micro-batch, in micro-batch order."""

    stage: int
    forward: tuple[int, ...]
    backward: tuple[int, ...]
    peak_versions: int

    @property
    def max_forward(self) -> int:
        return max(self.forward, default=0)

    @property
    def max_backward(self) -> int:
        return max(self.backward, default=0)


def replay_lags(policy: str, tasks: Iterable[tuple[str, int]], *, group: int = 1, delay: int = 1, stage: int = 0,
                micro_batches: int | None = None) -> StageLags:
    """Replay one stage's executed task order ``[(kind, j), ...]`` through a ``VersionStore``.

    ``async``/``stash``: one update after each backward. ``2bw``/``gpipe``: one update after the backward
    that completes a batch of ``group`` micro-batches (the last batch may be short: ``micro_batches``).
    """
    tasks = list(tasks)
    n = micro_batches if micro_batches is not None else 1 + max((j for _, j in tasks), default=-1)
    store = VersionStore((), policy, group=group, delay=delay, micro_batches=n)
    done: set[int] = set()
    for kind, j in tasks:
        if kind == FWD:
            store.forward(j)
        elif kind == BWD:
            store.backward(j)
            done.add(j)
            if store.group == 1:
                store.update([j])
            else:
                b = j // store.group
                batch = range(b * store.group, min(n, (b + 1) * store.group))
                if all(i in done for i in batch):
                    store.update(batch)
        else:
            raise ValueError(f"task kind must be 'F' or 'B', got {kind!r}")
    lags = store.lags()
    return StageLags(stage, tuple(lags[j][0] for j in sorted(lags)), tuple(lags[j][1] for j in sorted(lags)),
                     store.peak_versions)


def measure_lags(policy: str, stages: int, steps: int, *, group: int | None = None) -> list[StageLags]:
    """Run ``steps`` micro-batches through the policy's schedule (1F1B for async/stash/2bw, GPipe flushes
    for gpipe; ``group`` defaults to ``stages``) and measure each stage's forward and backward lags."""
    if policy not in STASH_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(STASH_POLICIES)}")
    m = group or stages
    if policy == "2bw" and m < stages:
        raise ValueError("2bw needs batches of at least `stages` micro-batches")
    sched = pipeline_schedule(stages, steps, "gpipe" if policy == "gpipe" else "1f1b", group=m)
    return [replay_lags(policy, [(t.kind, t.micro_batch) for t in sched if t.stage == s], group=m,
                        delay=two_bw_delay(stages), stage=s, micro_batches=steps) for s in range(stages)]


def two_bw_delay(stages: int) -> int:
    """Batches a 2BW batch's weight version lags behind: 1 in a pipeline, 0 on a single stage (no overlap)."""
    return 1 if stages > 1 else 0


def stage_orders(trace: Trace) -> list[list[tuple[str, int]]]:
    """Per stage, the executed ``(kind, subnet)`` order of a naspipe ``Trace`` (F and B tasks, by start)."""
    rows = sorted((e.start, e.stage, e.kind, e.subnet) for e in trace.compute_events() if e.kind in (FWD, BWD))
    out: list[list[tuple[str, int]]] = [[] for _ in range(trace.stages)]
    for _, s, k, j in rows:
        out[s].append((k, j))
    return out


def theoretical_lag(policy: str, stage: int, stages: int) -> tuple[int, int]:
    """Steady-state (forward lag, backward lag) the literature states for ``policy`` on ``stage``."""
    d = stages - 1 - stage
    b = two_bw_delay(stages)
    return {"async": (d, 0), "stash": (d, d), "2bw": (b, b), "gpipe": (0, 0)}[policy]
