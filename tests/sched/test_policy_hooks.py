"""The public hooks of a user policy: ``CSPScheduler.choose_forward`` and ``choose_backward``.

A hook picks among the tasks the scheduler offers; the scheduler decides what is offered (the causal rule, the
shared-layer gate, arrival) and refuses any other answer, so no hook can break causality. Hypothesis draws
spaces, sequences (biased to conflicts), windows, stage counts and shared-layer policies, and a hook that picks
arbitrarily (a hash of the ready set and a drawn salt) and sometimes declines the backward: every schedule must
complete, keep data order and the causal rule (checked by brute force from the trace and by ``check_causal``)
and the gate. Hooks that answer outside the ready set fail with one ``PolicyError`` line.
"""

from __future__ import annotations

import hashlib
import itertools
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import naspipe
from naspipe.runspec.spec import RunSpec
from naspipe.sched import make_scheduler, parse_shared, stage_specs
from naspipe.sched.policies import ChainCSPScheduler, PolicyError
from naspipe.sched.registry import Policy, register_policy, unregister_policy
from naspipe.sched.tasks import BACKWARD, FORWARD, Task
from naspipe.sched.trace import check_causal
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.sim.memory import MemoryConfig
from naspipe.spaces.partition import partition
from naspipe.spaces.space import Block, Candidate, SearchSpace, preset

EPS = 1e-9


def _pick(salt: int, stage: int, what: str, ready: tuple[int, ...]) -> int:
    h = hashlib.sha256(repr((salt, stage, what, ready)).encode()).digest()
    return h[0]


class ArbitraryHooks(naspipe.CSPScheduler):
    """Picks any offered forward and backward, and declines the backward for about a third of the answers."""

    name = "test-arbitrary"
    salt = 0

    def choose_backward(self, ready: tuple[int, ...]) -> int | None:
        u = _pick(self.salt, self.spec.stage, "B", ready)
        return None if u % 3 == 0 else ready[u % len(ready)]

    def choose_forward(self, ready: tuple[int, ...]) -> int:
        return ready[_pick(self.salt, self.spec.stage, "F", ready) % len(ready)]


@pytest.fixture(scope="module", autouse=True)
def _registered():
    register_policy(Policy("test-arbitrary", ArbitraryHooks, causal=True), replace=True)
    yield
    unregister_policy("test-arbitrary")


