"""The 1-D CNN supernet for MNIST-1D (model kind ``cnn1d``; the space ``data/spaces/mnist1d-truth.json``).

Why it exists: a second ground truth needs a second task whose architectures differ in ways that matter. MNIST-1D
sequences (40 points, ``naspipe.datasets.mnist1d``) are classified by shape under random translation, so what a
cell sees (its kernel size and dilation: the receptive field) decides the accuracy, and a skip or a pointwise layer
adds none. Built like the 2-D ``cnn`` family: a fixed stem conv (1 -> C channels), choice cells that map
``(B, C, 40)`` to the same shape, and a fixed head (ReLU, global max pool over the sequence, linear to the classes).
A parametric cell is pre-activation residual, ``x + op(relu(x))``; ``identity`` (skip) returns ``x``; ``pool``
(``mode`` max or avg, stride 1, padded: the length is kept) returns the pooled ``x`` and owns no weights. No batch
norm: running statistics would be state outside the optimizer.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from naspipe.models.cnn import Residual, Skip, accuracy, loss  # noqa: F401 - the same cells, loss and accuracy
from naspipe.spaces.space import Candidate, SearchSpace

INIT_GAIN = 1.0  # torch's default initialisation, as the 2-D family
DOMAIN = "mnist1d"
OPS = ("conv", "dwsep", "pointwise", "identity", "pool")


def _dims(space: SearchSpace) -> tuple[int, int]:
    m = space.model
    try:
        return int(m["channels"]), int(m.get("classes", 10))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"space {space.name!r}: a cnn1d model needs an integer 'channels' (got {dict(m)})") from None


class Stem(nn.Module):
    def __init__(self, channels: int, kernel: int = 3):
        super().__init__()
        self.conv = nn.Conv1d(1, channels, kernel, padding=kernel // 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class DWSep(nn.Module):
    def __init__(self, c: int, kernel: int, dilation: int):
        super().__init__()
        self.depthwise = nn.Conv1d(c, c, kernel, padding=dilation * (kernel - 1) // 2, dilation=dilation, groups=c)
        self.pointwise = nn.Conv1d(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise(self.depthwise(x))


class Pool(nn.Module):
    """Max or average pooling over ``kernel`` neighbours, stride 1, padded so the length is kept (the average
    counts the zero padding, as torch's default)."""

    def __init__(self, mode: str, kernel: int):
        super().__init__()
        self.mode, self.kernel = mode, kernel

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "max":
            return F.max_pool1d(x, self.kernel, stride=1, padding=self.kernel // 2)
        return F.avg_pool1d(x, self.kernel, stride=1, padding=self.kernel // 2)


class Head(nn.Module):
    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.proj = nn.Linear(channels, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.relu(x).amax(dim=2))


def fixed_block(space: SearchSpace, index: int) -> nn.Module:
    c, classes = _dims(space)
    block = space.blocks[index]
    cand = block.candidates[0]
    if block.role == "stem" or cand.op == "conv":
        return Stem(c, int(cand.args.get("kernel", 3)))
    if block.role == "head" or cand.op == "linear":
        return Head(c, classes)
    raise ValueError(f"block {block.name!r}: a fixed cnn1d block is the stem (conv) or the head (linear)")


def candidate(space: SearchSpace, index: int, cand: Candidate) -> nn.Module:
    c, _ = _dims(space)
    k = int(cand.args.get("kernel", 3))
    dil = int(cand.args.get("dilation", 1))
    if k < 1 or k % 2 == 0 or dil < 1:
        raise ValueError(f"candidate {cand.name!r}: kernel must be odd and >= 1, dilation >= 1")
    if cand.op == "conv":
        return Residual(nn.Conv1d(c, c, k, padding=dil * (k - 1) // 2, dilation=dil))
    if cand.op == "dwsep":
        return Residual(DWSep(c, k, dil))
    if cand.op == "pointwise":
        return Residual(nn.Conv1d(c, c, 1))
    if cand.op == "identity":
        return Skip()
    if cand.op == "pool":
        mode = cand.args.get("mode", "max")
        if mode not in ("max", "avg"):
            raise ValueError(f"candidate {cand.name!r}: pool mode must be max or avg, got {mode!r}")
        return Pool(mode, k)
    raise ValueError(f"candidate {cand.name!r}: cnn1d op {cand.op!r} is not one of {', '.join(OPS)}")


@lru_cache(maxsize=2)
def mnist1d_split(train: bool) -> tuple[Tensor, Tensor]:
    """MNIST-1D (generated and checked by ``naspipe.datasets.mnist1d``): its own train part (4,000) or its held-out
    part (1,000). Input ``(N, 1, 40)`` float32 (standardised by the generator), target ``(N,)`` int64."""
    from naspipe.datasets.mnist1d import load_mnist1d

    d = load_mnist1d()
    x, y = (d["x"], d["y"]) if train else (d["x_test"], d["y_test"])
    return torch.tensor(x, dtype=torch.float32).unsqueeze(1).contiguous(), torch.tensor(y, dtype=torch.int64)


def batch(space: SearchSpace, j: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """A seeded sample of ``space.batch_size`` sequences of the train part."""
    x, y = mnist1d_split(train=True)
    idx = torch.randperm(len(y), generator=g)[: space.batch_size]
    return x[idx], y[idx]


def heldout(space: SearchSpace) -> Any:
    """The held-out part, in order (all of it by default)."""
    from torch.utils.data import TensorDataset

    return TensorDataset(*mnist1d_split(train=False))


def check(space: SearchSpace) -> None:
    _dims(space)
