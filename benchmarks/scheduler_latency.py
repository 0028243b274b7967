"""Cost of one CSP scheduling decision, and the wall time of a 10,000-subnet simulation.

A *decision* is what a stage does when something happens: handle the events since its last decision
(``on_finish``, ``on_activation``, ``on_gradient``) and answer ``next_task``. The real scheduler objects
are driven by the real simulator; each one is wrapped to time those calls with ``time.perf_counter_ns``.
Setting: csp, csp-cp and the default order csp-plan (with plan 1, so every ranked task pays its hashed factor;
the plan itself is chosen before the run), window 256, 8 stages, naspipe-k48 and naspipe-k96 (issue 2 target:
median < 50 us; issue 18: csp-cp and csp-plan median < 20 us; the NASPipe paper's scheduler needs up to 10 ms).
Then: 10,000 subnets on 8 stages, window 200, timed end to end (target < 30 s).

Run: ``.venv/bin/python benchmarks/scheduler_latency.py``
"""

from __future__ import annotations

import statistics
import time
from unittest import mock

from _common import percentile, write_result

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import make_scheduler
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import engine, simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset

STAGES = 8
WINDOW = 256
SUBNETS = 3000


class _Timer:
    """Accumulates event-handler time per stage and closes a sample at each ``next_task``."""

    def __init__(self) -> None:
        self.samples: list[int] = []  # ns per decision (handlers since the last decision + next_task)
        self.next_only: list[int] = []  # ns of next_task alone

    def wrap(self, sched):  # noqa: ANN001, ANN201
        pending = [0]
        clock = time.perf_counter_ns

        def timed(method):  # noqa: ANN001, ANN202
            def call(*args):  # noqa: ANN002, ANN202
                t0 = clock()
                method(*args)
                pending[0] += clock() - t0
            return call

        for name in ("on_finish", "on_activation", "on_gradient"):
            setattr(sched, name, timed(getattr(sched, name)))
        next_task = sched.next_task

        def decide():  # noqa: ANN202
            t0 = clock()
            task = next_task()
            dt = clock() - t0
            self.next_only.append(dt)
            self.samples.append(pending[0] + dt)
            pending[0] = 0
            return task

        sched.next_task = decide
        return sched


def decision_latency(space_name: str, policy: str = "csp") -> dict:
    sp = preset(space_name)
    part = partition(sp, STAGES)
    stream = UniformStream(sp, 0, SUBNETS)
    timer = _Timer()

    def make(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return timer.wrap(make_scheduler(*args, **kwargs))

    with mock.patch.object(engine, "make_scheduler", make):
        r = simulate(RunSpec.of(sp, part, stream, policy, window=WINDOW))
    us = [x / 1000 for x in timer.samples]
    nt = [x / 1000 for x in timer.next_only]
    return {
        "space": space_name, "policy": policy, "stages": STAGES, "window": WINDOW, "subnets": SUBNETS,
        "decisions": len(us),
        "decision_us_median": statistics.median(us), "decision_us_p99": percentile(us, 99),
        "decision_us_max": max(us), "decision_us_mean": statistics.fmean(us),
        "next_task_us_median": statistics.median(nt), "next_task_us_p99": percentile(nt, 99),
        "utilization": r.utilization,
    }


def big_simulation(space_name: str, n: int = 10_000) -> dict:
    sp = preset(space_name)
    part = partition(sp, STAGES)
    stream = UniformStream(sp, 0, n)
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(RunSpec.of(sp, part, stream, "csp", window=200))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"space": space_name, "policy": "csp", "stages": STAGES, "window": 200, "subnets": n,
            "wall_seconds": wall, "cpu_seconds": cpu, "engine_seconds": r.wall_seconds, "events": len(r.trace.events),
            "utilization": r.utilization}


def main() -> None:
    latency = [decision_latency(name, policy) for policy in ("csp", "csp-cp", "csp-plan:plan=1")
               for name in ("naspipe-k48", "naspipe-k96")]
    sims = [big_simulation(name) for name in ("naspipe-k48", "naspipe-k96")]
    write_result("scheduler_latency", {
        "decision_latency": latency,
        "target_median_us": 50,
        "target_median_us_csp_cp": 20,  # csp-cp and the default order, csp-plan (issue 18)
        "simulate_10k": sims,
        "target_simulate_10k_seconds": 30,
        "meets_targets": all(x["decision_us_median"] < (20 if x["policy"].startswith(("csp-cp", "csp-plan")) else 50)
                             for x in latency)
        and all(x["wall_seconds"] < 30 for x in sims),
    })


if __name__ == "__main__":
    main()
