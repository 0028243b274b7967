"""Train in one process in the order of a simulated schedule: the real stage executors, no processes.

Why it exists: notebooks and tests compare update rules on the exact task order a policy produces, without
the cost of stage processes and transport; the arithmetic is the same as ``naspipe train`` given that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from naspipe.runspec.spec import RunSpec
from naspipe.sim import SimOptions


def replay_schedule(space: Any, stages: int, policy: str, subnets: Sequence[Sequence[int]], *, seed: int = 0,
                    shared: str = "frozen", optimizer: str = "sgd", lr: float | None = None,
                    jitter: float = 0.0) -> tuple[dict[int, float], list[Any]]:
    """Train in one process: the real stage executors run in the order of a simulated schedule of ``policy``.

    Fast (no processes, no transport) and the same arithmetic as ``naspipe train`` given the same task order.
    Returns the losses and the stage executors (``ex.model``, ``ex.rule.reads``); for notebooks and tests.
    """
    from naspipe.inputs.optim_names import lr_or_default
    from naspipe.models import build_stage
    from naspipe.runtime.stage_exec import StageExecutor
    from naspipe.runtime.stagerun import StageRun
    from naspipe.sequences.sequence import ReplayStream
    from naspipe.sim import simulate
    from naspipe.spaces.partition import partition
    from naspipe.spaces.shared import parse_shared

    sh = parse_shared(shared)
    part = partition(space, stages)
    subs = [tuple(s) for s in subnets]
    sim = simulate(RunSpec.of(space, part, ReplayStream(space, [list(s) for s in subs]), policy, shared=sh,
                              seed=seed), SimOptions(jitter=jitter))
    sched = sim.schedulers[0]
    execs = [StageExecutor(build_stage(space, part.blocks(s), seed, sh), subs, StageRun.local(s, stages, policy),
                           seed=seed, optimizer=optimizer, lr=lr_or_default(optimizer, lr),
                           shared_delay=sh.delay if sh.trains_shared else None, write_kind=sched.write_kind,
                           micro_batches=sched.micro_batches) for s in range(stages)]
    acts: dict = {}
    grads: dict = {}
    for ev in sorted(sim.trace.compute_events(), key=lambda e: (e.start, e.stage)):
        s, j, ex = ev.stage, ev.subnet, execs[ev.stage]
        if ev.kind == "F":
            x, rg = acts.pop((j, s), (None, False))
            out, rg = ex.forward(j, x, rg)
            if s + 1 < stages:
                acts[(j, s + 1)] = (out.clone(), rg)
        elif ev.kind == "B":
            gin = ex.backward(j, grads.pop((j, s), None))
            if s > 0:
                grads[(j, s - 1)] = gin.clone() if gin is not None else None
        else:
            ex.weight(j)
    return execs[-1].losses, execs
