"""One pipeline stage's place in the run, resolved once: which stage and replica, the device, the policy.

Why it exists: the worker used to pass the same values to each object it built (the stage executor took 15
keyword arguments; the links, the replica group and the checkpointer took ``(stage, replica)`` apart) and it
parsed the policy string three ways (the scheduler, the update rule's name, the asynchronous options). A
``StageRun`` is built once per stage process (``StageRun.of``) or per simulated stage (``StageRun.local``),
parses the policy once with the one grammar (``naspipe.sched.registry.parse_policy``) and is handed to
everything that needs to know where it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from naspipe.sched.async_options import ASYNC_OPTIONS
from naspipe.sched.registry import Policy, parse_policy

if TYPE_CHECKING:
    from naspipe.runtime.config import TrainConfig


@dataclass(frozen=True)
class StageRun:
    """Stage ``stage`` of ``stages``, replica ``replica`` of ``replicas``, on ``device``, under ``policy``."""

    stage: int
    stages: int
    policy: str  # the policy string as given (``name[:OPTIONS]``)
    replica: int = 0
    replicas: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    spec: Policy = field(init=False, repr=False, compare=False)  # the registered policy
    text_options: Mapping[str, object] = field(init=False, repr=False, compare=False)  # OPTIONS, parsed

    def __post_init__(self) -> None:
        spec, options = parse_policy(self.policy)  # the one parse (PolicyError on a bad string)
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "text_options", dict(options))
        object.__setattr__(self, "device", torch.device(self.device))

    @classmethod
    def of(cls, cfg: TrainConfig, rank: int, device: torch.device) -> StageRun:
        """The stage and replica that global rank ``rank`` runs (replica-major: ``rank = replica * stages +
        stage``)."""
        return cls(stage=rank % cfg.stages, stages=cfg.stages, policy=cfg.policy, replica=rank // cfg.stages,
                   replicas=cfg.replicas, device=device)

    @classmethod
    def local(cls, stage: int, stages: int, policy: str) -> StageRun:
        """A stage run in this process on the CPU without replicas (one-process replays, tests)."""
        return cls(stage=stage, stages=stages, policy=policy)

    @property
    def name(self) -> str:
        """The policy's registered name (``bsp`` of ``bsp:8``)."""
        return self.spec.name

    @property
    def async_options(self) -> dict[str, object]:
        """The asynchronous baselines' options (``naspipe.sched.async_options``); ``{}`` for other policies."""
        return dict(self.text_options) if self.name in ASYNC_OPTIONS else {}

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1

    @property
    def leader(self) -> bool:
        """Replica 0: it saves the stage's checkpoints and reports its results (the replicas hold the same
        state)."""
        return self.replica == 0

    def where(self) -> str:
        """``stage 2`` or ``stage 2 (replica 1)``: for messages."""
        return f"stage {self.stage}" + (f" (replica {self.replica})" if self.replicas > 1 else "")

