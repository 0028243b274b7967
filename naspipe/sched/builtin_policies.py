"""The built-in policies, declared once (``naspipe.sched.registry``); ``register_policy`` adds a user's own.

Importing this module registers them; ``naspipe.sched.policies`` imports it, so every way in to the
scheduling core finds them.
"""

from __future__ import annotations

from naspipe.sched.async_options import ASYNC_OPTIONS, check_async_options
from naspipe.sched.async_options import FLAGS as ASYNC_FLAGS
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
    check_plan_options,
)
from naspipe.sched.registry import Policy, register_policy, whole_numbers_from_one

BUILTIN_POLICIES: tuple[Policy, ...] = (
    Policy("sequential", SequentialScheduler, causal=True, replicas=True,
           doc="one subnet in the pipeline at a time"),
    Policy("csp", CSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="causal synchronous parallelism: backward first, then the oldest ready forward"),
    Policy("csp-chain", ChainCSPScheduler, causal=True, replicas=True,
           doc="CSP; among ready forwards the head of the longest conflict chain"),
    Policy("csp-cp", CriticalPathCSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="CSP ranked by critical path: the ready task heading the longest path of work runs first"),
    Policy("csp-plan", PlannedCriticalPathCSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="csp-cp with per-task priority factors chosen by a plan number (naspipe.sim.plan_choice picks one)",
           options={"plan": int, "eps": float}, check=check_plan_options),
    Policy("csp-bw", SplitBackwardCSPScheduler, causal=True, context_switch=True, replicas=True,
           doc="CSP with a split backward (B, then W)", options={"max_pending_w": int},
           check=whole_numbers_from_one),
    Policy("bsp", BSPScheduler, causal=False, updates="group", in_flight="group", delayed_shared=False,
           doc="GPipe: groups of M subnets, flush", options={"micro_batches": int}, check=whole_numbers_from_one),
    Policy("asp", ASPScheduler, causal=False, updates="stashed", in_flight="pipeline", delayed_shared=False,
           doc="PipeDream 1F1B with weight stashing"),
    *(Policy(name, cls, causal=False, updates="async", in_flight="pipeline", delayed_shared=False,
             doc="asynchronous baseline (naspipe.runtime.update_rules.async_rules)", options=ASYNC_OPTIONS[name],
             flags=ASYNC_FLAGS & set(ASYNC_OPTIONS[name]), check=check_async_options)
      for name, cls in (("pipedream", AsyncScheduler), ("2bw", TwoBWScheduler), ("pipemare", PipeMareScheduler),
                        ("pipeoptim", PipeOptimScheduler))),
)

for _policy in BUILTIN_POLICIES:
    register_policy(_policy)
