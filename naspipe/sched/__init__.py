"""The pure scheduling core (no torch): tasks, the causal tracker, the schedulers (``policies``), the ``Policy``
registry (``registry``: one object per policy, ``register_policy``), the options grammar, the predictor.
Shared-layer semantics live in ``naspipe.spaces.shared`` (re-exported here)."""

from naspipe.sched.causal import CausalTracker
from naspipe.sched.policies import (
    POLICIES,
    CSPScheduler,
    PolicyError,
    StageScheduler,
    StageSpec,
    make_scheduler,
    policy_names,
    stage_specs,
)
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, B, F, Task, W
from naspipe.spaces.shared import SharedLayers, SharedPolicyError, parse_shared

__all__ = [
    "BACKWARD", "FORWARD", "WEIGHT", "B", "F", "W", "Task", "CausalTracker", "POLICIES", "CSPScheduler", "PolicyError",
    "StageScheduler", "StageSpec", "make_scheduler", "policy_names", "stage_specs", "SharedLayers",
    "SharedPolicyError", "parse_shared",
]
