"""Supernets whose blocks return every kind of tensor layout (the layout property test, issue 40).

A candidate computes (a convolution or a linear map of the flattened message, plus the mean of its input over
the spatial dimensions: a reduction sums in another order on another layout) and returns its result in one of
``LAYOUTS``: transposed or permuted storage, channels-last, expanded (stride 0), a strided slice, a slice at an
offset, overlapping rows, or plain. Its message is a plain tensor, a tuple or a dict, by block. Which layout each
candidate returns is drawn from ``random.Random(seed)``: the property test trains several draws and every
partition of each against the sequential reference.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import naspipe

B, C, H, W = 8, 4, 4, 8


def _transposed(y: Tensor) -> Tensor:  # H and W swapped in memory (what .transpose() at a block's end leaves)
    return y.transpose(2, 3).contiguous().transpose(2, 3)


def _permuted(y: Tensor) -> Tensor:  # batch innermost
    return y.permute(1, 2, 3, 0).contiguous().permute(3, 0, 1, 2)


def _channels_last(y: Tensor) -> Tensor:
    return y.contiguous(memory_format=torch.channels_last)


def _expanded(y: Tensor) -> Tensor:  # stride 0 over the channels
    return y.mean(1, keepdim=True).expand(y.shape[0], C, H, W)


def _strided_slice(y: Tensor) -> Tensor:  # every other channel of a wider tensor
    return torch.stack([y, y * 0.5], 2).flatten(1, 2)[:, ::2]


def _offset(y: Tensor) -> Tensor:  # contiguous, but starting one element into its storage
    return torch.cat([y.flatten()[:1], y.flatten()])[1:].view(y.shape)


def _overlapping(y: Tensor) -> Tensor:  # rows that share memory
    flat = torch.cat([y.flatten(), y.flatten()[: W * H]])
    return flat.as_strided(y.shape, (C * H * W, H * W, W // 2, 1))


LAYOUTS = {"plain": lambda y: y, "transposed": _transposed, "permuted": _permuted, "channels_last": _channels_last,
           "expanded": _expanded, "strided_slice": _strided_slice, "offset": _offset, "overlapping": _overlapping}


def _merge(x: object) -> Tensor:
    if isinstance(x, tuple):
        return x[0] + 0.5 * x[1]
    if isinstance(x, dict):
        return x["h"] - 0.25 * x["g"]
    return x  # type: ignore[return-value]


class Cell(nn.Module):
    """A convolution or a linear map of the flattened message, tanh, then ``layout``; the message as ``form``."""

    def __init__(self, op: str, layout: str, form: str):
        super().__init__()
        self.op = nn.Conv2d(C, C, 3, padding=1) if op == "conv" else nn.Linear(C * H * W, C * H * W)
        self.layout, self.form = layout, form

    def forward(self, x: object) -> object:
        x = _merge(x)
        # a linear map of the flattened message: a view where the layout allows (a batch-innermost message is a
        # transposed matrix to the GEMM), else a copy
        z = self.op(x) if isinstance(self.op, nn.Conv2d) else self.op(x.flatten(1)).view(x.shape)
        z = z + x.mean((2, 3), keepdim=True)  # a reduction, whose order follows the layout it reads
        y = LAYOUTS[self.layout](torch.tanh(z))
        if self.form == "tuple":
            return (y, _transposed(y))
        if self.form == "dict":
            return {"h": y, "g": _channels_last(y)}
        return y


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, C * H * W)

    def forward(self, x: Tensor) -> Tensor:
        return _transposed(self.lin(x).view(x.shape[0], C, H, W))  # the stem's own output is a view too


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(C * H * W, 2)

    def forward(self, x: object) -> Tensor:
        return self.lin(_merge(x).flatten(1))


def _batch(j: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    x = torch.randn(B, 16, generator=generator)
    return x, (x.sum(1) > 0).long()


def supernet(seed: int = 0, blocks: int = 5, k: int = 3) -> naspipe.Supernet:
    """``blocks`` choice blocks of ``k`` candidates, layouts and ops drawn from ``random.Random(seed)``; the
    message forms cycle plain, tuple, dict."""
    rng = random.Random(seed)
    forms = ("plain", "tuple", "dict")
    choices = []
    for b in range(blocks):
        cands = {}
        for c in range(k):
            op, layout = rng.choice(("conv", "linear")), rng.choice(sorted(LAYOUTS))
            cands[f"{op}_{layout}_{c}"] = (lambda op=op, layout=layout, form=forms[b % 3]: Cell(op, layout, form))
        choices.append(naspipe.Choice(f"b{b}", cands))
    return naspipe.Supernet([naspipe.Fixed("stem", Stem), *choices, naspipe.Fixed("head", Head)],
                            data=_batch, loss=F.cross_entropy, batch_size=B)


def seed0() -> naspipe.Supernet:
    return supernet(0)


def seed1() -> naspipe.Supernet:
    return supernet(1)


def permuted_only() -> naspipe.Supernet:
    """The issue's repro: every candidate returns a layout the next one's matrix product sees transposed."""
    cands = {f"c{c}": (lambda: Cell("linear", "permuted", "plain")) for c in range(2)}
    return naspipe.Supernet([naspipe.Fixed("stem", Stem), *[naspipe.Choice(f"b{b}", cands) for b in range(4)],
                             naspipe.Fixed("head", Head)], data=_batch, loss=F.cross_entropy, batch_size=B)
