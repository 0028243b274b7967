"""The scheduling policies' public face (torch-free): every stage owns a ``StageScheduler`` of its run's policy.

The parts, one concern each: ``naspipe.sched.base`` (what a stage knows, readiness, admission, the write
frontier, speculative questions and copies), ``naspipe.sched.csp`` (the causal family: ``sequential``, ``csp``,
``csp-chain``, ``csp-cp``, ``csp-plan``, ``csp-bw``), ``naspipe.sched.baselines`` (``bsp``, ``asp`` and the
asynchronous baselines), ``naspipe.sched.builtin_policies`` (their ``Policy`` declarations, registered on import)
and ``naspipe.sched.registry`` (the registry and the one options grammar). This module re-exports them and
holds the factories: ``make_scheduler``, ``policy_class``, ``follows_causal_rule``, ``stage_specs``.
"""

from __future__ import annotations

import naspipe.sched.builtin_policies  # noqa: F401 - registers the built-in policies
from naspipe.sched.base import DEFAULT_WINDOW, Ready, StageScheduler, StageSpec, heap_remove, stage_specs
from naspipe.sched.baselines import (
    ASPScheduler,
    AsyncScheduler,
    BSPScheduler,
    PipeMareScheduler,
    PipeOptimScheduler,
    TwoBWScheduler,
)
from naspipe.sched.csp import (
    ChainCSPScheduler,
    CriticalPathCSPScheduler,
    CSPScheduler,
    PlannedCriticalPathCSPScheduler,
    SequentialScheduler,
    SplitBackwardCSPScheduler,
    plan_factor_unit,
)
from naspipe.sched.registry import (
    Policy,
    PolicyError,
    SchedulerTable,
    get_policy,
    policy_settings,
    register_policy,
)
from naspipe.sched.registry import policy_names as policy_names
from naspipe.sequences.sequence import SubnetStream

POLICIES = SchedulerTable()  # {name: scheduler class}, a live view of the registry


DEFAULT_POLICY = "csp-plan"  # what `naspipe simulate` and `naspipe train` run without --policy ("csp" is the paper's);
# without a plan option a plan is chosen by simulation first (naspipe.sim.plan_choice)


def policy_class(policy: str) -> type[StageScheduler]:
    """The scheduler class of ``policy`` (``bsp:8``, ``pipemare:t1=4`` name it before the colon)."""
    return get_policy(policy).scheduler


def follows_causal_rule(policy: str) -> bool:
    """True for the causal policies (the CSP family and those registered with ``causal=True``): sequential
    semantics, so the causal lower bound binds them and their traces must pass ``naspipe.sched.trace.check_causal``."""
    return get_policy(policy).causal


def make_scheduler(policy: str, spec: StageSpec, stream: SubnetStream, window: int = DEFAULT_WINDOW, *, start: int = 0,
                   fence: int | None = None, **options: object) -> StageScheduler:
    """A fresh scheduler of ``policy`` for one stage. ``options`` (``micro_batches`` for bsp, ``max_pending_w``,
    ...; None stands for the default) and those in the policy string are checked by the policy's declaration
    (``Policy.options`` and ``Policy.check``), the one source; the string's win."""
    opts = policy_settings(policy, **options)  # the declaration's checks (naspipe.sched.registry)
    return policy_class(policy)(spec, stream, window, start=start, fence=fence, **opts)

__all__ = [
    "ASPScheduler", "AsyncScheduler", "BSPScheduler", "CSPScheduler", "ChainCSPScheduler", "CriticalPathCSPScheduler",
    "DEFAULT_POLICY", "DEFAULT_WINDOW", "POLICIES", "PipeMareScheduler", "PipeOptimScheduler",
    "PlannedCriticalPathCSPScheduler", "Policy", "PolicyError", "Ready", "SequentialScheduler",
    "SplitBackwardCSPScheduler", "StageScheduler", "StageSpec", "TwoBWScheduler", "follows_causal_rule", "get_policy",
    "heap_remove", "make_scheduler", "plan_factor_unit", "policy_class", "policy_names", "register_policy",
    "stage_specs",
]
