"""The update rule of a policy, chosen by the key its ``Policy`` declares (``naspipe.sched.registry``).

Why it exists: the scheduling core names a policy's update rule by a key (``exact``, ``group``, ``stashed``,
``async``) so it stays torch-free; this table maps each key to the torch code that implements it
(``naspipe.runtime.update_rules.updates`` for the synchronous rules and weight stashing,
``naspipe.runtime.update_rules.async_rules`` for the asynchronous baselines). Every rule offers the same protocol
(``UpdateRule``): what it does before a forward (``forward``), after a backward (``after_backward``) and at the
write (``write``), and for checkpoints ``pending``, ``state_dict`` and ``load_state_dict`` (so every policy can be
checkpointed; bit-exactness of a resumed run is promised for the exact policies only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from naspipe.models import StageModel
from naspipe.runtime.update_rules.async_rules import make_async_updates
from naspipe.runtime.update_rules.updates import (
    ExactUpdates,
    ForwardContext,
    GroupUpdates,
    OptimizerBank,
    StashedUpdates,
)
from naspipe.sched.registry import get_policy


class UpdateRule(Protocol):
    """What a stage's executor asks of an update rule."""

    def forward(self, j: int, x: Any, subnet: Sequence[int]) -> tuple[Any, ForwardContext]: ...

    def after_backward(self, j: int, ctx: ForwardContext) -> None: ...

    def write(self, j: int) -> None: ...

    def held_versions(self) -> int: ...

    def pending(self) -> int:
        """Gradients held and not yet applied (zero at a checkpoint fence)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything the rule needs to continue after a fence (tensors, dicts, numbers: ``torch.save``-able)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def _exact(policy: str, model: StageModel, bank: OptimizerBank, **kw: Any) -> UpdateRule:
    return ExactUpdates(model, bank, kw["shared_delay"], kw["n"])


def _group(policy: str, model: StageModel, bank: OptimizerBank, **kw: Any) -> UpdateRule:
    return GroupUpdates(model, bank, kw["micro_batches"] or 1, kw["n"])


def _stashed(policy: str, model: StageModel, bank: OptimizerBank, **kw: Any) -> UpdateRule:
    return StashedUpdates(model, bank)


def _async(policy: str, model: StageModel, bank: OptimizerBank, **kw: Any) -> UpdateRule:
    return make_async_updates(policy, model, bank, n=kw["n"], stage=kw["stage"], stages=kw["stages"],
                              options=kw["options"] or {})


RULES: dict[str, Callable[..., UpdateRule]] = {"exact": _exact, "group": _group, "stashed": _stashed,
                                               "async": _async}


def make_updates(policy: str, model: StageModel, bank: OptimizerBank, *, shared_delay: int | None, n: int,
                 micro_batches: int | None = None, stage: int = 0, stages: int = 1,
                 options: Mapping[str, object] | None = None) -> UpdateRule:
    """The update rule of ``policy`` (its name). ``shared_delay``: None = frozen, else D. ``stage``, ``stages``,
    ``options`` (``naspipe.sched.async_options``): for the asynchronous baselines."""
    key = get_policy(policy).updates
    return RULES[key](policy.partition(":")[0], model, bank, shared_delay=shared_delay, n=n,
                      micro_batches=micro_batches, stage=stage, stages=stages, options=options)
