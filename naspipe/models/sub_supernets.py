"""A trained few-shot supernet seen as its base space: each architecture runs on its own sub-supernet.

Why it exists: ``naspipe rank``, ``naspipe search`` and the search API score base architectures (the truth's, the
search strategy's) on a whole-supernet model (``naspipe.models.evaluate``). A few-shot run trained the expanded
supernet; ``SubSupernets`` wraps it so that ``model(x, subnet)`` of a base architecture runs copy ``subnet[split]``
of every copied block (``FewShotSpace.scored``), and ``space`` is the base space, so the truth's digest and
architectures match. ``few_shot_model`` loads it from a run folder that recorded its split (``run.json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from naspipe.models.stage import StageModel
from naspipe.spaces.few_shot import FewShotSpace, few_shot_space, recorded_split
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace


class SubSupernets(nn.Module):
    """The expanded supernet ``inner`` (a whole-model ``StageModel`` of a ``FewShotSpace``) as a model of its
    base space; what evaluation and search read of a model (``forward``, ``loss``, ``accuracy``, the candidates'
    parameters) is answered on each architecture's own sub-supernet."""

    def __init__(self, inner: StageModel):
        super().__init__()
        if not isinstance(inner.space, FewShotSpace) or inner.space.base is None:
            raise ValueError("SubSupernets wraps the model of a few-shot space")
        self.inner = inner
        self.fs_space: FewShotSpace = inner.space
        self.space: SearchSpace = inner.space.base
        self.blocks, self.seed, self.shared = inner.blocks, inner.seed, inner.shared

    @property
    def holds_input(self) -> bool:
        return self.inner.holds_input

    @property
    def holds_head(self) -> bool:
        return self.inner.holds_head

    def forward(self, x: Any, subnet: Sequence[int], fixed_params: Mapping[str, Tensor] | None = None) -> Any:
        """Base architecture ``subnet`` on its own sub-supernet."""
        return self.inner(x, self.fs_space.scored(self.space.validate_subnet(list(subnet))), fixed_params)

    def loss(self, out: Tensor, target: Tensor) -> Tensor:
        return self.inner.loss(out, target)

    def accuracy(self, out: Tensor, target: Tensor) -> float:
        return self.inner.accuracy(out, target)

    def candidate(self, block: int, choice: int) -> nn.Module:
        """Copy 0 of base candidate ``choice`` (every copy has its shapes)."""
        return self.inner.candidate(block, choice * self.fs_space.copied(block))

    def candidate_parameters(self, block: int, choice: int) -> list[nn.Parameter]:
        return list(self.candidate(block, choice).parameters())

    def global_named_parameters(self) -> dict[str, nn.Parameter]:
        """Every parameter of the expanded supernet (every copy) under its name."""
        return self.inner.global_named_parameters()


def few_shot_model(space: SearchSpace, record: Mapping[str, Any], path: str | Path, seed: int,
                   shared: SharedLayers, *, states: Sequence[tuple[str | Path, Mapping[str, Tensor]]] | None = None
                   ) -> SubSupernets:
    """The few-shot supernet a run trained on base ``space`` with split ``record`` (``run.json``'s ``few_shot``),
    its weights read from ``path`` (``naspipe.models.weights.load_weights``: WeightsError names the file), or from
    ``states`` (a checkpoint's, as ``load_weights`` takes them); FewShotError (one line) when the split does not fit
    ``space``."""
    from naspipe.models.weights import load_weights

    block, warmup = recorded_split(record)  # type: ignore[misc]
    expanded = few_shot_space(space, block, warmup, warmup + 1)
    return SubSupernets(load_weights(expanded, path, seed, shared, states=states))
