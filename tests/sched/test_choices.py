"""Tests that pin the *choices* of the exact orders, not only their safety.

* brute-force oracles for the conflict-chain depths (``ConflictChains``) and the critical-path tails
  (``CriticalPaths``) on random sequences: longest paths recomputed from scratch over every pair of
  subnets that share a candidate;
* a trace property of ``csp-cp`` and the default ``csp-plan`` (tails scaled by the plan's factors): every
  task it started had the longest tail among the tasks ready on its stage at that moment (ties: a backward,
  then the oldest), ready-ness and tails recomputed from the trace and the space, independently of the scheduler;
* literal schedule tables for ``csp-chain``, ``csp-bw`` with several ``W`` pending at different chain
  depths, and ``csp-cp``, worked out by hand;
* scheduler-level tests of ``start``, the fence, BSP resume, the asynchronous warm-up boundary and the
  oldest-first order after a memory-gated forward.
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naspipe.runspec.spec import RunSpec
from naspipe.sched.chains import ConflictChains
from naspipe.sched.critical import CriticalPaths
from naspipe.sched.policies import (
    CriticalPathCSPScheduler,
    PolicyError,
    make_scheduler,
    plan_factor_unit,
    stage_specs,
)
from naspipe.sched.tasks import B, F, W
from naspipe.sequences.sequence import ReplayStream
from naspipe.sim import SimOptions, simulate
from naspipe.spaces.partition import Partition, partition
from naspipe.spaces.space import Block, Candidate, SearchSpace
from tests.sched.test_tables import table  # per stage, tasks as F0/B0/W0 in start order

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _space(*blocks: list[tuple[float, float]], fixed: tuple[int, ...] = ()) -> SearchSpace:
    return SearchSpace("choices", tuple(
        Block(f"b{i}", tuple(Candidate(f"c{k}", fwd=f, bwd=b) for k, (f, b) in enumerate(cands)), fixed=i in fixed)
        for i, cands in enumerate(blocks)))


def run(space: SearchSpace, subnets, policy: str, stages: int = 2, **kw):
    return simulate(RunSpec.of(space, partition(space, stages), ReplayStream(space, subnets), policy), SimOptions(**kw))


@st.composite
def instances(draw):
    """A random space (1-4 stages of 1-3 blocks, K 1-3, small integer costs, maybe a fixed block), its
    partition and a random sequence of 1-12 subnets."""
    stages = draw(st.integers(1, 4))
    per = [draw(st.integers(1, 3)) for _ in range(stages)]
    cost = st.tuples(st.integers(1, 4), st.integers(1, 6))
    blocks = []
    fixed = set()
    for s in range(stages):
        for i in range(per[s]):
            if i == 0 and s == 0 and draw(st.booleans()):
                fixed.add(len(blocks))
                blocks.append([draw(cost)])
            else:
                blocks.append(draw(st.lists(cost, min_size=1, max_size=3)))
    space = _space(*blocks, fixed=tuple(fixed))
    bounds, at = [], 0
    for n in per:
        bounds.append((at, at + n))
        at += n
    part = Partition(tuple(bounds))
    n = draw(st.integers(1, 12))
    subnets = [tuple(draw(st.integers(0, b.k - 1)) for b in space.blocks) for _ in range(n)]
    return space, part, subnets


def _shares(space, part, subnets, i: int, k: int, t: int) -> bool:
    return any(subnets[i][b] == subnets[k][b] for b in part.blocks(t) if not space.blocks[b].fixed)


# ---- oracles -------------------------------------------------------------------------------------------
@SETTINGS
@given(inst=instances(), weights=st.lists(st.integers(1, 9), min_size=4, max_size=4))
def test_conflict_chain_depths_match_a_brute_force_oracle(inst, weights) -> None:
    space, part, subnets = inst
    P = part.stages
    chains = ConflictChains(space, [[b for b in part.blocks(t) if not space.blocks[b].fixed] for t in range(P)],
                            [float(w) for w in weights[:P]])
    for k, sub in enumerate(subnets):
        chains.admit(k, sub)

    @functools.cache
    def depth(j: int) -> float:  # the longest chain of links over every later subnet sharing a candidate
        return max((weights[t] + depth(k) for k in range(j + 1, len(subnets)) for t in range(P)
                    if _shares(space, part, subnets, j, k, t)), default=0.0)

    assert {j: chains.depth[j] for j in range(len(subnets))} == {j: depth(j) for j in range(len(subnets))}


@SETTINGS
@given(inst=instances())
def test_critical_path_tails_match_a_brute_force_longest_path(inst) -> None:
    space, part, subnets = inst
    P = part.stages
    paths = CriticalPaths(space, [list(part.blocks(t)) for t in range(P)])
    for k, sub in enumerate(subnets):
        paths.admit(k, sub)
    assert {j: [paths.forward(j, s) for s in range(P)] + [paths.backward(j, s) for s in range(P)]
            for j in range(len(subnets))} == tails(space, part, subnets)


def tails(space, part, subnets) -> dict[int, list[float]]:
    """Longest path from each task's start to the end of the DAG of F/B tasks with the space's costs: data
    edges plus B(i,t) -> F(k,t) for every later k sharing one of i's candidates on t. Per subnet:
    [F tails by stage] + [B tails by stage]."""
    P, n = part.stages, len(subnets)

    def dur(kind: str, j: int, t: int) -> float:
        return sum(getattr(space.candidate(b, subnets[j][b]), "fwd" if kind == "F" else "bwd")
                   for b in part.blocks(t))

    @functools.cache
    def tail(kind: str, j: int, t: int) -> float:
        nxt = []
        if kind == "F":
            nxt.append(tail("F", j, t + 1) if t + 1 < P else tail("B", j, P - 1))
        else:
            if t > 0:
                nxt.append(tail("B", j, t - 1))
            nxt += [tail("F", k, t) for k in range(j + 1, n) if _shares(space, part, subnets, j, k, t)]
        return dur(kind, j, t) + max(nxt, default=0.0)

    return {j: [tail("F", j, s) for s in range(P)] + [tail("B", j, s) for s in range(P)] for j in range(n)}


# ---- the default order's choices, recomputed from its trace -----------------------------------------------
@SETTINGS
@given(inst=instances(), seed=st.integers(0, 3), plan=st.sampled_from([0, 0, 1, 7, 1234]),
       eps=st.sampled_from([0.2, 0.5]))
def test_csp_cp_always_starts_a_ready_task_with_the_longest_tail(inst, seed, plan, eps) -> None:
    """At every start on a stage, no task of the same kind that was ready there strictly earlier had a
    longer tail (or an equal one and was older), and a forward was chosen over a ready backward only with
    a tail more than ``OVERTAKE`` longer, a backward over a ready forward only without. Ready: data
    predecessor done, the write of every earlier subnet sharing a candidate on the stage done, not started
    yet. Tails: the brute-force oracle over the whole (short) sequence, which the scheduler's 16-subnet
    horizon covers. ``csp-plan`` (the default) with plan ``p``: the same, each tail scaled by its task's
    factor ``1 + eps * u(p, stage, kind, j)`` (``plan_factor_unit``); plan 0 runs csp-cp."""
    space, part, subnets = inst
    policy = "csp-cp" if plan == 0 else f"csp-plan:plan={plan},eps={eps}"
    r = simulate(RunSpec.of(space, part, ReplayStream(space, subnets), policy, seed=seed), SimOptions(jitter=0.3))
    P, n = part.stages, len(subnets)
    ev = {(e.kind, e.subnet, e.stage): e for e in r.trace.compute_events()}
    tl = {j: [x * (1.0 + (eps * plan_factor_unit(plan, i % P, "F" if i < P else "B", j) if plan else 0.0))
              for i, x in enumerate(row)] for j, row in tails(space, part, subnets).items()}

    def ready_at(kind: str, j: int, s: int) -> float:
        if kind == "F":
            t = ev["F", j, s - 1].end if s > 0 else 0.0
            earlier = [ev["B", i, s].end for i in range(j) if _shares(space, part, subnets, i, j, s)]
            return max([t, *earlier])
        return ev["F", j, s].end if s == P - 1 else ev["B", j, s + 1].end

    m = 1.0 + CriticalPathCSPScheduler.OVERTAKE
    for (kind, j, s), e in ev.items():
        mine = tl[j][s if kind == "F" else P + s]
        for k2 in ("F", "B"):
            for i in range(n):
                other = ev[k2, i, s]
                if not (other.start > e.start and ready_at(k2, i, s) < e.start - 1e-9):
                    continue
                theirs = tl[i][s if k2 == "F" else P + s]
                what = f"{kind}({j},{s}) at {e.start} chosen over ready {k2}({i},{s})"
                if k2 == kind:  # the longest tail of its kind, the oldest among equals
                    assert (theirs, -i) <= (mine, -j), what
                elif kind == "F":  # a forward overtakes a ready backward only with a clearly longer tail
                    assert mine > m * theirs, what
                else:  # a backward: no ready forward had a clearly longer tail
                    assert theirs <= m * mine, what


# ---- literal tables -------------------------------------------------------------------------------------
def test_csp_chain_runs_the_free_forward_that_heads_a_chain_first() -> None:
    """2 stages, F = B = 1; stage 0 has K = 4, stage 1 K = 3. Subnets (stage 0, stage 1): 0 (0,0), 1 (1,1),
    2 (2,2), 3 (3,2), 4 (3,0). Links (weight 2(P - t): 4 on stage 0, 2 on stage 1): 2 -> 3 on stage 1,
    3 -> 4 on stage 0, 0 -> 4 on stage 1; depths 2: 6, 3: 4, 0: 2, 1: 0, 4: 0. Stage 0 at t=0: F0..F3 free
    (F4 waits for 3), priority 3 + depth: F2 (9), F3 (7), F0 (5), F1 (3), where csp runs F0, F1, F2, F3.
    At t=3 F0 ends as the gradient of 2 arrives; the stage decides first (event order), so F1 runs before
    B2. csp-chain finishes at 12, csp at 14."""
    sp = _space([(1, 1)] * 4, [(1, 1)] * 3)
    subs = [(0, 0), (1, 1), (2, 2), (3, 2), (3, 0)]
    csp, chain = run(sp, subs, "csp"), run(sp, subs, "csp-chain")
    assert table(csp)[0][:4] == ["F0", "F1", "F2", "F3"]
    assert table(chain) == [
        ["F2", "F3", "F0", "F1", "B2", "B3", "F4", "B0", "B1", "B4"],
        ["F2", "B2", "F3", "B3", "F0", "B0", "F1", "B1", "F4", "B4"],
    ]
    assert (chain.makespan, csp.makespan) == (12, 14)


W_SPACE = _space([(1, 1), (1, 1), (1, 1)])  # one stage, K = 3, F = 1, B = W = 0.5


def test_csp_bw_orders_w_by_chain_depth_and_a_full_queue_by_age() -> None:
    """Subnets 0 (c0), 1 (c1), 2 (c2), 3 (c2): 3 waits for W2; the link 2 -> 3 weighs 2 (P - 0) + 1 = 3.
    Forward priority 2P - 1 - s + depth: F2 4, F0 1, F1 1. F2 first, B2 (last stage: loss done), then W2
    (depth 3 > best forward 1) before F0. After B0, W0 (depth 0) does not beat F1 (1); after B1 two W are
    pending, max_pending_w = 2 P = 2: the oldest, W0, runs. Then F3 (free since W2), B3, and W1, W3."""
    r = simulate(RunSpec.of(W_SPACE, partition(W_SPACE, 1), ReplayStream(W_SPACE, [(0,), (1,), (2,), (2,)]), "csp-bw"))
    assert table(r) == [["F2", "B2", "W2", "F0", "B0", "F1", "B1", "W0", "F3", "B3", "W1", "W3"]]
    assert r.makespan == 8  # one stage: no idle time


def test_csp_bw_with_room_for_w_runs_forwards_first_and_ws_at_equal_depth_oldest_first() -> None:
    """As above with max_pending_w = 9: after B1 the pending W0, W1 (depth 0) lose to F3 (1); after B3
    three W are pending at depth 0 and run oldest first."""
    r = simulate(RunSpec.of(W_SPACE, partition(W_SPACE, 1), ReplayStream(W_SPACE, [(0,), (1,), (2,), (2,)]),
                            "csp-bw"), SimOptions(policy_options={"max_pending_w": 9}))
    assert table(r) == [["F2", "B2", "W2", "F0", "B0", "F1", "B1", "F3", "B3", "W0", "W1", "W3"]]


def test_csp_cp_runs_a_just_freed_forward_before_backwards_nobody_waits_for() -> None:
    """The issue's failure mode. 2 stages, F = 1, B = 2; subnets 0, 1, 4 share every candidate (a chain
    0 -> 1 -> 4), 2 and 3 share nothing. Tails (F + X; X(4) = 4, X(1) = 4 + 2 + 4 = 10, X(0) = 16, X(2) =
    X(3) = 4): stage 1 at t=5 runs F3 (tail 1 + 4 = 5) before the ready B2 (4); at t=8 F1 (1 + 10) before
    B3 (4), and B1 (10: it frees F4) before B3; stage 0 at t=13 runs F4 (just freed by B1, 2 + 4) before
    B3 (2). csp and csp-chain run every ready backward first and finish at 21; csp-cp at 19."""
    sp = _space([(1, 2)] * 3, [(1, 2)] * 3)
    subs = [(0, 0), (0, 0), (2, 2), (1, 1), (0, 0)]
    cp, csp, chain = run(sp, subs, "csp-cp"), run(sp, subs, "csp"), run(sp, subs, "csp-chain")
    assert table(cp) == [
        ["F0", "F2", "F3", "B0", "F1", "B2", "B1", "F4", "B3", "B4"],
        ["F0", "B0", "F2", "F3", "B2", "F1", "B1", "B3", "F4", "B4"],
    ]
    assert table(csp) == table(chain) == [
        ["F0", "F2", "F3", "B0", "F1", "B2", "B3", "B1", "F4", "B4"],
        ["F0", "B0", "F2", "B2", "F3", "B3", "F1", "B1", "F4", "B4"],
    ]
    assert (cp.makespan, csp.makespan, chain.makespan) == (19, 21, 21)


def test_csp_cp_forward_overtakes_only_with_a_clearly_longer_tail() -> None:
    """One stage, so B(j) is ready right after F(j). Subnet 1's forward heads f + b = 1 + 20 = 21. Against
    B0 with tail 20 (F0 first: tails tie at 21, the older wins), 21 is within OVERTAKE (5%): B0 runs first.
    Against B0 with tail 10 (F0 first with tail 12 + 10) it is not: F1 overtakes, and then the backwards go
    by tail, B1 (20) before the older B0 (10)."""
    close = _space([(1, 20), (1, 20)])
    far = _space([(12, 10), (1, 20)])
    subs = [(0,), (1,)]
    assert table(simulate(RunSpec.of(close, partition(close, 1), ReplayStream(close, subs), "csp-cp"))) == [
        ["F0", "B0", "F1", "B1"]]
    assert table(simulate(RunSpec.of(far, partition(far, 1), ReplayStream(far, subs), "csp-cp"))) == [
        ["F0", "F1", "B1", "B0"]]


# ---- scheduler-level tests --------------------------------------------------------------------------------
ONE = _space([(1, 1)], [(1, 1)])  # K = 1: every subnet conflicts with every earlier one
UNIT = _space([(1, 1)] * 3, [(1, 1)] * 3)


def _sched(policy: str, subnets, stage: int = 0, stages: int = 2, space=UNIT, **kw):
    part = partition(space, stages)
    return make_scheduler(policy, stage_specs(space, part)[stage], ReplayStream(space, subnets), **kw)


def test_start_skips_the_subnets_already_done() -> None:
    s = _sched("csp", [(0, 0)] * 4, start=2, space=ONE)
    assert s.lo == 2 and s.next_task() == F(2, 0)
    s.on_finish(F(2, 0))
    s.on_gradient(2)
    assert s.next_task() == B(2, 0)
    s.on_finish(B(2, 0))
    assert s.next_task() == F(3, 0)
    with pytest.raises(PolicyError):
        _sched("csp", [(0, 0)] * 4, start=5, space=ONE)
    assert _sched("csp", [(0, 0)] * 4, start=4, space=ONE).finished


def test_the_fence_admits_nothing_at_or_after_it_until_it_moves() -> None:
    s = _sched("csp", [(0, 0), (1, 1), (2, 2)], fence=1)
    assert s.next_task() == F(0, 0)
    s.on_finish(F(0, 0))
    assert s.next_task() is None  # 1 is behind the fence although free
    assert not s.at_fence
    s.on_gradient(0)
    assert s.next_task() == B(0, 0)
    s.on_finish(B(0, 0))
    assert s.at_fence  # everything before the fence is done, nothing after it admitted
    with pytest.raises(PolicyError):
        s.set_fence(0)
    s.set_fence(2)
    assert not s.at_fence and s.next_task() == F(1, 0)
    s.on_finish(F(1, 0))
    assert s.next_task() is None  # 2 is behind the new fence
    s.set_fence(None)
    assert s.next_task() == F(2, 0)


def test_bsp_resumes_only_at_a_group_boundary() -> None:
    subs = [(0, 0)] * 6
    with pytest.raises(PolicyError, match="group boundary"):
        _sched("bsp", subs, space=ONE, start=1, micro_batches=2)
    s = _sched("bsp", subs, space=ONE, start=2, micro_batches=2)
    assert s.next_task() == F(2, 0)
    s.on_finish(F(2, 0))
    assert s.next_task() == F(3, 0)  # the group of 2 and 3 runs its forwards together


def test_the_warm_up_runs_subnets_below_it_one_at_a_time() -> None:
    """pipedream:warmup=2 on stage 0 of 2: F0, then nothing until B0 (0 is in flight, 1 < 2 waits);
    then F1, and F2 (2 is not below the warm-up) runs while 1 is in flight."""
    s = _sched("pipedream:warmup=2", [(0, 0)] * 4, space=ONE)
    assert s.next_task() == F(0, 0)
    s.on_finish(F(0, 0))
    assert s.next_task() is None
    s.on_gradient(0)
    assert s.next_task() == B(0, 0)
    s.on_finish(B(0, 0))
    assert s.next_task() == F(1, 0)
    s.on_finish(F(1, 0))
    assert s.next_task() == F(2, 0)


def test_oldest_forward_order_survives_a_memory_gated_forward() -> None:
    """A driver that refuses csp's choice asks next_task_forwarding(j); the ready heap must still hand
    out the others oldest first afterwards."""
    s = _sched("csp", [(0, 0), (1, 1), (2, 2), (0, 0)], stages=2)
    t = s.next_task_forwarding(2)
    assert t == F(2, 0)
    s.on_finish(t)
    assert s.next_task() == F(0, 0)
    s.on_finish(F(0, 0))
    assert s.next_task() == F(1, 0)
    s.on_finish(F(1, 0))
    assert s.next_task() is None  # 3 waits for B0
    assert s.next_task_forwarding(3) is None


def test_csp_bw_next_weight_task_is_the_oldest() -> None:
    """Stage 0 of 2; subnet 2 shares 1's candidates, so W1 heads a chain and W0 nothing. With W0 and W1
    pending and F2 blocked, the policy's own choice is W1; a driver that refused a forward for memory asks
    next_weight_task, which must free the oldest W's memory: W0."""
    s = _sched("csp-bw", [(0, 0), (1, 1), (1, 1)], max_pending_w=5)
    for task in (F(1, 0), F(0, 0)):  # F1 first: it heads the chain
        assert s.next_task() == task
        s.on_finish(task)
    s.on_gradient(1)
    s.on_gradient(0)
    for task in (B(0, 0), B(1, 0)):  # ready backwards oldest first
        assert s.next_task() == task
        s.on_finish(task)
    assert s.pending_w == 2
    assert s.clone().next_task() == W(1, 0)
    assert s.next_weight_task() == W(0, 0)
    assert s.max_pending_w == 5  # restored


