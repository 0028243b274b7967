"""The lower bound max(per-stage work, causal critical path) and the tight bound, on hand-computed cases.

All cases use 2 stages with one block each and F = B = 1 per stage unless stated otherwise; the critical
paths below were traced by hand, task by task.
"""

from __future__ import annotations

import pytest

from naspipe.runspec.spec import RunSpec
from naspipe.sequences.sequence import ReplayStream
from naspipe.sim import CostModel, simulate
from naspipe.sim.bound import lower_bound
from naspipe.spaces.partition import partition
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import Block, Candidate, SearchSpace


def _space(*blocks: list[tuple[float, float]], fixed: tuple[int, ...] = ()) -> SearchSpace:
    return SearchSpace("b", tuple(
        Block(f"b{i}", tuple(Candidate(f"c{k}", fwd=f, bwd=b) for k, (f, b) in enumerate(c)), fixed=i in fixed)
        for i, c in enumerate(blocks)))


UNIT = _space([(1, 1), (1, 1)], [(1, 1), (1, 1)])
OVERTAKE = [(0, 0), (0, 1), (1, 1)]  # 1 shares stage 0's candidate with 0; 2 shares stage 1's with 1


def _bound(space, subnets, *, split=False, hop=0.0, shared="frozen"):
    part = partition(space, 2)
    costs = CostModel(space, part, subnets, split_backward=split)
    return lower_bound(space, part, subnets, costs.duration, split_backward=split, hop=hop,
                       shared=parse_shared(shared))


def test_critical_path_through_causal_edges() -> None:
    # 0: F 0-1, F 1-2, B 2-3, B 3-4;  1: F(1,0) waits B(0,0): 4-5, 5-6, 6-7, 7-8;
    # 2: F(2,0) 0-1, F(2,1) waits B(1,1) (ends 7): 7-8, B 8-9, B 9-10
    b = _bound(UNIT, OVERTAKE)
    assert b.stage_work == (6.0, 6.0)
    assert b.critical_path == 10.0
    assert b.lower_bound == 10.0


def test_critical_path_with_message_latency() -> None:
    # every inter-stage edge costs 0.5: subnet 1's chain ends at 10, subnet 2's F(2,1) starts 8.5, ends 12
    b = _bound(UNIT, OVERTAKE, hop=0.5)
    assert b.critical_path == 12.0 and b.stage_work == (6.0, 6.0)


def test_split_backward_waits_on_w() -> None:
    # B = W = 0.5: 0 ends W(0,0) at 3.5; F(1,0) 3.5-4.5 ... W(1,1) ends 6.5; F(2,1) 6.5-7.5, ... W(2,0) ends 9
    b = _bound(UNIT, OVERTAKE, split=True)
    assert b.critical_path == 9.0 and b.stage_work == (6.0, 6.0)


def test_no_conflicts_leaves_only_one_subnet_chain() -> None:
    subs = [(0, 0), (1, 1)]
    b = _bound(UNIT, subs)
    assert b.critical_path == 4.0 and b.lower_bound == 4.0
    # stage 1 cannot start before 1, then has 4 units of work, and after its last task (a backward) B(j,0)
    # still takes 1: 1 + 4 + 1 = 6, which CSP achieves
    assert b.tight_bound == 6.0
    r = simulate(RunSpec.of(UNIT, partition(UNIT, 2), ReplayStream(UNIT, subs), "csp"))
    assert r.makespan == 6.0


@pytest.mark.parametrize(("shared", "cp"), [("frozen", 4.0), ("serial", 12.0), ("delayed:1", 8.0),
                                            ("delayed:2", 4.0)])
def test_shared_layer_gate_edges(shared: str, cp: float) -> None:
    # stage 0 holds a fixed block only; subnets never share stage 1's candidate.
    # serial: each subnet waits for the previous one's write on stage 0, a chain of 3 x 4;
    # delayed:1: F(2,0) waits for B(0,0) (ends 4), so subnet 2 ends at 8; delayed:2: nothing waits.
    space = _space([(1, 1)], [(1, 1)] * 3, fixed=(0,))
    b = _bound(space, [(0, 0), (0, 1), (0, 2)], shared=shared)
    assert b.critical_path == cp


def test_tight_bound_adds_the_unavoidable_head_and_tail() -> None:
    # stage 1 does all the work (F = B = 1), stage 0 is cheap (0.1): stage 1 cannot start before 0.1
    # and after its last backward, B(j,0) still takes 0.1
    space = _space([(0.1, 0.1)] * 10, [(1, 1)] * 10)
    subs = [(j, j) for j in range(10)]
    b = _bound(space, subs)
    assert b.lower_bound == pytest.approx(20.0)
    assert b.tight_bound == pytest.approx(20.2)
    r = simulate(RunSpec.of(space, partition(space, 2), ReplayStream(space, subs), "csp"))
    assert r.makespan == pytest.approx(20.2)  # CSP meets the tight bound here


def test_tight_bound_is_never_above_a_real_makespan() -> None:
    """Regression: with stage 0 heavy and stage 1 light, stage 0 can be busy from 0 to the end.

    The tight bound once added the backward time of the stages *above* stage 0 as a tail (40.1 > 40.0).
    """
    space = _space([(1, 1)] * 8, [(0.1, 0.1)] * 8)
    subs = [(j % 8, j % 8) for j in range(20)]
    r = simulate(RunSpec.of(space, partition(space, 2), ReplayStream(space, subs), "csp", window=50))
    b = _bound(space, subs)
    assert r.makespan == pytest.approx(40.0)
    assert b.lower_bound == pytest.approx(40.0)
    assert b.tight_bound <= r.makespan + 1e-9


def test_bounds_match_the_literal_schedules() -> None:
    for split, policy, ms in ((False, "csp", 10.0), (True, "csp-bw", 9.0)):
        r = simulate(RunSpec.of(UNIT, partition(UNIT, 2), ReplayStream(UNIT, OVERTAKE), policy))
        assert r.makespan == ms
        assert _bound(UNIT, OVERTAKE, split=split).lower_bound == ms  # efficiency exactly 1


def test_empty_sequence_bound_is_zero() -> None:
    b = _bound(UNIT, [])
    assert b.lower_bound == 0 and b.tight_bound == 0 and b.stage_work == (0.0, 0.0)


def test_delayed_gate_waits_for_every_write_up_to_j_minus_d_minus_1() -> None:
    """One stage with a trained fixed block under delayed:1: F(j) needs every write i <= j - 2. Subnet 0
    has a long backward (100), 3 a long one too (50): F(3) must wait for B(0) (ends 101), although B(1)
    (which it also needs) ended at 2 and F(1), F(2) need nothing of 0 before. Critical path: F0 B0 (101),
    F3 (102), B3 (152); without the edge from B0 it would be F0 B0 F2 B2 (103)."""
    sp = _space([(0.0, 0.0)], [(1, 100), (1, 1), (1, 1), (1, 50)], fixed=(0,))
    part = partition(sp, 1)
    subs = [(0, 0), (0, 1), (0, 2), (0, 3)]
    costs = CostModel(sp, part, subs)
    b = lower_bound(sp, part, subs, costs.duration, shared=parse_shared("delayed:1"))
    assert b.critical_path == pytest.approx(152.0)
