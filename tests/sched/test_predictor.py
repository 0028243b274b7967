"""The context predictor: cheap speculative copies, literal forecasts, arrivals, gates, accuracy."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import StageScheduler, make_scheduler, stage_specs
from naspipe.sched.predictor import (
    ACTIVATION,
    GRADIENT,
    AccuracyMeter,
    Arrival,
    Prediction,
    Predictor,
    arrivals_from_neighbours,
    fallback_task,
    peek,
    speculative_copy,
)
from naspipe.sched.tasks import B, F, Task
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.sim.memory import MemoryConfig
from naspipe.spaces.partition import partition
from naspipe.spaces.space import Block, Candidate, SearchSpace, preset


def _space(k: int = 2, blocks: int = 1) -> SearchSpace:
    cands = tuple(Candidate(f"c{i}", fwd=1.0, bwd=2.0) for i in range(k))
    return SearchSpace("p", tuple(Block(f"b{i}", cands) for i in range(blocks)))


def _sched(space: SearchSpace, subnets, stages: int = 1, stage: int = 0, policy: str = "csp") -> StageScheduler:
    part = partition(space, stages)
    return make_scheduler(policy, stage_specs(space, part)[stage], ReplayStream(space, subnets))


def _duration(task: Task) -> float:
    return 1.0 if task.kind == "F" else 2.0


def _state(s: StageScheduler) -> tuple:
    t = s.tracker
    return (sorted(s._f_ready), sorted(s._b_ready), s.lo, s._running, sorted(getattr(s, "_arrived", ())),
            {k: list(q) for k, q in t._queues.items()}, dict(t._blocked), s.window.lo)


# ---- literal forecasts ---------------------------------------------------------------------------
def test_speculation_assumes_the_running_backward_finished() -> None:
    """One stage; subnets 0 and 1 share a candidate, 2 does not. While B(0) runs, F(1) is blocked, yet it is
    what runs next: B(0) finishing releases it and CSP takes the oldest free forward."""
    s = _sched(_space(k=2), [(0,), (0,), (1,)])
    assert s.next_task() == F(0, 0)
    s.on_finish(F(0, 0))
    assert s.next_task() == B(0, 0)  # running now
    assert peek(s) is None  # a stage that runs something answers nothing
    naive = speculative_copy(s)
    naive._running = None
    assert naive.next_task() == F(2, 0)  # what is ready *now* (the wrong guess)
    before = _state(s)
    fc = Predictor(_duration, depth=4).forecast(s, now=10.0, running_end=11.5)
    assert fc == [Prediction(F(1, 0), 11.5, 12.5), Prediction(B(1, 0), 12.5, 14.5),
                  Prediction(F(2, 0), 14.5, 15.5), Prediction(B(2, 0), 15.5, 17.5)]
    assert _state(s) == before  # the scheduler itself is untouched


def test_forecast_waits_for_expected_arrivals_and_ignores_duplicates() -> None:
    sp = _space(k=3, blocks=2)
    s = _sched(sp, [(0, 0), (1, 1), (2, 2)], stages=2, stage=1)
    p = Predictor(_duration, depth=3)
    assert p.forecast(s, 0.0) == []  # nothing has arrived, nothing is expected
    arr = [Arrival(5.0, ACTIVATION, 1), Arrival(3.0, ACTIVATION, 0), Arrival(4.0, ACTIVATION, 0)]
    fc = p.forecast(s, 0.0, arrivals=arr)
    assert [x.task for x in fc] == [F(0, 1), B(0, 1), F(1, 1)]  # the last stage runs B right after F
    assert fc[0].start == 3.0 and fc[2].start == 6.0
    assert p.forecasts == 2


def test_arrivals_from_neighbours() -> None:
    up = [Prediction(F(3, 0), 0.0, 1.0), Prediction(B(1, 0), 1.0, 3.0)]
    down = [Prediction(B(2, 2), 0.5, 2.5), Prediction(F(4, 2), 2.5, 3.5)]
    assert arrivals_from_neighbours(up, down, hop=0.25) == [Arrival(1.25, ACTIVATION, 3), Arrival(2.75, GRADIENT, 2)]


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Predictor(_duration, depth=0)


class _NoForwards:
    """A gate that refuses every forward (memory full) and knows no preferred one."""

    def copy(self):  # noqa: ANN201
        return self

    def may_bind(self) -> bool:
        return True

    def admits(self, task: Task) -> bool:
        return task.kind != "F"

    def start(self, task: Task) -> None:
        pass

    def finish(self, task: Task) -> None:
        pass

    def preferred_forward(self) -> None:
        return None


def test_a_gate_holds_refused_forwards_back() -> None:
    s = _sched(_space(k=2), [(0,), (1,)])
    assert Predictor(_duration).forecast(s, 0.0, gate=_NoForwards()) == []
    assert Predictor(_duration).forecast(s, 0.0)[0].task == F(0, 0)


def test_start_forward_steers_a_chain_policy_and_restores_the_rest() -> None:
    sp = _space(k=4, blocks=2)
    s = _sched(sp, [(0, 0), (1, 1), (2, 2), (3, 3)], policy="csp-chain")
    ready = sorted(s._f_ready)
    assert ready == [0, 1, 2, 3]
    assert s.next_task_forwarding(2) == F(2, 0)
    assert sorted(s._f_ready) == [0, 1, 3]
    s.on_finish(F(2, 0))
    assert s.next_task_forwarding(7) is None  # not ready: nothing started

    class Prefer:
        def preferred_forward(self) -> int:
            return 3

        def admits(self, task: Task) -> bool:
            return True

    assert s.next_task() == B(2, 0)
    s.on_finish(B(2, 0))
    assert fallback_task(s, Prefer()) == F(3, 0)


# ---- speculative copies behave like clone() -------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(2, 12), stages=st.integers(1, 4), seed=st.integers(0, 1000),
       policy=st.sampled_from(["csp", "csp-bw", "csp-chain", "asp", "bsp", "sequential"]))
def test_peek_and_speculative_copy_match_clone(k: int, stages: int, seed: int, policy: str) -> None:
    """At every decision of a whole simulation, peek() and a speculative copy answer exactly what the real
    scheduler then does, and neither changes it."""
    sp = preset(f"naspipe-k{k}")
    part = partition(sp, stages)
    real = StageScheduler.next_task
    checked = [0]
    busy = [False]

    def checking(self: StageScheduler) -> Task | None:
        if busy[0]:
            return real(self)
        busy[0] = True
        try:
            want = peek(self)
            copy = speculative_copy(self)
            got_copy = copy.next_task()
            cloned = self.clone().next_task()
        finally:
            busy[0] = False
        task = real(self)
        assert want == got_copy == cloned == task
        checked[0] += 1
        return task

    with mock.patch.object(StageScheduler, "next_task", checking):
        simulate(RunSpec.of(sp, part, UniformStream(sp, seed, 25), policy, window=12))
    assert checked[0] > 0


def test_a_speculative_copy_runs_ahead_without_touching_the_original() -> None:
    sp = preset("naspipe-k12")
    s = _sched(sp, list(UniformStream(sp, 4, 40)), stages=1, policy="csp")
    for _ in range(3):
        t = s.next_task()
        s.on_finish(t)
    before = _state(s)
    c = speculative_copy(s)
    for _ in range(30):
        t = c.next_task()
        if t is None:
            break
        c.on_finish(t)
    assert c.lo > s.lo
    assert _state(s) == before
    assert speculative_copy(s).next_task() == s.clone().next_task()


# ---- accuracy ---------------------------------------------------------------------------------------
def test_accuracy_meter() -> None:
    m = AccuracyMeter()
    m.record(F(0, 0), F(0, 0))
    m.record(F(1, 0), B(0, 0))
    m.record(None, F(1, 0))
    assert (m.hits, m.predicted, m.tasks) == (1, 2, 3)
    assert m.rate == 0.5 and m.coverage == pytest.approx(2 / 3)
    other = AccuracyMeter()
    other.record(B(0, 0), B(0, 0))
    m.merge(other)
    assert m.rate == pytest.approx(2 / 3)
    assert AccuracyMeter().rate == 0.0


def test_the_predictor_is_right_in_a_simulated_pipeline() -> None:
    sp = preset("naspipe-k48")
    r = simulate(RunSpec.of(sp, partition(sp, 4), UniformStream(sp, 1, 60), "csp"),
                 SimOptions(memory=MemoryConfig(device_memory="25%", prefetch_depth=4)))
    assert r.memory.predictor_accuracy > 0.95
    assert r.memory.predictor_coverage > 0.9