def test_csp_bw_w_beats_a_forward_only_with_a_deeper_chain() -> None:
    """Stage 0 of 2: a forward's priority is 2P - 1 - s + depth = 3 + depth, a W's its depth; links weigh
    2(P - t) + 1: 5 on stage 0, 3 on stage 1. Subnet 2 shares stage 1's candidate with 0, so W0 heads
    depth 3, and F2 (depth 0) has priority 3: a tie, which the forward keeps (W must be strictly deeper)."""
    s = _sched("csp-bw", [(0, 0), (1, 1), (2, 0)])
    for task in (F(0, 0), F(1, 0)):  # F0 first (3 + 3), then F1 and F2 tie at 3: the older
        assert s.next_task() == task
        s.on_finish(task)
    s.on_gradient(0)
    assert s.next_task() == B(0, 0)
    s.on_finish(B(0, 0))
    assert s.pending_w == 1
    assert s.next_task() == F(2, 0)


def test_sequential_admits_one_subnet_at_a_time() -> None:
    s = _sched("sequential", [(0, 0), (1, 1), (2, 2)])  # no conflicts: only the window of one holds 1 back
    assert s.decisions == 0
    assert s.next_task() == F(0, 0)
    s.on_finish(F(0, 0))
    assert s.next_task() is None  # csp would run F(1) now
    s.on_gradient(0)
    assert s.next_task() == B(0, 0)
    s.on_finish(B(0, 0))
    assert s.next_task() == F(1, 0)
    assert s.decisions == 4  # every call decides, also the one that started nothing


