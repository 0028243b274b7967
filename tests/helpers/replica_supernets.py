"""Small user supernets for the data-parallel replica tests (``--space replica_supernets:NAME``).

``routed``: a candidate and the stem take a data-dependent branch, so the two shards of a batch reach
different parameters (replica 0 has gradients where replica 1 has none). ``mixed_dtype``: float64 candidates
beside float32 ones, so a stage's gradients come in two dtypes. ``parameter_free``: some subnets train nothing.
``drift``: a candidate's forward advances a buffer that enters its output, like spectral norm's power
iteration (each replica has its own).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import naspipe


class Route(nn.Module):
    """``a`` when the shard's first input is positive, else ``b``: which one depends on the shard."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) if x[0, 0].item() > 0 else self.b(x)


def routed_data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(8, 8, generator=g)
    x[0, 0], x[4, 0] = 1.0, -1.0  # shard 0 (rows 0-3) goes to ``a``, shard 1 (rows 4-7) to ``b``
    return x, (x.sum(1) > 0).long()


def routed() -> naspipe.Supernet:
    cands = {"route": Route, "lin": lambda: nn.Linear(8, 8)}
    blocks = [naspipe.Fixed("stem", Route)] + [naspipe.Choice(f"l{i}", cands) for i in range(3)]
    blocks.append(naspipe.Fixed("head", lambda: nn.Linear(8, 2)))
    return naspipe.Supernet(blocks, data=routed_data, loss=F.cross_entropy, batch_size=8, name="routed")


class Double(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.double()).float()


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x.double()).float()


def mixed_data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(8, 8, generator=g)
    return x, (x.sum(1) > 0).long()


def mixed_dtype() -> naspipe.Supernet:
    cands = {"f32": lambda: nn.Linear(8, 8), "f64": Double, "mix": Mixed}
    blocks = [naspipe.Fixed("stem", Mixed)] + [naspipe.Choice(f"l{i}", cands) for i in range(3)]
    blocks.append(naspipe.Fixed("head", lambda: nn.Linear(8, 2)))
    return naspipe.Supernet(blocks, data=mixed_data, loss=F.cross_entropy, batch_size=8, name="mixed-dtype")


def parameter_free() -> naspipe.Supernet:
    """Subnets of two Identity candidates train nothing while the fixed blocks are frozen."""
    cands = {"id": nn.Identity, "lin": lambda: nn.Linear(8, 8)}
    blocks = [naspipe.Fixed("stem", lambda: nn.Linear(8, 8))] + [naspipe.Choice(f"l{i}", cands) for i in range(2)]
    blocks.append(naspipe.Fixed("head", lambda: nn.Linear(8, 2)))
    return naspipe.Supernet(blocks, data=mixed_data, loss=F.cross_entropy, batch_size=8, name="parameter-free")


class Drift(nn.Module):
    """Adds a running mean of its inputs (a buffer its forward advances) to its output."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("mean", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.mean.mul_(0.5).add_(x.mean(0), alpha=0.5)
        return self.lin(x) + self.mean


def drift() -> naspipe.Supernet:
    cands = {"drift": Drift, "lin": lambda: nn.Linear(8, 8)}
    blocks = [naspipe.Fixed("stem", lambda: nn.Linear(8, 8))] + [naspipe.Choice(f"l{i}", cands) for i in range(3)]
    blocks.append(naspipe.Fixed("head", lambda: nn.Linear(8, 2)))
    return naspipe.Supernet(blocks, data=mixed_data, loss=F.cross_entropy, batch_size=8, name="drift")
