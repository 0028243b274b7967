"""Literal schedule tables for tiny hand-made cases, one row per stage, read left to right in time.

Each table was worked out by hand from the policy's rules before it was compared with the simulator.
Space ``UNIT``: 2 stages, one choice block per stage, K = 2, every F and B costs 1 (so a stage's
forward or backward takes 1 time unit). A subnet is written ``(choice on stage 0, choice on stage 1)``.
"""

from __future__ import annotations

import pytest

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import CSPScheduler, StageSpec
from naspipe.sched.tasks import B, F
from naspipe.sched.trace import check_causal
from naspipe.sequences.sequence import ReplayStream
from naspipe.sim import SimOptions, simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import Block, Candidate, SearchSpace


def _space(*blocks: list[tuple[float, float]]) -> SearchSpace:
    """One choice block per argument, a list of (fwd, bwd) per candidate."""
    return SearchSpace("tiny", tuple(
        Block(f"b{i}", tuple(Candidate(f"c{k}", fwd=f, bwd=b) for k, (f, b) in enumerate(cands)))
        for i, cands in enumerate(blocks)))


UNIT = _space([(1, 1), (1, 1)], [(1, 1), (1, 1)])
ONE = _space([(1, 1)], [(1, 1)])  # K = 1: every subnet conflicts with every earlier one on both stages

# subnet 1 shares stage 0's candidate with subnet 0; subnet 2 shares stage 1's candidate with subnet 1
OVERTAKE = [(0, 0), (0, 1), (1, 1)]


def run(space: SearchSpace, subnets, policy: str, **kw):
    stream = ReplayStream(space, subnets)
    return simulate(RunSpec.of(space, partition(space, 2), stream, policy), SimOptions(**kw))


def table(result) -> list[list[str]]:
    """Per stage, tasks as ``F0``/``B0``/``W0`` strings in start order."""
    rows = []
    for s in range(result.trace.stages):
        evs = sorted((e for e in result.trace.compute_events() if e.stage == s), key=lambda e: (e.start, e.end))
        rows.append([f"{e.kind}{e.subnet}" for e in evs])
    return rows


def times(result, kind: str, j: int, s: int) -> tuple[float, float]:
    (e,) = [e for e in result.trace.events if (e.kind, e.subnet, e.stage) == (kind, j, s)]
    return e.start, e.end


def test_sequential_runs_one_subnet_at_a_time() -> None:
    r = run(UNIT, OVERTAKE, "sequential")
    assert table(r) == [
        ["F0", "B0", "F1", "B1", "F2", "B2"],
        ["F0", "B0", "F1", "B1", "F2", "B2"],
    ]
    assert r.makespan == 12  # 3 subnets x (2 forwards + 2 backwards)


def test_csp_conflicting_subnet_waits_and_non_conflicting_one_overtakes() -> None:
    r = run(UNIT, OVERTAKE, "csp")
    assert table(r) == [
        # F1 must wait for B0 on stage 0 (same candidate); F2 overtakes it there
        ["F0", "F2", "B0", "F1", "B1", "B2"],
        # on stage 1, F2 waits for B1 (same candidate) although 2 arrived long before 1
        ["F0", "B0", "F1", "B1", "F2", "B2"],
    ]
    assert times(r, "F", 2, 0) == (1, 2)  # overtakes: starts before F(1,0)
    assert times(r, "B", 0, 0) == (3, 4) and times(r, "F", 1, 0) == (4, 5)  # waits for the write
    assert times(r, "B", 1, 1) == (6, 7) and times(r, "F", 2, 1) == (7, 8)
    assert r.makespan == 10  # beats sequential (12)
    assert check_causal(r.trace, OVERTAKE, [[0], [1]]) == []


def test_csp_bw_splits_the_backward_and_waits_on_w() -> None:
    # B = W = 0.5 (bwd_input_share 0.5); a W is run early when a waiting forward needs it
    r = run(UNIT, OVERTAKE, "csp-bw")
    assert table(r) == [
        ["F0", "F2", "B0", "W0", "F1", "B1", "W1", "B2", "W2"],
        ["F0", "B0", "W0", "F1", "B1", "W1", "F2", "B2", "W2"],
    ]
    assert times(r, "W", 0, 0) == (3, 3.5) and times(r, "F", 1, 0) == (3.5, 4.5)
    assert times(r, "W", 1, 1) == (6, 6.5) and times(r, "F", 2, 1) == (6.5, 7.5)
    assert r.makespan == 9
    assert check_causal(r.trace, OVERTAKE, [[0], [1]], write_kind="W") == []


