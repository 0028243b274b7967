"""User supernets whose candidates hold the same ``nn.Parameter`` (a module bank), imported by
``--space bank_supernets:NAME`` in ``tests/supernet/test_shared_parameters.py``, and their fix (each candidate builds
its own modules)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import naspipe

OPS = ("lin", "tanh")


def data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 8, generator=g)
    return x, (x.sum(1) > 0).long()


class Cell(nn.Module):
    """Two edges, each one op of ``ops``, from the modules it is given."""

    def __init__(self, edges: list[nn.Module]):
        super().__init__()
        self.edges = nn.ModuleList(edges)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for e in self.edges:
            x = x + e(x)
        return x


def _op(name: str) -> nn.Module:
    return nn.Linear(8, 8) if name == "lin" else nn.Sequential(nn.Linear(8, 8), nn.Tanh())


def _net(cands: dict, fixed_head: object = None) -> naspipe.Supernet:
    head = fixed_head or (lambda: nn.Linear(8, 2))
    return naspipe.Supernet([naspipe.Fixed("stem", lambda: nn.Linear(8, 8)), naspipe.Choice("cell", cands),
                             naspipe.Fixed("head", head)], data=data, loss=F.cross_entropy, batch_size=4)


def bank() -> naspipe.Supernet:
    """The natural way to share per-edge weights with a whole cell as one choice: one module per (edge, op),
    built once, and each candidate a cell over the bank's modules."""
    mods = {(e, o): _op(o) for e in range(2) for o in OPS}
    cands = {f"{a}-{b}": (lambda a=a, b=b: Cell([mods[0, a], mods[1, b]])) for a in OPS for b in OPS}
    return _net(cands)


def shared_with_fixed() -> naspipe.Supernet:
    """A candidate reuses the Fixed stem's module (the stem built once, outside the factories)."""
    stem = nn.Linear(8, 8)
    return naspipe.Supernet([naspipe.Fixed("stem", lambda: stem),
                             naspipe.Choice("cell", {"own": lambda: nn.Linear(8, 8), "stem_again": lambda: stem}),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))], data=data, loss=F.cross_entropy,
                            batch_size=4)


def own_modules() -> naspipe.Supernet:
    """The fix: each candidate builds its own modules in its factory (many candidates, no sharing; the modules
    built by the probe are freed, so a later parameter may reuse a freed one's id)."""
    cands = {f"{a}-{b}-{i}": (lambda a=a, b=b: Cell([_op(a), _op(b)])) for a in OPS for b in OPS for i in range(8)}
    return _net(cands)
