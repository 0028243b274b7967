"""The simulated twin of a measured run: its sequence simulated with the cost model rescaled to its times,
or with the very task times the run recorded.

Why it exists: the cost model is relative, so a measured run (``naspipe train``) is compared with the schedule
the simulator makes of the same sequence once the model's mean forward and backward task times match the
measured ones (``simulated_twin``; the figure export, ``naspipe.experiments.figures``, draws it). The report
(``naspipe.viz.report``) asks a sharper question: what would this policy's schedule take with exactly the
run's own task times (``TraceCosts``, ``replayed_schedule``)? That schedule and the causal lower bound are then
computed from the same durations, so the bound never exceeds it. Torch-free.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from naspipe.runspec.spec import RunSpec
from naspipe.sched.tasks import Task
from naspipe.sched.trace import Trace
from naspipe.sim import SimOptions
from naspipe.sim.engine import simulate
from naspipe.spaces.space import Block, SearchSpace


def scaled_space(space: SearchSpace, fwd: float, bwd: float) -> SearchSpace:
    """``space`` with every candidate's forward cost times ``fwd`` and backward cost times ``bwd``."""
    blocks = tuple(Block(b.name, tuple(dataclasses.replace(c, fwd=c.fwd * fwd, bwd=c.bwd * bwd) for c in b.candidates),
                         b.fixed, b.role) for b in space.blocks)
    return dataclasses.replace(space, blocks=blocks)


def simulated_twin(space: SearchSpace, part: Any, stream: Any, measured: Trace, policy: str = "csp",
                   seed: int = 0) -> Trace:
    """Simulate ``stream`` with the cost model rescaled to ``measured``'s mean F and B durations."""
    first = simulate(RunSpec.of(space, part, stream, policy, seed=seed)).trace

    def total(t: Trace, kind: str) -> float:
        return sum(e.end - e.start for e in t.events if e.kind == kind)

    scale = {k: (total(measured, k) / total(first, k)) if total(first, k) > 0 else 1.0 for k in ("F", "B")}
    trace = simulate(RunSpec.of(scaled_space(space, scale["F"], scale["B"]), part, stream, policy, seed=seed)).trace
    trace.meta.update(driver="sim", policy=policy, scale_f=scale["F"], scale_b=scale["B"])
    return trace


class TraceCosts:
    """The task durations a trace recorded, as the simulator's cost model (no transfer time; a task the trace
    lacks, such as a stage-0 input gradient that computes nothing, takes 0)."""

    def __init__(self, trace: Trace, batch_size: int):
        self._durations = trace.task_durations()
        self.batch_size = batch_size

    def duration(self, task: Task) -> float:
        return self._durations.get(task, 0.0)

    def transfer(self) -> float:
        return 0.0


def replayed_schedule(space: SearchSpace, part: Any, stream: Any, measured: Trace, policy: str,
                      seed: int = 0) -> Trace:
    """The schedule ``policy`` makes of ``stream`` when every task takes exactly the time ``measured`` recorded."""
    trace = simulate(RunSpec.of(space, part, stream, policy, seed=seed), SimOptions(costs=TraceCosts(measured,
                                                                                                     space.batch_size))).trace
    trace.meta.update(driver="sim", policy=policy, durations="measured")
    return trace
