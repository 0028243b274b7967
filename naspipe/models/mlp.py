"""A residual-MLP supernet with many candidates per block (preset ``sparse-mlp``).

It exists for measuring the runtime: with K = 32 candidates per block, two subnets close in the
sequence rarely share a layer, so CSP can keep every stage busy, and each block does enough arithmetic
(a few ms on one CPU thread) that communication is a small share of a task. The task is a fixed random
teacher: inputs ``x ~ N(0, I)``, label = argmax of a frozen random linear map of ``tanh(x)``.

Fixed input projection (``in -> width``), choice blocks ``x + W2 relu(W1 x)`` whose hidden width varies
by candidate, fixed head (``width -> classes``). Message ``(B, width)``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from naspipe.spaces.space import Candidate, SearchSpace
from naspipe.supernet.seeding import hashed_generator

INIT_GAIN = 1.0


def _dims(space: SearchSpace) -> tuple[int, int, int]:
    m = space.model
    try:
        return int(m["in"]), int(m["width"]), int(m.get("classes", 10))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"space {space.name!r}: mlp needs integers 'in', 'width' (got {dict(m)})") from None


class Block(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.relu(self.up(x)))


def fixed_block(space: SearchSpace, index: int) -> nn.Module:
    n_in, width, classes = _dims(space)
    block = space.blocks[index]
    op = block.candidates[0].op
    if op != "linear":
        raise ValueError(f"block {block.name!r}: a fixed mlp block's op is 'linear', not {op!r}")
    if block.role == "input":
        return nn.Linear(n_in, width)
    if block.role == "head":
        return nn.Linear(width, classes)
    raise ValueError(f"block {block.name!r}: a fixed mlp block has role 'input' or 'head'")


def candidate(space: SearchSpace, index: int, cand: Candidate) -> nn.Module:
    _, width, _ = _dims(space)
    if cand.op != "mlp":
        raise ValueError(f"candidate {cand.name!r}: mlp op {cand.op!r} is not 'mlp' "
                         "(a residual block of width 'hidden')")
    hidden = int(cand.args.get("hidden", width))
    if hidden < 1:
        raise ValueError(f"candidate {cand.name!r}: hidden must be >= 1")
    return Block(width, hidden)


DOMAIN = "teacher"


def batch(space: SearchSpace, j: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Gaussian inputs ``(B, in)`` labelled by the frozen random teacher, targets ``(B,)`` int64."""
    n_in, classes = int(space.model["in"]), int(space.model.get("classes", 10))
    x = torch.randn(space.batch_size, n_in, generator=g)
    return x, (torch.tanh(x) @ _teacher(n_in, classes)).argmax(-1)


@lru_cache(maxsize=4)
def _teacher(n_in: int, classes: int) -> Tensor:
    return torch.randn(n_in, classes, generator=hashed_generator("teacher", n_in, classes))


def heldout(space: SearchSpace) -> Any:
    """Freshly drawn batches (8 by default), from generators of their own."""
    return lambda i, g: batch(space, i, g)


def check(space: SearchSpace) -> None:
    _dims(space)


def loss(out: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(out, target)


def accuracy(out: Tensor, target: Tensor) -> float:
    return float(out.argmax(-1).eq(target).sum()) / max(1, target.numel())