def test_a_policy_string_sets_its_options() -> None:
    assert _sched("bsp:3", [(0, 0)] * 6, space=ONE).m == 3
    assert _sched("bsp", [(0, 0)] * 6, space=ONE, micro_batches=2).m == 2


def test_next_weight_task_starts_the_only_pending_w_before_a_ready_forward() -> None:
    s = _sched("csp-bw", [(0, 0), (1, 1), (2, 2)], max_pending_w=5)
    for task in (F(0, 0), F(1, 0)):
        assert s.next_task() == task
        s.on_finish(task)
    s.on_gradient(0)
    assert s.next_task() == B(0, 0)
    s.on_finish(B(0, 0))
    assert s.pending_w == 1 and s.clone().next_task() == F(2, 0)  # the policy itself would run F2 first
    assert s.next_weight_task() == W(0, 0)


def test_a_follower_starts_only_the_announced_write_and_that_one_before_forwards() -> None:
    s = _sched("csp-cp", [(0, 0), (1, 1)], space=_space([(1, 1), (1, 1)], [(1, 1), (1, 1)]))
    assert s.next_task_writing(None) == F(0, 0)  # forwards stay free
    s.on_finish(F(0, 0))
    s.on_gradient(0)
    assert s.clone().next_task() == F(1, 0)  # csp-cp on its own runs the forward first...
    assert s.next_task_writing(0) == B(0, 0)  # ...a follower runs the write its leader waits for
    s.on_finish(B(0, 0))
    s = _sched("csp", [(0, 0), (1, 1)], space=_space([(1, 1), (1, 1)], [(1, 1), (1, 1)]))
    for j in (0, 1):
        assert s.next_task_writing(None) == F(j, 0)
        s.on_finish(F(j, 0))
    s.on_gradient(1)
    s.on_gradient(0)
    assert s.next_task_writing(None) is None  # nothing announced: no write starts
    assert s.next_task_writing(2) is None  # announced but not ready here: B0 and B1 wait
    assert s.next_task_writing(1) == B(1, 0)  # the leader wrote 1 first
    s.on_finish(B(1, 0))
    assert s.next_task_writing(0) == B(0, 0)
    s.on_finish(B(0, 0))
    assert s.finished


def test_copy_on_write_queues_leave_the_base_alone() -> None:
    from collections import deque

    from naspipe.sched.causal import CopyOnWriteQueues

    base = {(0, 1): deque([3, 4]), (1, 0): deque([5])}
    view = CopyOnWriteQueues(base)
    view[(0, 1)].popleft()
    del view[(1, 0)]
    with pytest.raises(KeyError):
        del view[(1, 0)]
    with pytest.raises(KeyError):
        del view[(9, 9)]
    view[(2, 2)] = deque([7])
    assert base == {(0, 1): deque([3, 4]), (1, 0): deque([5])}
    assert list(view[(0, 1)]) == [4] and (1, 0) not in view and (2, 2) in view
    assert sorted(view.keys()) == [(0, 1), (2, 2)]
