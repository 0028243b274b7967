"""Weight versions and measured lags per policy; PipeMare T1, T2 and warm-up as exact unit checks."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import naspipe.corrections as corrections
from naspipe.corrections.pipemare import (
    DiscrepancyCorrector,
    SyncWarmup,
    discrepancy_gamma,
    one_f_one_b_delays,
    rescheduled_lr,
    t1_learning_rate,
    t1_multiplier,
)
from naspipe.corrections.stashing import (
    STASH_POLICIES,
    VersionStore,
    measure_lags,
    pipeline_schedule,
    replay_lags,
    stage_orders,
    theoretical_lag,
)
from naspipe.models.optim import make_optimizer
from naspipe.runspec.spec import RunSpec
from naspipe.sched.trace import Trace
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset


# -- schedules ----------------------------------------------------------------------------------------
def _orders(sched, stages):
    return ["".join(f"{t.kind}{t.micro_batch}" for t in sched if t.stage == s) for s in range(stages)]


def test_one_f_one_b_schedule_table() -> None:
    assert _orders(pipeline_schedule(3, 5), 3) == [
        "F0F1F2B0F3B1F4B2B3B4",
        "F0F1B0F2B1F3B2F4B3B4",
        "F0B0F1B1F2B2F3B3F4B4",
    ]


def test_gpipe_schedule_table() -> None:
    assert _orders(pipeline_schedule(2, 4, "gpipe", group=2), 2) == ["F0F1B0B1F2F3B2B3", "F0F1B0B1F2F3B2B3"]


@pytest.mark.parametrize("stages", [1, 2, 5])
def test_one_f_one_b_admission_and_data_order(stages: int) -> None:
    sched = pipeline_schedule(stages, 17)
    ends = {(t.kind, t.micro_batch, t.stage): t.end for t in sched}
    for t in sched:
        if t.kind == "F" and t.stage > 0:
            assert t.start >= ends[("F", t.micro_batch, t.stage - 1)]
        if t.kind == "B":
            prev = ("B", t.micro_batch, t.stage + 1) if t.stage + 1 < stages else ("F", t.micro_batch, t.stage)
            assert t.start >= ends[prev]
    for s in range(stages):
        in_flight = 0
        for t in (t for t in sched if t.stage == s):
            in_flight += 1 if t.kind == "F" else -1
            assert 0 <= in_flight <= stages - s


# -- measured lags --------------------------------------------------------------------------------------
def test_measured_lag_tables_four_stages() -> None:
    P, n = 4, 10
    table = {pol: [(lag.forward, lag.backward) for lag in measure_lags(pol, P, n)] for pol in STASH_POLICIES}
    ramp = [tuple(min(j, P - 1 - i) for j in range(n)) for i in range(P)]  # the pipeline filling up
    zeros = (0,) * n
    assert table["stash"] == [(r, r) for r in ramp]
    assert table["async"] == [(r, zeros) for r in ramp]
    assert table["gpipe"] == [(zeros, zeros)] * P
    batch_lag = (0,) * 4 + (1,) * 6  # batches of P = 4 micro-batches: the first batch reads version 0
    assert table["2bw"] == [(batch_lag, batch_lag)] * P


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("policy", STASH_POLICIES)
def test_measured_steady_lags_match_the_theory(policy: str, stages: int) -> None:
    """stash F = B = P-1-i; async F = P-1-i, B = 0; 2BW 1; GPipe 0 (and everything 0 on one stage)."""
    n = 8 * stages + 8
    for lag in measure_lags(policy, stages, n):
        f, b = theoretical_lag(policy, lag.stage, stages)
        assert set(lag.forward[-4 * stages:]) == {f} and set(lag.backward[-4 * stages:]) == {b}
        assert lag.max_forward == f and lag.max_backward == b
        if stages == 1:
            assert f == b == 0


def test_versions_held() -> None:
    P = 4
    assert [lag.peak_versions for lag in measure_lags("stash", P, 20)] == [4, 3, 2, 1]  # stage i: P - i
    assert [lag.peak_versions for lag in measure_lags("async", P, 20)] == [1] * P
    assert [lag.peak_versions for lag in measure_lags("gpipe", P, 20)] == [1] * P
    assert [lag.peak_versions for lag in measure_lags("2bw", P, 20)] == [2] * P  # double buffering
    assert [lag.peak_versions for lag in measure_lags("2bw", P, 21, group=6)] == [2] * P


def test_lags_measured_on_simulator_traces() -> None:
    """Replay the discrete-event simulator's own asp (PipeDream 1F1B) and bsp (GPipe) traces, every stage's
    weights updated by every subnet: the measured lags are the theory's."""
    space = preset("unit-k12")
    part = partition(space, 4)
    asp = simulate(RunSpec.of(space, part, UniformStream(space, 0, 24), "asp", window=24))
    for s, order in enumerate(stage_orders(asp.trace)):
        for policy in ("async", "stash"):
            lag = replay_lags(policy, order, stage=s)
            f, b = theoretical_lag(policy, s, 4)
            assert lag.max_forward == f and lag.max_backward == b and lag.forward[-1] == f
    bsp = simulate(RunSpec.of(space, part, UniformStream(space, 0, 24), "bsp", window=24),
                   SimOptions(policy_options={"micro_batches": 4}))
    for order in stage_orders(bsp.trace):
        lag = replay_lags("gpipe", order, group=4)
        assert lag.max_forward == lag.max_backward == 0


