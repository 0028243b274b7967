"""Fewer simulated plans for tests about something else than the plan choice.

Without a plan, the default policy (``csp-plan``) first simulates up to ``MAX_PLANS`` (200) plans of a short
sequence (``naspipe.sim.plan_choice``) and keeps the best. A test that checks files, fields or samplers, not
which plan wins, means the same with a choice among a few plans (the choice itself is tested in
``tests/sched/test_plan.py``), at a fraction of the cost.
"""

from __future__ import annotations

from unittest import mock

FEW = 8  # plans chosen among (plan 0, csp-cp, is always one of them)


def few_plans():  # noqa: ANN201
    """A ``mock.patch`` (decorator or context manager) capping the plans the default policy simulates at FEW."""
    return mock.patch("naspipe.sim.plan_choice.MAX_PLANS", FEW)
