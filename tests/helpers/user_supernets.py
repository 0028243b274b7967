"""Small user supernets for the tests, imported by ``--space user_supernets:NAME`` as a new user's module would be.

``good`` is a working residual MLP; every other function declares one kind of bad user code that naspipe
must refuse before any process starts (exit 2, one line naming the block and the candidate).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import naspipe

WIDTH = 12


class Res(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.up, self.down = nn.Linear(WIDTH, hidden), nn.Linear(hidden, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


def data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(16, 6, generator=g)
    return x, (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()


def _blocks(**over: object) -> list:
    cands = {"h8": lambda: Res(8), "h16": lambda: Res(16), "h24": lambda: Res(24)}
    blocks = [naspipe.Fixed("inp", lambda: nn.Linear(6, WIDTH))]
    blocks += [naspipe.Choice(f"b{i}", over.get(f"b{i}", cands)) for i in range(4)]
    blocks.append(naspipe.Fixed("out", lambda: nn.Linear(WIDTH, 3)))
    return blocks


def good() -> naspipe.Supernet:
    return naspipe.Supernet(_blocks(), data=data, loss=F.cross_entropy, batch_size=16, name="user-mlp")


def _boom() -> nn.Module:
    raise RuntimeError("out of ideas")


def factory_raises() -> naspipe.Supernet:
    return naspipe.Supernet(_blocks(b2={"h8": lambda: Res(8), "broken": _boom}), data=data, loss=F.cross_entropy,
                            batch_size=16)


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def shape_mismatch() -> naspipe.Supernet:
    return naspipe.Supernet(_blocks(b1={"h8": lambda: Res(8), "wide": Wide}), data=data, loss=F.cross_entropy,
                            batch_size=16)


def loss_not_scalar() -> naspipe.Supernet:
    return naspipe.Supernet(_blocks(), data=data, batch_size=16,
                            loss=lambda out, y: F.cross_entropy(out, y, reduction="none"))


def data_random() -> naspipe.Supernet:
    def noisy(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(16, 6)  # torch's global random state, not the generator naspipe passes
        return x, (x[:, 0] > 0).long()
    return naspipe.Supernet(_blocks(), data=noisy, loss=F.cross_entropy, batch_size=16)


def duplicate_labels() -> naspipe.Supernet:
    b = _blocks()
    return naspipe.Supernet([*b[:2], b[1], *b[2:]], data=data, loss=F.cross_entropy, batch_size=16)


def duplicate_candidates() -> naspipe.Supernet:
    return naspipe.Supernet(_blocks(b0=[("h8", lambda: Res(8)), ("h8", lambda: Res(16))]), data=data,
                            loss=F.cross_entropy, batch_size=16)


def bad_label() -> naspipe.Supernet:
    return naspipe.Supernet([naspipe.Fixed("in.put", lambda: nn.Linear(6, WIDTH))], data=data,
                            loss=F.cross_entropy, batch_size=16)


def empty_choice() -> naspipe.Supernet:
    return naspipe.Supernet(_blocks(b3={}), data=data, loss=F.cross_entropy, batch_size=16)


def not_a_supernet() -> dict:
    return {"blocks": []}


def attribute_label() -> naspipe.Supernet:
    return naspipe.Supernet(_blocks(b1={"h8": lambda: Res(8), "add_module": lambda: Res(16)}), data=data,
                            loss=F.cross_entropy, batch_size=16)


# ---- odd layer types, for the split backward (tests/runtime/test_wgrad.py) -------------------------------------------
class _Twice(nn.Module):
    """One Linear called twice: its weight gets two contributions (the block-level fallback's case)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.lin(torch.tanh(self.lin(x)))


class _Scaled(nn.Linear):
    """A Linear subclass with its own forward (no explicit rule applies) and a parameter used directly."""

    def __init__(self):
        super().__init__(WIDTH, WIDTH, bias=False)
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + super().forward(x) * self.gain


class _Seq(nn.Module):
    """Conv1d (dilation, groups, no bias) over a reshaped view, a transposed (non-contiguous) Linear
    input, LayerNorm without bias, GroupNorm, PReLU and a bilinear layer."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 2, 3, dilation=2, padding=2, groups=2, bias=False)
        self.mix = nn.Linear(2, 2)
        self.norm = nn.LayerNorm(WIDTH, bias=False)
        self.group = nn.GroupNorm(2, 2)
        self.act = nn.PReLU()
        self.bil = nn.Bilinear(WIDTH, WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.reshape(x.shape[0], 2, WIDTH // 2))  # (B, 2, 6)
        h = self.group(h)
        h = self.mix(h.transpose(1, 2)).transpose(1, 2).reshape(x.shape[0], WIDTH)  # Linear on a transpose
        h = self.act(self.norm(h))
        return x + self.bil(h, x)


class _Tied(nn.Module):
    """An autoencoder whose decoder reuses the encoder's weight, transposed: one weight, two uses."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec_bias = nn.Linear(WIDTH, 8), nn.Parameter(torch.zeros(WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.linear(torch.relu(self.enc(x)), self.enc.weight.t(), self.dec_bias)


def odd() -> naspipe.Supernet:
    cands = {"twice": _Twice, "scaled": _Scaled, "seq": _Seq, "h8": lambda: Res(8), "tied": _Tied}
    blocks = [naspipe.Fixed("inp", lambda: nn.Linear(6, WIDTH))]
    blocks += [naspipe.Choice(f"b{i}", cands) for i in range(3)]
    blocks.append(naspipe.Fixed("norm", lambda: nn.LayerNorm(WIDTH)))
    blocks.append(naspipe.Fixed("out", lambda: nn.Linear(WIDTH, 3)))
    return naspipe.Supernet(blocks, data=data, loss=F.cross_entropy, batch_size=16, name="user-odd")
