"""Stability of delayed gradient descent on a quadratic: the theory PipeMare's T1 and T2 rest on.

Why it exists: an asynchronous pipeline computes stage ``i``'s gradient from weights ``tau`` updates old.
On the one-dimensional quadratic ``f(w) = l * w**2 / 2`` this is the recursion

    w(t+1) = w(t) - a * l * w(t - tau)                                                    (delayed SGD)

whose largest stable ``a*l`` is ``2*sin(pi / (2*(2*tau+1)))`` (tau = 0: 2, 1: 1, 2: 0.618, 4: 0.347,
8: 0.184): the O(1/tau) law that motivates T1 (learning-rate rescheduling). This module *simulates* such
recursions and bisects the step where they stop being stable, so the law is checked numerically rather
than quoted.

The harmful-discrepancy model *(unconfirmed reading of PipeMare section 3.2; the exact form in the paper may
differ)*: the forward pass reads weights ``tau_fwd`` updates old, the backward pass weights ``tau_bkwd``
updates old (PipeMare: 0, the current weights), and the gradient reacts to the two with a sensitivity
``sensitivity >= 0`` to their difference:

    g(t) = l * w_f + sensitivity * (w_f - w_b),   w_f = w(t - tau_fwd),  w_b = w(t - tau_bkwd)
    w(t+1) = w(t) - a * g(t)

When forward and backward read the same weights the extra term vanishes and this is delayed SGD with
``tau_fwd``; a positive ``sensitivity`` shrinks the stable step (the discrepancy is harmful). T2
(discrepancy correction) replaces ``w_b`` by ``w_b - (tau_fwd - tau_bkwd) * d(t)``, an estimate of the
forward's weights from a velocity ``d(t+1) = g*d(t) + (1-g)*(w(t+1) - w(t))``, ``g = D**(1/(tau_fwd -
tau_bkwd))``: the same formula, in the same floating-point order, as ``naspipe.corrections.pipemare``'s
``DiscrepancyCorrector`` (a test checks the two trajectories are bit-identical).

API::

    theory_stable_step(tau) -> float                                  # 2*sin(pi/(2*(2*tau+1)))
    simulate_delayed(step, tau_fwd, tau_bkwd=None, *, curvature=1.0, sensitivity=0.0, decay=None,
                     steps=20000) -> list[float]                      # the trajectory (stops when it blows up)
    is_stable(step, tau_fwd, ...) -> bool                             # growth test on that trajectory
    bisect_stable(stable, *, start=1e-3, rel_tol=1e-4) -> float       # the first step where stable() fails
    largest_stable_step(tau_fwd, tau_bkwd=None, *, sensitivity=0.0, decay=None, steps=20000) -> float
    root_stable_step(tau) -> float                                    # the same threshold from polynomial roots
"""

from __future__ import annotations

import math
from collections.abc import Callable

BLOW_UP = 1e8  # |w| beyond this (from w(0) = 1) counts as diverged; the simulation stops there


def theory_stable_step(tau: int) -> float:
    """The largest stable ``a*l`` of ``w(t+1) = w(t) - a*l*w(t-tau)``: ``2*sin(pi/(2*(2*tau+1)))``."""
    if tau < 0:
        raise ValueError("tau must be >= 0")
    return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))


def simulate_delayed(step: float, tau_fwd: int, tau_bkwd: int | None = None, *, curvature: float = 1.0,
                     sensitivity: float = 0.0, decay: float | None = None, steps: int = 20000) -> list[float]:
    """Run the (discrepancy) delayed recursion from ``w(t) = 1`` for ``t <= 0``; return ``w(0..)``.

    ``tau_bkwd`` None means ``tau_fwd`` (no discrepancy). ``decay`` is T2's ``D`` (None: no correction;
    ignored when ``tau_fwd <= tau_bkwd``). Stops early once ``|w| > BLOW_UP``.
    """
    out = [1.0]
    _run(step, tau_fwd, tau_bkwd, curvature, sensitivity, decay, steps, out.append)
    return out