@st.composite
def scenarios(draw):
    cost = st.sampled_from([0.25, 0.5, 1.0, 3.0])
    blocks = [Block(f"c{i}", tuple(Candidate(f"k{k}", fwd=draw(cost), bwd=draw(cost))
                                   for k in range(draw(st.integers(1, 3)))))
              for i in range(draw(st.integers(1, 8)))]
    if draw(st.booleans()):
        blocks.insert(len(blocks) // 2, Block("fixed", (Candidate("only", fwd=0.5, bwd=0.5),), fixed=True))
    space = SearchSpace("random", tuple(blocks))
    n = draw(st.integers(1, 20))
    subnets = [tuple(draw(st.integers(0, b.k - 1)) for b in space.blocks) for _ in range(n)]
    return dict(space=space, stages=draw(st.integers(1, min(space.num_blocks, 4))), subnets=subnets,
                window=draw(st.integers(1, 12)), salt=draw(st.integers(0, 10**6)),
                shared=draw(st.sampled_from(["frozen", "serial", "delayed:0", "delayed:2"])),
                jitter=draw(st.sampled_from([0.0, 0.5])), seed=draw(st.integers(0, 100)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=scenarios())
def test_arbitrary_hook_choices_complete_and_never_break_the_causal_rule(sc) -> None:
    space, subnets, P = sc["space"], sc["subnets"], sc["stages"]
    part = partition(space, P)
    with mock.patch.object(ArbitraryHooks, "salt", sc["salt"]):
        r = simulate(RunSpec.of(space, part, ReplayStream(space, subnets), "test-arbitrary", window=sc["window"],
                                shared=parse_shared(sc["shared"]), seed=sc["seed"]), SimOptions(jitter=sc["jitter"]))
    evs = r.trace.compute_events()
    ev = {(e.kind, e.subnet, e.stage): e for e in evs}
    assert len(ev) == len(evs) == 2 * len(subnets) * P  # every F and B once
    hop = r.costs.transfer()
    for j in range(len(subnets)):  # data order
        for s in range(1, P):
            assert ev["F", j, s - 1].end + hop <= ev["F", j, s].start + EPS
            assert ev["B", j, s].end + hop <= ev["B", j, s - 1].start + EPS
        assert ev["F", j, P - 1].end <= ev["B", j, P - 1].start + EPS
    choice = [[b for b in part.blocks(s) if not space.blocks[b].fixed] for s in range(P)]
    for s in range(P):  # the causal rule, brute force: a conflicting earlier write ends before F(j) starts
        for i, j in itertools.combinations(range(len(subnets)), 2):
            if any(subnets[i][b] == subnets[j][b] for b in choice[s]):
                assert ev["B", i, s].end <= ev["F", j, s].start + EPS, f"F({j},{s}) before B({i},{s}) ended"
    assert check_causal(r.trace, subnets, choice) == []
    gate = parse_shared(sc["shared"]).gate
    for s in range(P):  # the shared-layer gate: F(j) waits for the writes of subnets <= j - D - 1
        if gate is not None and any(space.blocks[b].fixed for b in part.blocks(s)):
            for j in range(len(subnets)):
                for i in range(j - gate):
                    assert ev["B", i, s].end <= ev["F", j, s].start + EPS, f"F({j},{s}) passed the gate"
    assert all(sched.finished for sched in r.schedulers)


def _one_stage(cls, subnets, window=8):
    space = SearchSpace("s", (Block("c0", (Candidate("a"), Candidate("b"))),))
    register_policy(Policy(cls.name, cls, causal=True), replace=True)
    try:
        return make_scheduler(cls.name, stage_specs(space, partition(space, 1))[0],
                              ReplayStream(space, subnets), window)
    finally:
        unregister_policy(cls.name)


class NewestForward(naspipe.CSPScheduler):
    name = "test-newest"

    def choose_forward(self, ready: tuple[int, ...]) -> int:
        return ready[-1]


def test_the_hook_sees_only_causally_free_forwards_and_its_choice_runs() -> None:
    s = _one_stage(NewestForward, [(0,), (1,), (0,), (1,)])
    assert s.free_forwards() == (0, 1)  # 2 and 3 conflict with 0 and 1, whose writes are not done
    assert s.next_task() == Task(FORWARD, 1, 0)  # the newest free one
    s.on_finish(Task(FORWARD, 1, 0))
    assert s.next_task() == Task(BACKWARD, 1, 0)  # the last stage: the loss is in, backward first
    s.on_finish(Task(BACKWARD, 1, 0))
    assert s.free_forwards() == (0, 3)  # 3 freed by 1's write
    assert s.next_task() == Task(FORWARD, 3, 0)


class DeclinesBackwards(naspipe.CSPScheduler):
    name = "test-decline"

    def choose_backward(self, ready: tuple[int, ...]) -> int | None:
        return None


def test_a_declined_backward_runs_when_no_forward_may_so_the_stage_never_idles() -> None:
    s = _one_stage(DeclinesBackwards, [(0,), (0,)])
    assert s.next_task() == Task(FORWARD, 0, 0)
    s.on_finish(Task(FORWARD, 0, 0))
    assert s.free_forwards() == ()  # 1 conflicts with 0
    assert s.next_task() == Task(BACKWARD, 0, 0)
    s = _one_stage(DeclinesBackwards, [(0,), (1,)])
    assert s.next_task() == Task(FORWARD, 0, 0)
    s.on_finish(Task(FORWARD, 0, 0))
    assert s.next_task() == Task(FORWARD, 1, 0)  # declined: the free forward goes first


class Cheats(naspipe.CSPScheduler):
    name = "test-cheat"
    answer: object = None

    def choose_forward(self, ready: tuple[int, ...]) -> int:
        return self.answer  # type: ignore[return-value]


@pytest.mark.parametrize("answer", [1, 7, None, True, 0.0, "0"])
def test_a_hook_answering_outside_the_offered_set_is_refused(answer, monkeypatch) -> None:
    monkeypatch.setattr(Cheats, "answer", answer)
    s = _one_stage(Cheats, [(0,), (0,), (1,)])  # 1 conflicts with 0: offered (0, 2)
    assert s.free_forwards() == (0, 2)
    with pytest.raises(PolicyError, match=r"choose_forward returned .* must return one of the ready subnets \[0, 2\]"):
        s.next_task()


def test_hooks_on_a_built_in_order_that_would_ignore_them_are_refused() -> None:
    with pytest.raises(TypeError, match="hooks of CSPScheduler's order"):
        type("ChainHook", (ChainCSPScheduler,), {"choose_forward": lambda self, ready: ready[-1]})


@pytest.mark.parametrize("salt", [1, 2])
def test_hooks_keep_the_causal_rule_under_a_memory_budget_and_its_predictor(salt) -> None:
    """The memory gate offers the hook a narrowed set (``next_task_forwarding``) and the predictor asks clones."""
    sp = preset("naspipe-k48")
    part = partition(sp, 4)
    stream = UniformStream(sp, 0, 60)
    with mock.patch.object(ArbitraryHooks, "salt", salt):
        r = simulate(RunSpec.of(sp, part, stream, "test-arbitrary"),
                     SimOptions(memory=MemoryConfig(device_memory="25%")))
    subnets = [tuple(stream[j]) for j in range(60)]
    evs = r.trace.compute_events()
    assert len({(e.kind, e.subnet, e.stage) for e in evs}) == len(evs) == 2 * 60 * 4
    choice = [[b for b in part.blocks(s) if not sp.blocks[b].fixed] for s in range(4)]
    assert check_causal(r.trace, subnets, choice) == []
