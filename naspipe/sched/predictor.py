"""The context predictor: forecast a stage's next tasks so their layers can be prefetched in time.

Why it exists: the supernet lives in host memory and a stage's device holds only what its running and
soon-to-run tasks need. CSP reorders the subnet sequence at run time, so the order of future tasks is not
known in advance; but operator times are nearly deterministic, so the stage can *compute* its future.
The predictor runs the stage's own scheduler speculatively on a copy (``speculative_copy``): it assumes
the running task finishes at its expected end (a finished backward releases writes and may free a
forward), feeds in the activations and gradients that are expected to arrive (messages already in flight
and the tasks its neighbours are running or are forecast to run, "timings passed along the pipeline"),
and asks "what would I run next? and after that?" up to ``depth`` tasks.

Pure: no torch, no clocks. Drivers (the simulator, the runtime) supply the durations and arrivals.
``AccuracyMeter`` measures the share of predicted-next tasks that actually ran next. The speculative
copies and the gated choice it runs on live in ``naspipe.sched.speculate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from naspipe.sched.policies import PolicyError, StageScheduler
from naspipe.sched.speculate import (  # the forecast is built on them; re-exported (__all__)
    SpeculativeGate,
    fallback_task,
    gated_next_task,
    peek,
    speculative_copy,
)
from naspipe.sched.tasks import BACKWARD, FORWARD, Task
from naspipe.sequences.sequence import WindowError

ACTIVATION = "activation"
GRADIENT = "gradient"


class Arrival(NamedTuple):
    """An activation (from the previous stage) or gradient (from the next) expected at ``time``."""

    time: float
    kind: str  # ACTIVATION | GRADIENT
    subnet: int


class Prediction(NamedTuple):
    """A forecast task with its expected start and end."""

    task: Task
    start: float
    end: float


# ---- the forecast ---------------------------------------------------------------------------------
class Predictor:
    """Forecast a stage's next ``depth`` tasks by running its scheduler speculatively.

    ``duration(task)`` gives the expected seconds of a task (the cost model, or measured times).
    """

    def __init__(self, duration: Callable[[Task], float], depth: int = 4):
        if depth < 1:
            raise ValueError("prediction depth must be >= 1")
        self.duration = duration
        self.depth = depth
        self.forecasts = 0

    def forecast(self, sched: StageScheduler, now: float, *, running_end: float | None = None,
                 arrivals: Iterable[Arrival] = (), gate: SpeculativeGate | None = None) -> list[Prediction]:
        """The tasks ``sched`` is expected to run after its running task, in order, with expected times.

        ``running_end``: when the running task is expected to finish (default: now + its duration).
        ``arrivals``: messages that have not been delivered to ``sched`` yet, with expected arrival times;
        each subnet's activation or gradient should appear at most once (later duplicates are ignored).
        ``gate``: the driver's admission control (a refused forward waits, as the driver would make it);
        it is copied, never changed. ``sched`` itself is never changed.
        """
        self.forecasts += 1
        spec = speculative_copy(sched)
        g = gate.copy() if gate is not None else None
        t = now
        running = spec.running
        pending = sorted(set(arrivals))
        seen: set[tuple[str, int]] = set()
        out: list[Prediction] = []
        i = 0
        try:
            if running is not None:
                t = running_end if running_end is not None else now + self.duration(running)
                t = max(t, now)
                spec.on_finish(running)  # assume it finished: what runs next?
                if g is not None:
                    g.finish(running)
            while len(out) < self.depth:
                while i < len(pending) and pending[i].time <= t:
                    self._deliver(spec, pending[i], seen)
                    i += 1
                task, _ = gated_next_task(spec, g)
                if task is None:
                    if i >= len(pending):
                        break
                    t = max(t, pending[i].time)
                    continue
                end = t + self.duration(task)
                out.append(Prediction(task, t, end))
                if g is not None:
                    g.start(task)
                spec.on_finish(task)
                if g is not None:
                    g.finish(task)
                t = end
        except (PolicyError, WindowError, ValueError, KeyError):
            # stale information (an arrival that was already delivered) can make the copy inconsistent;
            # the forecast then stops where it is: it is advice, never a decision
            pass
        return out

    @staticmethod
    def _deliver(spec: StageScheduler, a: Arrival, seen: set[tuple[str, int]]) -> None:
        key = (a.kind, a.subnet)
        if key in seen:
            return
        seen.add(key)
        if a.kind == ACTIVATION:
            spec.on_activation(a.subnet)
        elif a.kind == GRADIENT:
            spec.on_gradient(a.subnet)
        else:
            raise ValueError(f"unknown arrival kind {a.kind!r}")


def arrivals_from_neighbours(upstream: Sequence[Prediction], downstream: Sequence[Prediction],
                             hop: float = 0.0) -> list[Arrival]:
    """Expected arrivals on a stage from its neighbours' running/forecast tasks.

    A forward on the previous stage sends its activation when it ends; a backward (input gradient) on the
    next stage sends its gradient when it ends; ``hop`` is the transfer time of one message.
    """
    out = [Arrival(p.end + hop, ACTIVATION, p.task.subnet) for p in upstream if p.task.kind == FORWARD]
    out += [Arrival(p.end + hop, GRADIENT, p.task.subnet) for p in downstream if p.task.kind == BACKWARD]
    return out


class AccuracyMeter:
    """Share of predicted-next tasks that actually ran next (``rate``), and how often a prediction existed."""

    def __init__(self) -> None:
        self.hits = 0
        self.predicted = 0
        self.tasks = 0

    def record(self, predicted: Task | None, actual: Task) -> None:
        self.tasks += 1
        if predicted is not None:
            self.predicted += 1
            self.hits += predicted == actual

    @property
    def rate(self) -> float:
        return self.hits / self.predicted if self.predicted else 0.0

    @property
    def coverage(self) -> float:
        return self.predicted / self.tasks if self.tasks else 0.0

    def merge(self, other: AccuracyMeter) -> None:
        self.hits += other.hits
        self.predicted += other.predicted
        self.tasks += other.tasks


__all__ = ["ACTIVATION", "GRADIENT", "AccuracyMeter", "Arrival", "Prediction", "Predictor", "SpeculativeGate",
           "arrivals_from_neighbours", "fallback_task", "gated_next_task", "peek", "speculative_copy"]
