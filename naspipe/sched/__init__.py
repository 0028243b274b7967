"""The pure scheduling core (no torch): tasks, the causal tracker, policies, shared-layer semantics."""

from naspipe.sched.causal import CausalTracker
from naspipe.sched.policies import (
    POLICIES,
    PolicyError,
    StageScheduler,
    StageSpec,
    make_scheduler,
    policy_names,
    stage_specs,
)
from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, B, F, Task, W
from naspipe.shared import SharedLayers, SharedPolicyError, parse_shared

__all__ = [
    "BACKWARD", "FORWARD", "WEIGHT", "B", "F", "W", "Task", "CausalTracker", "POLICIES", "PolicyError",
    "StageScheduler", "StageSpec", "make_scheduler", "policy_names", "stage_specs", "SharedLayers",
    "SharedPolicyError", "parse_shared",
]
