"""Data-parallel replicas: the fixed shards of a batch and the fixed-order combination of their gradients.

Why it exists: with ``R`` replicas of every stage, replica ``r`` computes shard ``r`` of each subnet's batch
and a stage's replicas combine their gradients before the update. The runtime (after gathering the shards'
gradients) and ``naspipe reference --replicas R`` (which computes the ``R`` shard gradients in one process)
call these same two functions, so both do the same floating-point operations in the same order and agree
bit for bit: a shard is rows ``[r*B/R, (r+1)*B/R)`` of the batch (built whole, then split: data generation
does not change), and the combination is ``((g_0 + g_1) + ... + g_{R-1}) / R``, elementwise, in replica
order. Each shard's loss is the mean over its own rows, so with equal shards the combination is the
gradient of the whole batch's mean loss (up to rounding).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from naspipe.spaces.space import SearchSpace


def shard(t: Tensor, replica: int, replicas: int, dim: int = 0) -> Tensor:
    """Rows ``[replica*B/replicas, (replica+1)*B/replicas)`` of ``t`` along its batch dimension ``dim``."""
    if replicas == 1:
        return t
    b = t.shape[dim]
    if b % replicas:
        raise ValueError(f"a batch of {b} cannot be split into {replicas} equal shards")
    size = b // replicas
    return t.narrow(dim, replica * size, size).contiguous()


def input_batch_dim(space: SearchSpace) -> int:
    """The batch dimension of the first stage's input: 1 for the transformer (source and decoder input are
    stacked along dim 0), else 0. Targets always have it at dim 0."""
    from naspipe.models.stage import model_kind

    return 1 if model_kind(space) == "transformer" else 0


def shard_batch(space: SearchSpace, x: Tensor, target: Tensor, replica: int, replicas: int) -> tuple[Tensor, Tensor]:
    """Shard ``replica`` of a batch's input and target."""
    return shard(x, replica, replicas, input_batch_dim(space)), shard(target, replica, replicas)


def combine(shards: Sequence[Tensor]) -> Tensor:
    """``((s_0 + s_1) + ... + s_{R-1}) / R`` elementwise, in the given (replica) order; a new tensor."""
    if not shards:
        raise ValueError("nothing to combine")
    total = shards[0].clone()
    for t in shards[1:]:
        total.add_(t)
    return total.div_(len(shards))


def combine_present(shards: Sequence[Tensor | None], like: Tensor) -> Tensor | None:
    """``combine`` of one slot's shard gradients where some replicas have none (None: a shard whose forward did
    not reach the parameter): zeros of ``like``'s shape and dtype stand in for them; None when no shard has
    one (the optimizer then skips the parameter, as without replicas)."""
    if all(s is None for s in shards):
        return None
    return combine([s if s is not None else torch.zeros_like(like) for s in shards])
