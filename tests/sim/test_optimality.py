"""The exact problem (``naspipe.sim.optimum``): every simulated schedule is a feasible point of it, no lower bound
of ``naspipe.sim.bound`` is ever above its proven optimum (OR-Tools CP-SAT), and the checker catches broken
schedules. Tiny instances, so CP-SAT proves each optimum in milliseconds."""

from __future__ import annotations

import dataclasses

import pytest

from naspipe.runspec.spec import RunSpec
from naspipe.sched.trace import Trace
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import CostModel, simulate
from naspipe.sim.bound import lower_bound
from naspipe.sim.optimum import build_problem, feasibility_violations, heads_tails, replay, solve
from naspipe.spaces.partition import partition
from naspipe.spaces.space import unit_space

pytest.importorskip("ortools")

CAUSAL = ("sequential", "csp", "csp-chain", "csp-cp", "csp-plan", "csp-bw")  # csp-plan: the default, planned


def _instances():
    for k in (2, 3, 6):
        for blocks, stages in ((4, 2), (6, 3)):
            for seed in range(4):
                yield k, blocks, stages, 6 + seed, seed


def _unit_instance(k: int, blocks: int, stages: int, seed: int, n: int):
    """A unit space (K candidates per block, B = 2F, one time unit per subnet forward), its partition,
    a seeded stream of ``n`` subnets and those subnets."""
    sp = unit_space(k, choice_blocks=blocks, fwd=1.0 / blocks, bwd=2.0 / blocks)
    stream = UniformStream(sp, seed, n)
    return sp, partition(sp, stages), stream, [stream[j] for j in range(n)]


@pytest.mark.parametrize("k,blocks,stages,n,seed", list(_instances()))
def test_bound_never_above_the_optimum_and_every_schedule_is_feasible(k, blocks, stages, n, seed) -> None:
    sp, part, stream, subs = _unit_instance(k, blocks, stages, seed, n)
    for split in (False, True):
        costs = CostModel(sp, part, subs, split_backward=split)
        pb = build_problem(sp, part, subs, costs.duration, split_backward=split)
        runs = [simulate(RunSpec.of(sp, part, stream, p)) for p in CAUSAL if (p == "csp-bw") == split]
        for r in runs:
            assert feasibility_violations(pb, r.trace) == [], r.trace.meta["policy"]
        sol = solve(pb, hints=[r.trace for r in runs], time_limit=10)
        assert sol.optimal
        b = lower_bound(sp, part, subs, costs.duration, split_backward=split)
        assert b.tight_bound <= sol.bound + 1e-9
        assert sol.makespan <= min(r.makespan for r in runs) + 1e-9
        assert sol.makespan == pytest.approx(sol.bound)


def test_a_hand_solved_instance() -> None:
    # 2 stages, one block each, F = B = 1; subnets 0 and 1 share stage 0's candidate, 2 is free.
    # Optimum 8 (hand-checked: 3 subnets x 4 tasks on two machines, subnet 1 waits for B(0,0) at 4, and
    # F(2,*) and B(2,*) fill the gaps); the bound here is the critical path 0 -> 1: 4 + 4 = 8.
    sp = unit_space(2, choice_blocks=2, fwd=1.0, bwd=1.0)
    part = partition(sp, 2)
    subs = [(0, 0), (0, 1), (1, 0)]
    costs = CostModel(sp, part, subs)
    pb = build_problem(sp, part, subs, costs.duration)
    sol = solve(pb, time_limit=10)
    assert sol.optimal and sol.makespan == pytest.approx(8.0)
    assert lower_bound(sp, part, subs, costs.duration).lower_bound == pytest.approx(8.0)


