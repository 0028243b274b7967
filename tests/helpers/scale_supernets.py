"""User supernets with blocks of thousands of candidates (``tests/supernet/test_scale.py``): their factories and
forwards count what naspipe builds and keeps, so a test can bound the work instead of timing it."""

from __future__ import annotations

import itertools
import weakref

import torch
import torch.nn.functional as F
from torch import nn

import naspipe

BUILT = [0]  # candidates built by a factory of ``cells``
LIVE: list = []  # weak references to every output a ``Tracked`` candidate returned
PEAK = [0]  # the most outputs of ``Tracked`` candidates alive at once (seen when one runs)


def data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 8, generator=g)
    return x, (x.sum(1) > 0).long()


def _counted() -> nn.Module:
    BUILT[0] += 1
    return nn.Identity()


def cells() -> naspipe.Supernet:
    """One Choice of 15,625 candidates (a cell of 6 edges, 5 ops each, as one choice)."""
    names = ("c3", "c5", "mp", "ap", "id")
    cands = {"-".join(ops): _counted for ops in itertools.product(names, repeat=6)}
    return naspipe.Supernet([naspipe.Fixed("stem", lambda: nn.Linear(8, 8)), naspipe.Choice("cell", cands),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))], data=data, loss=F.cross_entropy,
                            batch_size=4)


class Tracked(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        PEAK[0] = max(PEAK[0], sum(r() is not None for r in LIVE))
        out = x * 1.0
        LIVE.append(weakref.ref(out))
        return out


def tracked(k: int = 40) -> naspipe.Supernet:
    return naspipe.Supernet([naspipe.Fixed("stem", lambda: nn.Linear(8, 8)),
                             naspipe.Choice("wide", {f"t{i}": Tracked for i in range(k)}),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))], data=data, loss=F.cross_entropy,
                            batch_size=4)
