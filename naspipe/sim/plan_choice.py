"""Planning the default order: which ``csp-plan`` plan a run uses, chosen by simulating a fixed set of plans.

Why it exists: optimal schedules hold some ready tasks back, and no fixed greedy rule (csp-cp and a dozen
variants) gets within a few percent of the optimum on every instance; the best of a few hundred perturbed
csp-cp rankings per instance does. ``csp-plan`` ranks like csp-cp with per-task factors named by a plan number
(``naspipe.sched.csp.plan_factor_unit``); ``choose_plan`` (in ``naspipe.sim.engine``, beside ``simulate``,
which calls it) simulates plans ``0, 1, ..., tries - 1`` on the run's own sequence and cost model and keeps
the shortest makespan (ties: the lowest plan; plan 0 is exactly
csp-cp, so the chosen plan is never worse than csp-cp in simulation). The budget is a number of simulated
subnets (``PLAN_BUDGET``), never wall-clock time, so every machine picks the same plan. This module holds
the plan's vocabulary (budget, policy text, the choice); torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from naspipe.sched.registry import parse_policy

PLANNED = "csp-plan"  # the policy a plan is chosen for
PLAN_BUDGET = 6000  # simulated subnets per planning: 200 plans at 30 subnets, 6 at 1,000
MAX_PLANS = 200  # naspipe-k96, 30 subnets, against the optima: best of 50, 100, 200 plans 1.034x, 1.032x, 1.032x
DEFAULT_EPS = 0.2  # largest relative priority factor (best of 200 there: eps 0.1 1.034x, 0.2 1.032x, 0.3 1.032x)


def plan_tries(subnets: int, budget: int = PLAN_BUDGET) -> int:
    """How many plans (0, 1, ...) a sequence of ``subnets`` gets: ``budget // subnets``, at least 1 (plan 0),
    at most ``MAX_PLANS``."""
    return max(1, min(MAX_PLANS, budget // max(1, subnets)))


def needs_plan(policy: str, policy_options: dict[str, Any] | None = None) -> bool:
    """True for ``csp-plan`` given without a plan (neither in the policy string nor in ``policy_options``)."""
    if str(policy).partition(":")[0].strip() != PLANNED:
        return False
    _, text = parse_policy(policy)
    return "plan" not in text and (policy_options or {}).get("plan") is None


def planned_policy(plan: int, eps: float = DEFAULT_EPS) -> str:
    """The policy string of a chosen plan (what a training run records and every stage parses)."""
    return f"{PLANNED}:plan={plan},eps={eps!r}"


def eps_of(policy: str, policy_options: dict[str, Any] | None = None) -> float:
    """The ``eps`` a ``csp-plan`` policy string (or, failing that, ``policy_options``) gives; the default if none."""
    _, text = parse_policy(policy)
    given = (policy_options or {}).get("eps")
    return float(text.get("eps", DEFAULT_EPS if given is None else given))


@dataclass
class PlanChoice:
    """The chosen plan, its simulated makespan, plan 0's (csp-cp's) and how many plans were simulated; ``result``
    is the chosen plan's simulation."""

    plan: int
    eps: float
    makespan: float
    baseline: float
    tries: int
    result: Any = None

    @property
    def policy(self) -> str:
        return planned_policy(self.plan, self.eps)

    def summary(self) -> dict[str, Any]:
        return {"policy": self.policy, "plan": self.plan, "eps": self.eps, "makespan": self.makespan,
                "plan0_makespan": self.baseline, "tries": self.tries}
