"""The small CNN supernet for scikit-learn's 8x8 digits (preset ``digits-cnn``).

Fixed stem conv (1 -> C channels), choice cells that map ``(B, C, 8, 8)`` to the same shape, and a
fixed head (ReLU, global max pool, linear to the classes; under uniform sampling max pooling let the
supernet learn about twice as fast as average pooling). A parametric cell is pre-activation residual,
``x + op(relu(x))``; the ``identity`` candidate (skip) returns ``x`` and owns no weights.
No batch norm: running statistics would be state outside the optimizer.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from naspipe.spaces.space import Candidate, SearchSpace
from naspipe.supernet.seeding import hashed_generator

INIT_GAIN = 1.0  # weights ~ U(+-1/sqrt(fan_in)), torch's default (He gain trained worse here)


def _dims(space: SearchSpace) -> tuple[int, int]:
    m = space.model
    try:
        return int(m["channels"]), int(m.get("classes", 10))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"space {space.name!r}: a cnn model needs an integer 'channels' (got {dict(m)})") from None


class Stem(nn.Module):
    def __init__(self, channels: int, kernel: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, kernel, padding=kernel // 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class Residual(nn.Module):
    def __init__(self, op: nn.Module):
        super().__init__()
        self.op = op

    def forward(self, x: Tensor) -> Tensor:
        return x + self.op(F.relu(x))


class Skip(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class DWSep(nn.Module):
    def __init__(self, c: int, kernel: int):
        super().__init__()
        self.depthwise = nn.Conv2d(c, c, kernel, padding=kernel // 2, groups=c)
        self.pointwise = nn.Conv2d(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise(self.depthwise(x))


class Head(nn.Module):
    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.proj = nn.Linear(channels, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.relu(x).amax(dim=(2, 3)))


def fixed_block(space: SearchSpace, index: int) -> nn.Module:
    c, classes = _dims(space)
    block = space.blocks[index]
    cand = block.candidates[0]
    if block.role == "stem" or cand.op == "conv":
        return Stem(c, int(cand.args.get("kernel", 3)))
    if block.role == "head" or cand.op == "linear":
        return Head(c, classes)
    raise ValueError(f"block {block.name!r}: a fixed cnn block is the stem (conv) or the head (linear)")


def candidate(space: SearchSpace, index: int, cand: Candidate) -> nn.Module:
    c, _ = _dims(space)
    k = int(cand.args.get("kernel", 3))
    dil = int(cand.args.get("dilation", 1))
    if k < 1 or k % 2 == 0 or dil < 1:
        raise ValueError(f"candidate {cand.name!r}: kernel must be odd and >= 1, dilation >= 1")
    if cand.op == "conv":
        return Residual(nn.Conv2d(c, c, k, padding=dil * (k - 1) // 2, dilation=dil))
    if cand.op == "dwsep":
        return Residual(DWSep(c, k))
    if cand.op == "pointwise":
        return Residual(nn.Conv2d(c, c, 1))
    if cand.op == "identity":
        return Skip()
    raise ValueError(f"candidate {cand.name!r}: cnn op {cand.op!r} is not one of conv, dwsep, pointwise, identity")


DOMAIN = "digits"
HELDOUT_FRACTION = 0.2
DIGITS_MEAN, DIGITS_STD = 0.3, 0.4  # of load_digits / 16, rounded: inputs are standardised


@lru_cache(maxsize=2)
def digits_split(train: bool) -> tuple[Tensor, Tensor]:
    """scikit-learn's digits (ships with the package; read by ``naspipe.datasets.digits``), standardised, split once
    into
    a fixed train and held-out part. Input ``(N, 1, 8, 8)`` float32, target ``(N,)`` int64."""
    from naspipe.datasets.digits import load_digits

    data, labels = load_digits()
    x = torch.tensor(data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    x = (x - DIGITS_MEAN) / DIGITS_STD
    y = torch.tensor(labels, dtype=torch.int64)
    order = torch.randperm(len(y), generator=hashed_generator("digits-split"))
    n_hold = int(len(y) * HELDOUT_FRACTION)
    idx = order[n_hold:] if train else order[:n_hold]
    return x[idx].contiguous(), y[idx].contiguous()


def batch(space: SearchSpace, j: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """A seeded sample of ``space.batch_size`` images of the train part."""
    x, y = digits_split(train=True)
    idx = torch.randperm(len(y), generator=g)[: space.batch_size]
    return x[idx], y[idx]


def heldout(space: SearchSpace) -> Any:
    """The held-out part, in order (all of it by default)."""
    from torch.utils.data import TensorDataset

    return TensorDataset(*digits_split(train=False))


def check(space: SearchSpace) -> None:
    _dims(space)


def loss(out: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(out, target)


def accuracy(out: Tensor, target: Tensor) -> float:
    return float(out.argmax(-1).eq(target).sum()) / max(1, target.numel())
