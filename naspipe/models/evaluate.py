"""Held-out evaluation of one subnet on a whole supernet (for search and for reports).

Runs without gradients and changes nothing; the loss is the mean of the per-batch mean losses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from naspipe.models.data import Batch
from naspipe.models.stage import StageModel


def evaluate(model: StageModel, subnet: Sequence[int], batches: Iterable[Batch]) -> dict[str, float]:
    """``{"loss": ..., "accuracy": ...}`` of ``subnet`` over ``batches`` (model must hold every block)."""
    if not (model.holds_input and model.holds_head):
        raise ValueError("evaluate needs the whole model (build_stage with range(space.num_blocks))")
    losses, accs = [], []
    with torch.no_grad():
        for x, target in batches:
            out = model(x, subnet)
            losses.append(float(model.loss(out, target)))
            accs.append(model.accuracy(out, target))
    if not losses:
        raise ValueError("evaluate needs at least one batch")
    return {"loss": sum(losses) / len(losses), "accuracy": sum(accs) / len(accs)}