def test_stage_orders_reads_compute_events_by_start() -> None:
    tr = Trace(2)
    tr.add(0, "F", 1, 1.0, 2.0)
    tr.add(0, "F", 0, 0.0, 1.0)
    tr.add(1, "F", 0, 1.0, 2.0)
    tr.add(1, "B", 0, 2.0, 3.0)
    tr.add(0, "B", 0, 3.0, 4.0)
    assert stage_orders(tr) == [[("F", 0), ("F", 1), ("B", 0)], [("F", 0), ("B", 0)]]


# -- the version store with real tensors --------------------------------------------------------------------
def _step(p: torch.Tensor, amount: float):
    def run() -> None:
        with torch.no_grad():
            p.add_(amount)
    return run


def test_stash_backward_reads_the_forwards_version() -> None:
    p = torch.zeros(2)
    store = VersionStore([p], "stash")
    assert store.forward(0)[0] is p  # the current version: the live tensor, no copy
    store.forward(1)
    store.backward(0)
    store.update(step=_step(p, 1.0))  # live: version 1; micro-batch 1 still needs version 0 -> copied
    assert store.held == 2
    (w,) = store.backward(1)
    assert torch.equal(w, torch.zeros(2)) and w is not p
    assert float(p[0]) == 1.0
    store.update(step=_step(p, 1.0))
    assert store.held == 1  # nobody needs version 0 or 1 any more
    assert store.lags() == {0: (0, 0), 1: (1, 1)}
    assert store.version_read(1, "F") == 0 and store.version_read(1, "B") == 0


def test_async_backward_reads_the_live_weights() -> None:
    p = torch.zeros(1)
    store = VersionStore([p], "async")
    store.forward(0)
    store.forward(1)
    store.backward(0)
    store.update(step=_step(p, 1.0))
    assert store.backward(1)[0] is p and store.held == 1
    store.update()
    assert store.lags() == {0: (0, 0), 1: (1, 0)}


def test_two_bw_reads_the_previous_batch_version() -> None:
    p = torch.zeros(1)
    store = VersionStore([p], "2bw", group=2, delay=1)
    for j in (0, 1, 2):
        store.forward(j)
    store.backward(0)
    store.backward(1)
    store.update(step=_step(p, 1.0))  # batch 0 applied: live = version 1, version 0 kept for batch 1
    (w,) = store.forward(3)
    assert float(w[0]) == 0.0 and float(p[0]) == 1.0  # batch 1 reads version 0: delay 1
    store.forward(4)  # batch 2 reads version 1 = live
    assert store.held == 2
    store.backward(2)
    store.backward(3)
    store.update(step=_step(p, 1.0))
    assert store.lags() == {0: (0, 0), 1: (0, 0), 2: (1, 1), 3: (1, 1)}


def test_version_store_refuses_misuse() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        VersionStore([], "pipedream")
    store = VersionStore([], "stash")
    with pytest.raises(RuntimeError, match="before its forward"):
        store.backward(0)
    store.forward(0)
    with pytest.raises(RuntimeError, match="twice"):
        store.forward(0)
    with pytest.raises(RuntimeError, match="has not run"):
        store.update([0])
    two = VersionStore([], "2bw", group=2)
    with pytest.raises(RuntimeError, match="not produced yet"):
        two.forward(4)  # batch 2 needs version 1 before any update


# -- PipeMare T1 --------------------------------------------------------------------------------------
def test_t1_multiplier_exact_values() -> None:
    for tau in (2, 3, 7, 2.5):
        assert t1_multiplier(0, tau, 100) == 1 / tau
        assert t1_multiplier(100, tau, 100) == 1.0 and t1_multiplier(10**6, tau, 100) == 1.0
        assert t1_multiplier(50, tau, 100) == pytest.approx(tau ** -0.5)
        ms = [t1_multiplier(k, tau, 100) for k in range(101)]
        assert all(a < b for a, b in zip(ms, ms[1:], strict=False))
    for tau in (0, 0.5, 1):
        assert t1_multiplier(0, tau, 100) == 1.0  # tau <= 1: not scaled
    assert t1_multiplier(0, 4, 0) == 1.0  # K = 0: no rescheduling
    assert t1_learning_rate(0.3, 0, 4, 10) == 0.3 / 4
    assert one_f_one_b_delays(4) == [3, 2, 1, 0]
    with pytest.raises(ValueError):
        t1_multiplier(-1, 2, 10)


