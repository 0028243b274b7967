"""A single-path one-shot supernet in the style of SPOS (Guo et al., 2020) on scikit-learn's 8x8 digits.

An example of your own supernet: the candidates are ordinary ``nn.Module`` classes written here, not
naspipe's. Each choice block is a ShuffleNet-v2 unit (half the channels pass through, the other half
go through pointwise -> depthwise kxk -> pointwise, then the halves are shuffled) with kernel 3, 5 or 7,
or an Xception-like unit (three depthwise-separable 3x3 convolutions). A fixed stem and head wrap them.
The data needs no download (scikit-learn ships it; ``naspipe.datasets.digits.load_digits`` reads it).

    PYTHONPATH=data/supernets naspipe train --space spos_digits:supernet --stages 2 --subnets 150 \
        --shared-layers delayed:4 --optimizer adam --out runs/spos

The stem and the head must train: they do by default (``serial``) and with ``delayed:D`` (faster pipelines);
with ``--shared-layers frozen`` the random head leaves the supernet near chance (0.21 held-out accuracy in
``benchmarks/shared_layers.py``); trained, it reaches about 88% in 150 subnets.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import TensorDataset

import naspipe

CHANNELS = 16
LAYERS = 4
BATCH = 32


def channel_shuffle(x: Tensor, groups: int = 2) -> Tensor:
    b, c, h, w = x.shape
    return x.reshape(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNet-v2 basic unit (stride 1) with a k x k depthwise convolution."""

    def __init__(self, channels: int, kernel: int):
        super().__init__()
        half = channels // 2
        self.branch = nn.Sequential(
            nn.Conv2d(half, half, 1), nn.ReLU(),
            nn.Conv2d(half, half, kernel, padding=kernel // 2, groups=half),
            nn.Conv2d(half, half, 1), nn.ReLU(),
        )

    def forward(self, x: Tensor) -> Tensor:
        keep, through = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat([keep, self.branch(through)], dim=1))


class XceptionUnit(nn.Module):
    """SPOS's Xception-like choice: three depthwise-separable 3x3 convolutions on the branch half."""

    def __init__(self, channels: int):
        super().__init__()
        half = channels // 2
        layers: list[nn.Module] = []
        for _ in range(3):
            layers += [nn.Conv2d(half, half, 3, padding=1, groups=half), nn.Conv2d(half, half, 1), nn.ReLU()]
        self.branch = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        keep, through = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat([keep, self.branch(through)], dim=1))


class Head(nn.Module):
    """Flatten the 8x8 feature maps into a linear classifier (global average pooling loses too much on
    8x8 digits without the normalisation layers of a deep SPOS network)."""

    def __init__(self, channels: int, classes: int = 10):
        super().__init__()
        self.proj = nn.Linear(channels * 8 * 8, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x.flatten(1))


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


def supernet(channels: int = CHANNELS, layers: int = LAYERS) -> naspipe.Supernet:
    def stem() -> nn.Module:
        return nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.ReLU())

    def shuffle(k: int):  # noqa: ANN202
        return lambda: ShuffleUnit(channels, k)

    choice = {"shuffle3": shuffle(3), "shuffle5": shuffle(5), "shuffle7": shuffle(7),
              "xception": lambda: XceptionUnit(channels)}
    _, _, hx, hy = digits()
    return naspipe.Supernet(
        [naspipe.Fixed("stem", stem),
         *[naspipe.Choice(f"layer{i}", choice) for i in range(layers)],
         naspipe.Fixed("head", lambda: Head(channels))],
        data=batch, loss=F.cross_entropy, batch_size=BATCH, name="spos-digits",
        heldout=TensorDataset(hx, hy), heldout_batches=len(hy) // BATCH,
    )
