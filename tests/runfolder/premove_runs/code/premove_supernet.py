"""A user supernet (the README's quick tour) whose checkpoint was taken before naspipe's folder move."""
import torch
import torch.nn.functional as F
from torch import nn

import naspipe


class MyBlock(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def batch(j, generator):
    x = torch.randn(32, 16, generator=generator)
    return x, (x.sum(1) > 0).long()


def supernet():
    cands = {"narrow": lambda: MyBlock(64, 32), "wide": lambda: MyBlock(64, 256)}
    return naspipe.Supernet(
        [naspipe.Fixed("stem", lambda: nn.Linear(16, 64)),
         *[naspipe.Choice(f"layer{i}", cands) for i in range(4)],
         naspipe.Fixed("head", lambda: nn.Linear(64, 2))],
        data=batch, loss=F.cross_entropy, batch_size=32)