def test_rescheduled_lr_scales_and_restores_exactly() -> None:
    a, b = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([{"params": [a], "lr": 0.3}, {"params": [b], "lr": 0.1}], foreach=False)
    with rescheduled_lr(opt, 0, 4, 50) as m:
        assert m == 0.25
        assert [g["lr"] for g in opt.param_groups] == [0.3 * 0.25, 0.1 * 0.25]
        a.grad, b.grad = torch.ones(1), torch.ones(1)
        opt.step()
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.1]
    assert float(a.detach()) == pytest.approx(1 - 0.075) and float(b.detach()) == pytest.approx(1 - 0.025)
    with pytest.raises(KeyError), rescheduled_lr(opt, 0, 4, 50):
        raise KeyError("boom")
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.1]


# -- PipeMare T2 --------------------------------------------------------------------------------------
def test_discrepancy_gamma() -> None:
    assert discrepancy_gamma(4, 0, 0.1) == 0.1 ** 0.25
    assert discrepancy_gamma(1, 0, 0.1) == 0.1
    assert discrepancy_gamma(2, 2) is None and discrepancy_gamma(1, 3) is None
    with pytest.raises(ValueError):
        discrepancy_gamma(3, 0, 1.0)


def test_velocity_by_hand_and_one_extra_buffer() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    opt = make_optimizer([p], "sgd", 0.5)
    corr = DiscrepancyCorrector([p], tau_fwd=2, tau_bkwd=0, decay=0.25)  # g = 0.5
    assert len(corr.velocity) == 1 and corr.velocity[0].shape == p.shape and not corr.velocity[0].any()
    p.grad = torch.tensor([2.0, -2.0], dtype=torch.float64)
    with corr.observe_step():
        opt.step()  # w moves by (-1, +1)
    assert corr.velocity[0].tolist() == [-0.5, 0.5]  # 0.5*0 + 0.5*(-1, 1)
    with corr.observe_step():
        opt.step()
    assert corr.velocity[0].tolist() == [-0.75, 0.75]  # 0.5*(-0.5, 0.5) + 0.5*(-1, 1)
    assert corr.corrected()[0].tolist() == [-1.0 + 1.5, 4.0 - 1.5]  # w - 2*d
    assert p.tolist() == [-1.0, 4.0]  # corrected() leaves the parameter alone


def test_correction_estimates_the_forward_weights_under_steady_motion() -> None:
    """Constant velocity v: d(t) = v*(1 - g**t) -> v, so w - gap*d -> w - gap*v, the weights gap updates ago."""
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    corr = DiscrepancyCorrector([p], tau_fwd=5, tau_bkwd=1)
    v = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    hist = [p.detach().clone()]
    for _ in range(60):
        with corr.observe_step(), torch.no_grad():
            p.add_(v)
        hist.append(p.detach().clone())
    torch.testing.assert_close(corr.corrected()[0], hist[-1 - 4], rtol=0, atol=1e-12)


def test_corrected_weights_swap_and_restore_exactly() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0, 1.0], dtype=torch.float64))
    corr = DiscrepancyCorrector([p], tau_fwd=3)
    with corr.observe_step(), torch.no_grad():
        p.sub_(0.3)
    real = p.detach().clone()
    expected = corr.corrected()[0]
    version = p._version
    with corr.corrected_weights():
        assert torch.equal(p.detach(), expected) and not torch.equal(expected, real)
    assert torch.equal(p.detach(), real) and p._version == version


def test_no_discrepancy_means_no_correction() -> None:
    p = torch.nn.Parameter(torch.ones(2))
    corr = DiscrepancyCorrector([p], tau_fwd=2, tau_bkwd=2)
    assert not corr.active and corr.velocity == []
    with corr.observe_step(), torch.no_grad():
        p.add_(1.0)
    assert torch.equal(corr.corrected()[0], p.detach())
    with corr.corrected_weights():
        assert torch.equal(p.detach(), torch.full((2,), 2.0))


# -- warm-up ------------------------------------------------------------------------------------------
def test_sync_warmup() -> None:
    w = SyncWarmup(3)
    assert [w.synchronous(k) for k in range(5)] == [True, True, True, False, False]
    assert [w.async_step(k) for k in range(5)] == [0, 0, 0, 0, 1]
    assert SyncWarmup.from_epochs(2, 10) == SyncWarmup(20)
    assert not SyncWarmup().synchronous(0)
    with pytest.raises(ValueError):
        SyncWarmup(-1)


# -- package ------------------------------------------------------------------------------------------
def test_package_exports_and_stays_torch_free_until_asked() -> None:
    assert corrections.t1_multiplier is t1_multiplier and corrections.VersionStore is VersionStore
    for name in corrections.__all__:
        assert getattr(corrections, name) is not None
    code = ("import sys, naspipe.corrections as c; c.measure_lags('stash', 3, 6); c.largest_stable_step(1, "
            "steps=200); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