def test_checker_flags_broken_schedules() -> None:
    sp, part, stream, subs = _unit_instance(2, 4, 2, 0, 6)
    r = simulate(RunSpec.of(sp, part, stream, "csp"))
    pb = build_problem(sp, part, subs, r.costs.duration)
    assert feasibility_violations(pb, r.trace) == []

    def shifted(i: int, dt: float) -> Trace:
        ev = list(r.trace.compute_events())
        ev[i] = dataclasses.replace(ev[i], start=ev[i].start + dt, end=ev[i].end + dt)
        return Trace(r.trace.stages, ev)

    # the last task pulled earlier overlaps or starts before its predecessor ends
    last = max(range(len(r.trace.compute_events())), key=lambda i: r.trace.compute_events()[i].end)
    assert feasibility_violations(pb, shifted(last, -0.2))
    # a task missing, or stretched
    assert any("never ran" in v for v in feasibility_violations(pb, Trace(2, r.trace.compute_events()[1:])))
    ev = list(r.trace.compute_events())
    ev[0] = dataclasses.replace(ev[0], end=ev[0].end + 0.1)
    assert any("took" in v for v in feasibility_violations(pb, Trace(2, ev)))
    # a causal edge: asp ignores the causal rule, so with 2 candidates its schedule breaks one
    asp = simulate(RunSpec.of(sp, part, UniformStream(sp, 0, 6), "asp"))
    assert any("before" in v for v in feasibility_violations(pb, asp.trace))


def test_replay_rejects_orders_against_the_edges() -> None:
    sp = unit_space(2, choice_blocks=2, fwd=1.0, bwd=1.0)
    part = partition(sp, 2)
    subs = [(0, 0)]
    pb = build_problem(sp, part, subs, CostModel(sp, part, subs).duration)
    stage0 = [i for i, t in enumerate(pb.tasks) if t.stage == 0]  # F(0,0), B(0,0)
    stage1 = [i for i, t in enumerate(pb.tasks) if t.stage == 1]
    assert replay(pb, [stage0, stage1])[0] == pytest.approx(4.0)
    with pytest.raises(ValueError):
        replay(pb, [stage0[::-1], stage1])


def test_heads_and_tails_of_a_small_dag() -> None:
    # 0 -> 1 (lag 2) -> 3, 0 -> 2 -> 3; durations 1, 3, 5, 2: head = longest path before, tail = after
    head, tail = heads_tails(4, [1, 3, 5, 2], [(0, 1, 2), (1, 3, 0), (0, 2, 0), (2, 3, 0)])
    assert head == [0, 3, 1, 6]
    assert tail == [7, 2, 2, 0]
    with pytest.raises(ValueError, match="cycle"):
        heads_tails(2, [1, 1], [(0, 1, 0), (1, 0, 0)])


def test_a_stop_at_the_gap_limit_is_not_called_proven() -> None:
    sp, part, stream, subs = _unit_instance(6, 6, 3, 1, 10)
    r = simulate(RunSpec.of(sp, part, stream, "csp"))
    pb = build_problem(sp, part, subs, r.costs.duration)
    loose = solve(pb, hints=[r.trace], time_limit=10, gap=0.5)  # csp is within 50% of the bound at once
    assert loose.makespan <= r.makespan + 1e-9 and loose.gap <= 0.5 + 1e-9
    assert loose.bound < loose.makespan and not loose.optimal  # CP-SAT says OPTIMAL here; it is not proven
    exact = solve(pb, hints=[r.trace], time_limit=10)
    assert exact.optimal and exact.makespan == pytest.approx(exact.bound, rel=1e-4)


def test_two_workers_prove_the_same_optimum() -> None:
    # the parallel portfolio (a lower-bound search and neighbourhood searches) is a valid configuration
    sp, part, stream, subs = _unit_instance(4, 4, 2, 3, 8)
    r = simulate(RunSpec.of(sp, part, stream, "csp-cp"))
    pb = build_problem(sp, part, subs, r.costs.duration)
    one, two = (solve(pb, hints=[r.trace], time_limit=10, workers=w) for w in (1, 2))
    assert one.optimal and two.optimal
    assert two.makespan == pytest.approx(one.makespan, rel=1e-4)