def test_causal_rule_holds_before_the_earlier_subnet_arrives() -> None:
    """Subnet 2 reaches stage 1 at t=1.5, subnet 1 only at t=7; stage 1 still waits for B(1,1).

    Stage 0: candidate 1 is cheap (F = B = 0.5). Stage 1: candidate 0 has a slow backward (B = 3), which
    keeps subnet 1 upstream (it waits for B(0,0)) while subnet 2 overtakes it on stage 0.
    """
    space = _space([(1, 1), (0.5, 0.5)], [(1, 3), (1, 1)])
    r = run(space, OVERTAKE, "csp")
    assert table(r) == [
        ["F0", "F2", "B0", "F1", "B1", "B2"],
        ["F0", "B0", "F1", "B1", "F2", "B2"],
    ]
    arrive_2, arrive_1 = times(r, "F", 2, 0)[1], times(r, "F", 1, 0)[1]
    assert arrive_2 == 1.5 and arrive_1 == 7  # the later subnet arrives first...
    assert times(r, "B", 0, 1) == (2, 5)
    # ...and stage 1 stays idle from 5 to 7 rather than run F(2,1) before subnet 1 wrote candidate 1
    assert times(r, "F", 1, 1) == (7, 8)
    assert times(r, "F", 2, 1)[0] == times(r, "B", 1, 1)[1] == 9
    assert r.makespan == 11.5


def test_stage_scheduler_holds_an_early_arrival_for_an_earlier_conflicting_subnet() -> None:
    """The same rule, on one scheduler driven by hand: stage 1 of 2 sees 2's activation before 1's."""
    stream = ReplayStream(UNIT, OVERTAKE)
    sched = CSPScheduler(StageSpec(stage=1, stages=2, choice_blocks=(1,)), stream, window=10)
    sched.on_activation(2)
    assert sched.next_task() is None  # 1 (not arrived yet) writes the candidate 2 reads
    sched.on_activation(0)
    assert sched.next_task() == F(0, 1)
    sched.on_finish(F(0, 1))
    assert sched.next_task() == B(0, 1)  # last stage: the loss is computed, backward first
    sched.on_finish(B(0, 1))
    assert sched.next_task() is None  # still nothing: 2 waits for 1
    sched.on_activation(1)
    assert sched.next_task() == F(1, 1)
    sched.on_finish(F(1, 1))
    assert sched.next_task() == B(1, 1)
    sched.on_finish(B(1, 1))
    assert sched.next_task() == F(2, 1)  # now free
    sched.on_finish(F(2, 1))
    assert sched.next_task() == B(2, 1)
    sched.on_finish(B(2, 1))
    assert sched.finished


def test_csp_serialises_fully_conflicting_subnets() -> None:
    r = run(ONE, [(0, 0)] * 4, "csp")
    assert table(r) == [
        ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"],
        ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"],
    ]
    assert r.makespan == 16


def test_asp_is_1f1b_and_ignores_conflicts() -> None:
    # stage 0 keeps at most 2 subnets in flight, stage 1 at most 1
    r = run(ONE, [(0, 0)] * 4, "asp")
    assert table(r) == [
        ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"],
        ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"],
    ]
    assert r.makespan == 10
    # F(1,0) reads the candidate before B(0,0) updated it: exactly what CSP forbids
    assert times(r, "F", 1, 0)[0] == 1 < times(r, "B", 0, 0)[1] == 4
    assert check_causal(r.trace, [(0, 0)] * 4, [[0], [1]])


def test_bsp_groups_forwards_then_backwards_then_flushes() -> None:
    r = run(ONE, [(0, 0)] * 4, "bsp", policy_options={"micro_batches": 2})
    assert table(r) == [
        ["F0", "F1", "B0", "B1", "F2", "F3", "B2", "B3"],
        ["F0", "F1", "B0", "B1", "F2", "F3", "B2", "B3"],
    ]
    # the second group starts on stage 0 only after the first group's last backward there (the flush)
    assert times(r, "B", 1, 0)[1] == times(r, "F", 2, 0)[0] == 6
    # on the last stage, backwards of a group start only when all its forwards are done
    assert times(r, "F", 1, 1)[1] == times(r, "B", 0, 1)[0] == 3
    assert r.makespan == 12


@pytest.mark.parametrize("policy", ["csp", "sequential", "csp-bw", "asp", "bsp"])
def test_single_stage_runs_in_sequence_order(policy: str) -> None:
    space = _space([(1, 1), (2, 2)])
    subs = [(0,), (1,), (0,)]
    r = simulate(RunSpec.of(space, partition(space, 1), ReplayStream(space, subs), policy),
                 SimOptions(policy_options={"micro_batches": 1} if policy == "bsp" else None))
    rows = table(r)
    if policy == "csp-bw":
        # W0 first: the waiting F2 needs it; W1 is no one's blocker, so it fills the tail
        assert rows == [["F0", "B0", "W0", "F1", "B1", "F2", "B2", "W1", "W2"]]
    else:
        assert rows == [["F0", "B0", "F1", "B1", "F2", "B2"]]
    assert r.makespan == 2 + 4 + 2


def test_the_causal_family_is_read_from_the_scheduler_classes():
    from naspipe.sched.policies import PolicyError, follows_causal_rule

    exact = ("sequential", "csp", "csp-chain", "csp-cp", "csp-plan", "csp-bw")
    assert [follows_causal_rule(p) for p in exact] == [True] * 6
    assert not any(follows_causal_rule(p) for p in ("bsp:8", "asp", "pipedream", "2bw", "pipemare:t1=4", "pipeoptim"))
    with pytest.raises(PolicyError, match="unknown policy"):
        follows_causal_rule("gpipe")
