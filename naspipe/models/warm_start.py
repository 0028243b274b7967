"""The few-shot warm start: every copy k > 0 of a candidate takes copy 0's weights and optimizer state.

Why it exists: at the end of the one-shot warm-up (before subnet ``warmup`` trains) each sub-supernet starts from
the one-shot supernet as it stands. The sequential reference calls ``warm_start`` on its whole model and optimizer;
every pipeline stage calls it on its own blocks and its own optimizer at a scheduler fence at the boundary, when
every subnet before it is written on the stage and none after it admitted (``naspipe.runtime.checkpoint``), so the
state copied is the same in both. Optimizer state is per parameter (``naspipe.models.optim``), so a stage's copy
equals the reference's bit for bit. Parameters, buffers and each parameter's optimizer state are copied (cloned);
a copy 0 that was never updated has no optimizer state, and its copies then have none either.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from naspipe.spaces.few_shot import few_shot_of


def copy_pairs(model: Any) -> list[tuple[nn.Module, nn.Module]]:
    """``(copy 0, copy k)`` module pairs of every copied candidate on ``model`` (a stage or the whole supernet)."""
    space = model.space
    if few_shot_of(space) is None:
        return []
    pairs = []
    for b in model.blocks:
        k = space.copied(b)
        for c in range(space.blocks[b].k // k if k > 1 else 0):
            src = model.candidate(b, c * k)
            pairs.extend((src, model.candidate(b, c * k + copy)) for copy in range(1, k))
    return pairs


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


@torch.no_grad()
def warm_start(model: Any, optimizer: torch.optim.Optimizer | None) -> int:
    """Copy every copied candidate's copy 0 (parameters, buffers, the optimizer state of each parameter) into its
    copies k > 0 on ``model``; returns the number of candidates written. A no-op for a model of no few-shot space."""
    pairs = copy_pairs(model)
    state = optimizer.state if optimizer is not None else None
    bufs = {id(b): i for i, b in enumerate(model.buffers())}
    moved: list[tuple[int, int]] = []
    for src, dst in pairs:
        for ps, pd in zip(src.parameters(), dst.parameters(), strict=True):
            pd.copy_(ps)
            if state is not None:
                if ps in state:
                    state[pd] = _clone(state[ps])
                else:
                    state.pop(pd, None)
        for bs, bd in zip(src.buffers(), dst.buffers(), strict=True):
            bd.copy_(bs)
            moved.append((bufs[id(bs)], bufs[id(bd)]))
    replicas = getattr(model, "_replica_buffers", None)  # the reference's per-replica buffers (sequential_trainer)
    for held in replicas or ():
        for i, o in moved:
            held[o] = held[i].clone()
    return len(pairs)
