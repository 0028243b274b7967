"""PipeMare T1 and T2 on models a reader can check by hand, driven by the real correction code.

(a) T1: an asynchronous 1F1B pipeline (no stashing) training a least-squares model whose weights are split
    over P stages (``naspipe.corrections.toy``, whose docstring states the model) diverges at a step size
    where the same pipeline with T1 converges.
(b) T2: in the harmful-discrepancy model (forward and backward read different weight versions), the
    discrepancy shrinks the largest stable step; T2 recovers at least 80% of the no-discrepancy step.
"""

from __future__ import annotations

import math

import pytest
import torch

from naspipe.corrections.delay import largest_stable_step, simulate_delayed
from naspipe.corrections.pipemare import DiscrepancyCorrector
from naspipe.corrections.toy import train_toy_pipeline


def test_async_pipeline_lags_are_measured_not_assumed() -> None:
    run = train_toy_pipeline(4, 40, 0.1)
    for i, store in enumerate(run.stores):
        lags = store.lags()
        assert [lags[j][0] for j in range(10, 40)] == [4 - 1 - i] * 30  # steady state: tau_i = P-1-i
        assert {b for _, b in lags.values()} == {0}


@pytest.mark.parametrize(("stages", "lr"), [(4, 1.5), (5, 1.5)])
def test_t1_turns_divergence_into_convergence(stages: int, lr: float) -> None:
    """Same step size, same decaying base schedule (half-life 600 updates), T1 with K = 600."""
    plain = train_toy_pipeline(stages, 1200, lr, half_life=600)
    t1 = train_toy_pipeline(stages, 1200, lr, half_life=600, anneal=600)
    assert plain.diverged, "without T1 the loss blows up (above 1e30) ..."
    assert len(plain.losses) < 600  # ... early, while the base rate is still high
    assert not t1.diverged and len(t1.losses) == 1201
    assert max(t1.losses) == t1.losses[0]  # with T1 the loss never rises above the start ...
    assert t1.losses[-1] < 1e-20 * t1.losses[0]  # ... and reaches the optimum
    assert lr < 2  # the step itself is stable without delay (gradient descent with l = 1 needs lr < 2)


def test_t1_with_a_too_short_anneal_only_postpones_divergence() -> None:
    """K = 120 is far below the base schedule's half-life: T1 hands back the full rate while it is still
    unstable for tau = 3, and the loss blows up after all, later than without T1."""
    plain = train_toy_pipeline(4, 1200, 1.5, half_life=600)
    short = train_toy_pipeline(4, 1200, 1.5, half_life=600, anneal=120)
    assert plain.diverged and short.diverged
    assert len(short.losses) > len(plain.losses) + 100


# -- T2: the harmful-discrepancy model ----------------------------------------------------------------
def test_discrepancy_corrector_matches_the_scalar_model_bit_for_bit() -> None:
    """``delay.simulate_delayed`` (pure floats) and ``DiscrepancyCorrector`` (torch) compute the same
    trajectory: w(t+1) = w(t) - a*(l*w_f + s*(w_f - w_b_hat)), w_b_hat = w(t) - tau*d(t), tau_bkwd = 0."""
    a, tau, sens, decay, steps = 0.3, 4, 2.0, 0.1, 300
    ref = simulate_delayed(a, tau, 0, sensitivity=sens, decay=decay, steps=steps)
    w = torch.nn.Parameter(torch.ones(1, dtype=torch.float64))
    corr = DiscrepancyCorrector([w], tau_fwd=tau, tau_bkwd=0, decay=decay)
    hist = [1.0] * (tau + 1)  # what the forward read tau updates ago
    got = [1.0]
    for _ in range(steps):
        w_f = torch.tensor([hist[-1 - tau]], dtype=torch.float64)
        (w_b,) = corr.corrected()
        g = 1.0 * w_f + sens * (w_f - w_b)
        with corr.observe_step(), torch.no_grad():
            w.copy_(w - g * a)
        hist.append(float(w.detach()))
        got.append(float(w.detach()))
    assert got == ref


@pytest.mark.parametrize(("tau", "sensitivity"), [(4, 1.0), (8, 1.0), (4, 2.0)])
def test_t2_recovers_most_of_the_stable_step(tau: int, sensitivity: float) -> None:
    """Bisect the largest stable step (simulated, 10k steps) of the model in ``naspipe.corrections.delay``:
    no discrepancy (forward and backward both ``tau`` old), discrepancy (backward reads the current
    weights, gradient sensitivity ``s`` to the difference), and discrepancy with T2 (D = 0.1)."""
    same = largest_stable_step(tau, steps=10000, rel_tol=1e-3)
    disc = largest_stable_step(tau, 0, sensitivity=sensitivity, steps=10000, rel_tol=1e-3)
    fixed = largest_stable_step(tau, 0, sensitivity=sensitivity, decay=0.1, steps=10000, rel_tol=1e-3)
    assert disc < 0.5 * same  # the discrepancy is harmful ...
    assert fixed >= 0.8 * same  # ... and T2 recovers at least 80% of the no-discrepancy step
    assert math.isclose(same, 2 * math.sin(math.pi / (2 * (2 * tau + 1))), rel_tol=0.01)
