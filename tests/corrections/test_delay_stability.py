"""Delayed SGD on a quadratic: the bisected stable step follows 2*sin(pi/(2*(2*tau+1))) (the O(1/tau) law)."""

from __future__ import annotations

import math

import pytest

from naspipe.corrections.delay import (
    bisect_stable,
    is_stable,
    largest_stable_step,
    root_stable_step,
    simulate_delayed,
    theory_stable_step,
)


@pytest.mark.parametrize("tau", [1, 2, 4, 8])
def test_bisected_stable_step_matches_theory_within_3_percent(tau: int) -> None:
    """Simulate w(t+1) = w(t) - a*w(t-tau) for 20k steps per trial step a and bisect the growth test."""
    measured = largest_stable_step(tau, steps=20000, rel_tol=1e-4)
    theory = 2 * math.sin(math.pi / (2 * (2 * tau + 1)))
    assert abs(measured / theory - 1) < 0.03
    assert abs(measured / theory - 1) < 1e-3  # in fact much closer


def test_theory_values_and_the_polynomial_roots_agree() -> None:
    expected = {0: 2.0, 1: 1.0, 2: 0.618, 4: 0.347, 8: 0.184, 16: 0.095}
    for tau, value in expected.items():
        assert theory_stable_step(tau) == pytest.approx(value, abs=6e-4)
    for tau in (0, 1, 2, 4, 8):
        assert root_stable_step(tau) == pytest.approx(theory_stable_step(tau), rel=1e-6)


def test_stable_step_shrinks_like_one_over_tau() -> None:
    steps = [theory_stable_step(t) for t in (4, 8, 16, 32)]
    products = [s * (2 * t + 1) for s, t in zip(steps, (4, 8, 16, 32), strict=True)]
    assert all(abs(p - math.pi) < 0.05 for p in products)  # a* ~ pi / (2 tau + 1)


def test_growth_test_on_both_sides_of_the_threshold() -> None:
    for tau in (1, 4):
        a = theory_stable_step(tau)
        assert is_stable(0.98 * a, tau)
        assert not is_stable(1.02 * a, tau)
    assert simulate_delayed(0.5, 0, steps=3) == [1.0, 0.5, 0.25, 0.125]  # tau = 0: w *= 1 - a
    assert simulate_delayed(1.0, 1, steps=4) == [1.0, 0.0, -1.0, -1.0, 0.0]  # tau = 1, a = 1: period 6


def test_bisect_stable_finds_a_known_threshold() -> None:
    assert bisect_stable(lambda a: a < 0.4321, rel_tol=1e-6) == pytest.approx(0.4321, rel=1e-5)
    with pytest.raises(ValueError, match="not stable"):
        bisect_stable(lambda a: False)
    assert bisect_stable(lambda a: True) == math.inf


def test_discrepancy_model_reduces_to_delayed_sgd_without_discrepancy() -> None:
    a = simulate_delayed(0.3, 4, steps=200)
    assert simulate_delayed(0.3, 4, 4, sensitivity=5.0, decay=0.1, steps=200) == a  # same versions: no term
    assert simulate_delayed(0.3, 4, 0, sensitivity=0.0, steps=200) == a  # no sensitivity: no term
