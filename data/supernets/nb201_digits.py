"""A NAS-Bench-201-style cell search space on scikit-learn's 8x8 digits, with the node states as a tuple message.

An example of a cell space (docs/cell-spaces.md): a cell is a DAG of 4 nodes; each of its 6 edges ``i -> j``
(``i < j``) picks one of 5 operations -- ``none`` (zero), ``skip`` (identity), ``conv1x1``, ``conv3x3`` (ReLU then
convolution) and ``avgpool`` (3x3) -- and node ``j`` is the sum of its incoming edges. Written as a chain of
blocks for a pipeline, every edge is a ``Choice`` (per-edge weight sharing: each edge has its own 5 candidates)
and the message from edge to edge is the tuple of the node states still needed: the stem gives ``(n0,)``, edge
``0->1`` gives ``(n0, n1)``, edge ``0->2`` ``(n0, n1, p2)`` (node 2's first part), ``1->2`` ``(n0, n1, n2)``,
``0->3`` ``(n1, n2, p3)`` (node 0 is no longer needed), ``1->3`` ``(n2, p3)``, ``2->3`` ``(n3,)``, which the next
cell takes as its ``n0`` or the head classifies. So a message carries only live node states, each once: a
``skip`` edge puts the same tensor in two places and it travels once; a ``none`` edge gives a zero state that
needs no gradient.

    PYTHONPATH=data/supernets naspipe train --space nb201_digits:supernet --stages 2 --subnets 20

The stem and the head are ``Fixed`` blocks (they follow ``--shared-layers``).
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import TensorDataset

import naspipe

CHANNELS = 8
CELLS = 1
BATCH = 32
# each edge: (name, index of its source among the live states, live states it keeps, adds into the last state)
EDGES = (("e01", 0, (0,), False), ("e02", 0, (0, 1), False), ("e12", 1, (0, 1), True),
         ("e03", 0, (1, 2), False), ("e13", 0, (1,), True), ("e23", 0, (), True))
OPS = ("none", "skip", "conv1x1", "conv3x3", "avgpool")


class Zero(nn.Module):
    """NAS-Bench-201's ``none``: the edge contributes nothing (a zero state, which needs no gradient)."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.zeros_like(x)


def make_op(op: str, channels: int) -> nn.Module:
    if op == "none":
        return Zero()
    if op == "skip":
        return nn.Identity()
    if op == "avgpool":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    k = 1 if op == "conv1x1" else 3
    return nn.Sequential(nn.ReLU(), nn.Conv2d(channels, channels, k, padding=k // 2))


class Edge(nn.Module):
    """One edge of the cell on the tuple of live node states: applies its operation to state ``src`` and returns
    the states it keeps followed by the new one (or by the last state plus the new one: a node's further edge)."""

    def __init__(self, op: nn.Module, src: int, keep: tuple[int, ...], add: bool):
        super().__init__()
        self.op, self.src, self.keep, self.add = op, src, keep, add

    def forward(self, states: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        y = self.op(states[self.src])
        if self.add:
            y = states[-1] + y
        return (*(states[k] for k in self.keep), y)


class Stem(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3, padding=1)

    def forward(self, x: Tensor) -> tuple[Tensor]:
        return (self.conv(x),)


class Head(nn.Module):
    def __init__(self, channels: int, classes: int = 10):
        super().__init__()
        self.proj = nn.Linear(channels * 8 * 8, classes)

    def forward(self, states: tuple[Tensor]) -> Tensor:
        return self.proj(F.relu(states[0]).flatten(1))


@lru_cache(maxsize=1)
def digits() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Standardised digits, split once (fixed order) into 1,437 training and 360 held-out images."""
    from naspipe.datasets.digits import load_digits  # scikit-learn's copy, read without importing sklearn (faster)

    x, y = load_digits()
    x = (torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0 - 0.3) / 0.4
    y = torch.tensor(y, dtype=torch.int64)
    return x[360:], y[360:], x[:360], y[:360]


def batch(j: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Training batch ``j``: a sample drawn with naspipe's generator only (so every process agrees)."""
    x, y, _, _ = digits()
    idx = torch.randperm(len(y), generator=generator)[:BATCH]
    return x[idx], y[idx]


def supernet(channels: int = CHANNELS, cells: int = CELLS) -> naspipe.Supernet:
    def edge(op: str, src: int, keep: tuple[int, ...], add: bool):  # noqa: ANN202
        return lambda: Edge(make_op(op, channels), src, keep, add)

    blocks: list = [naspipe.Fixed("stem", lambda: Stem(channels))]
    for c in range(cells):
        for name, src, keep, add in EDGES:
            blocks.append(naspipe.Choice(f"c{c}{name}", {op: edge(op, src, keep, add) for op in OPS}))
    blocks.append(naspipe.Fixed("head", lambda: Head(channels)))
    _, _, hx, hy = digits()
    return naspipe.Supernet(blocks, data=batch, loss=F.cross_entropy, batch_size=BATCH, name="nb201-digits",
                            heldout=TensorDataset(hx, hy), heldout_batches=len(hy) // BATCH)