def _run(step: float, tau_fwd: int, tau_bkwd: int | None, curvature: float, sensitivity: float,
         decay: float | None, steps: int, record: Callable[[float], object] | None) -> list[float] | None:
    """The recursion itself; returns the last ``max(tau)+1`` values, or None if it blew up."""
    tau_b = tau_fwd if tau_bkwd is None else tau_bkwd
    if tau_fwd < 0 or tau_b < 0:
        raise ValueError("delays must be >= 0")
    gap = tau_fwd - tau_b
    gamma = decay ** (1.0 / gap) if decay is not None and gap > 0 else None
    n = max(tau_fwd, tau_b) + 1
    ring = [1.0] * n  # ring[t % n] = w(t); w(t) = 1 for t <= 0
    d = 0.0
    for t in range(steps):
        w = ring[t % n]
        w_f = ring[(t - tau_fwd) % n]
        w_b = ring[(t - tau_b) % n]
        if gamma is not None:
            w_b = w_b - gap * d
        g = curvature * w_f + sensitivity * (w_f - w_b)
        new = w - step * g
        if gamma is not None:
            d = gamma * d + (1 - gamma) * (new - w)
        ring[(t + 1) % n] = new
        if record is not None:
            record(new)
        if not abs(new) <= BLOW_UP:  # also catches nan
            return None
    return ring


def is_stable(step: float, tau_fwd: int, tau_bkwd: int | None = None, *, curvature: float = 1.0,
              sensitivity: float = 0.0, decay: float | None = None, steps: int = 20000) -> bool:
    """Growth test: stable when the recursion never leaves ``|w| <= BLOW_UP`` and, after ``steps`` steps,
    every ``|w|`` in the last ``max(tau)+1`` values (the whole state of delayed SGD) is below the start 1."""
    last = _run(step, tau_fwd, tau_bkwd, curvature, sensitivity, decay, steps, None)
    return last is not None and max(abs(w) for w in last) < 1.0


def bisect_stable(stable: Callable[[float], bool], *, start: float = 1e-3, grow: float = 1.25,
                  rel_tol: float = 1e-4, limit: float = 1e3) -> float:
    """The step where ``stable`` first fails, walking up from ``start`` (which must be stable) by factors of
    ``grow`` and then bisecting the last stable/unstable pair to ``rel_tol``. Walking up first finds the
    *first* crossing even where the stable set is not an interval."""
    if not stable(start):
        raise ValueError(f"the start step {start} is not stable")
    lo = start
    hi = lo * grow
    while stable(hi):
        lo, hi = hi, hi * grow
        if hi > limit:
            return math.inf
    while hi - lo > rel_tol * lo:
        mid = 0.5 * (lo + hi)
        if stable(mid):
            lo = mid
        else:
            hi = mid
    return lo


def largest_stable_step(tau_fwd: int, tau_bkwd: int | None = None, *, curvature: float = 1.0,
                        sensitivity: float = 0.0, decay: float | None = None, steps: int = 20000,
                        rel_tol: float = 1e-4) -> float:
    """Bisect the largest stable step ``a`` of the simulated recursion (``a*l`` with ``curvature=l=1``)."""
    return bisect_stable(lambda a: is_stable(a, tau_fwd, tau_bkwd, curvature=curvature, sensitivity=sensitivity,
                                             decay=decay, steps=steps), rel_tol=rel_tol)


def root_stable_step(tau: int, *, rel_tol: float = 1e-9) -> float:
    """The delayed-SGD threshold from the roots of ``z**(tau+1) - z**tau + a = 0`` (all inside the unit
    circle iff stable), bisected on ``a``: an independent check of the simulation (numpy)."""
    import numpy as np

    def radius(a: float) -> float:
        coeffs = np.zeros(tau + 2)
        coeffs[0] = 1.0
        coeffs[1] -= 1.0
        coeffs[-1] += a
        return float(max(abs(np.roots(coeffs))))

    lo, hi = 0.0, 2.0
    while hi - lo > rel_tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if radius(mid) < 1.0 else (lo, mid)
    return lo
