"""Small user supernets for ``tests/supernet/test_probe.py`` and a few runtime and reference tests (findings of a
hostile-user bug hunt), imported by ``--space hunt_supernets:NAME`` as a user's module would be: each declares
one thing a user may write."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm

import naspipe


def data(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 8, generator=g)
    return x, (x.sum(1) > 0).long()


def _lin() -> dict:
    return {"a": lambda: nn.Linear(8, 8), "b": lambda: nn.Linear(8, 8)}


def three_blocks() -> naspipe.Supernet:
    """Three blocks: fewer than the default --stages 4 (which the reference ignores)."""
    return naspipe.Supernet([naspipe.Choice("l0", _lin()), naspipe.Choice("l1", _lin()),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))], data=data, loss=F.cross_entropy,
                            batch_size=4)


def no_params() -> naspipe.Supernet:
    """Candidates without parameters and, with --shared-layers frozen, a frozen head: some subnets train nothing."""
    c = {"id": nn.Identity, "relu": nn.ReLU}
    return naspipe.Supernet([naspipe.Choice("l0", c), naspipe.Choice("l1", {**c, "a": lambda: nn.Linear(8, 8)}),
                             naspipe.Fixed("head", lambda: nn.Linear(8, 2))], data=data, loss=F.cross_entropy,
                            batch_size=4)


def fails_late() -> naspipe.Supernet:
    """data raises at batch 5 (a user error partway through a run)."""
    def d(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if j == 5:
            raise KeyError("sample 5 missing")
        return data(j, g)

    return naspipe.Supernet([naspipe.Choice("l0", _lin()), naspipe.Fixed("head", lambda: nn.Linear(8, 2))],
                            data=d, loss=F.cross_entropy, batch_size=4)


def _with(block: object, **kw: object) -> naspipe.Supernet:
    return naspipe.Supernet([naspipe.Choice("l0", _lin()), block, naspipe.Fixed("head", lambda: nn.Linear(8, 2))],
                            **{"data": data, "loss": F.cross_entropy, "batch_size": 4, **kw})


def dropout() -> naspipe.Supernet:
    return _with(naspipe.Choice("l1", {"a": lambda: nn.Linear(8, 8),
                                       "drop": lambda: nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))}))


class _Reseeded(nn.Linear):
    """A fixed random projection drawn anew in every forward after seeding torch's generator: deterministic."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(1234)
        return super().forward(x) @ torch.randn(8, 8)


def reseeded() -> naspipe.Supernet:
    return _with(naspipe.Choice("l1", {"a": lambda: nn.Linear(8, 8), "proj": lambda: _Reseeded(8, 8)}))


def spectral_fixed() -> naspipe.Supernet:
    return _with(naspipe.Fixed("sn", lambda: spectral_norm(nn.Linear(8, 8))))


def spectral_choice() -> naspipe.Supernet:
    """spectral_norm in a candidate: its forwards run in sequence order (accepted)."""
    return _with(naspipe.Choice("sn", {"s": lambda: spectral_norm(nn.Linear(8, 8)), "f": lambda: nn.Linear(8, 8)}))


def batchnorm() -> naspipe.Supernet:
    """BatchNorm changes its running statistics in a forward, but not what the next forward computes."""
    return _with(naspipe.Fixed("bn", lambda: nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))))


def wrong_batch() -> naspipe.Supernet:
    return _with(naspipe.Choice("l1", _lin()), batch_size=2)


def small_dataset() -> naspipe.Supernet:
    from torch.utils.data import TensorDataset

    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    return _with(naspipe.Choice("l1", _lin()), data=TensorDataset(x, (x.sum(1) > 0).long()))


def tuple_target() -> naspipe.Supernet:
    def d(j: int, g: torch.Generator) -> tuple:
        x, y = data(j, g)
        return x, (y, x.mean(1))

    return _with(naspipe.Choice("l1", _lin()), data=d, loss=lambda o, t: F.cross_entropy(o, t[0]))


class _Clamp(nn.Module):
    def __init__(self, dtype: torch.dtype = torch.int64):
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(0, 19).to(self.dtype)


class _Embed(nn.Embedding):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.long())


class _Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.mean(1))


def int_message(dtype: torch.dtype = torch.int64) -> naspipe.Supernet:
    """Token ids (int64) pass a parameter-free block before the embedding: an integer message between stages."""
    def d(j: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randint(0, 25, (4, 5), generator=g)
        return x, x[:, 0] % 2

    emb = {"e1": lambda: _Embed(20, 8), "e2": lambda: _Embed(20, 8)}
    return naspipe.Supernet([naspipe.Fixed("clamp", lambda: _Clamp(dtype)), naspipe.Choice("emb", emb),
                             naspipe.Choice("l1", _lin()), naspipe.Fixed("head", _Pool)],
                            data=d, loss=F.cross_entropy, batch_size=4)


def lazy() -> naspipe.Supernet:
    return _with(naspipe.Choice("l1", {"a": lambda: nn.Linear(8, 8), "lazy": lambda: nn.LazyLinear(8)}))


def int16_message() -> naspipe.Supernet:
    """An int16 message: a type the transport cannot send (NCCL has none)."""
    return int_message(torch.int16)


class _StochasticDepth(nn.Linear):
    """Skips itself with probability 1e-9: two forwards all but surely agree, yet each draws from the global RNG."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if float(torch.rand(())) < 1e-9 else super().forward(x)


def rare_drop() -> naspipe.Supernet:
    cands = {"a": lambda: nn.Linear(8, 8), "stochastic_depth": lambda: _StochasticDepth(8, 8)}
    return _with(naspipe.Choice("l1", cands))


class _Noisy(nn.Linear):
    """Noise from a generator of its own (not torch's global one), advanced by every forward."""

    def __init__(self):
        super().__init__(8, 8)
        self.g = torch.Generator().manual_seed(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + torch.randn(x.shape, generator=self.g)


def own_generator() -> naspipe.Supernet:
    return _with(naspipe.Choice("l1", {"a": lambda: nn.Linear(8, 8), "noisy": _Noisy}))


def numpy_init() -> naspipe.Supernet:
    """A factory that initialises from numpy's global generator (naspipe seeds torch's only): train and the
    reference would start from other weights."""
    import numpy as np

    def make() -> nn.Module:
        m = nn.Linear(8, 8)
        with torch.no_grad():
            m.weight.copy_(torch.from_numpy(np.random.randn(8, 8)).float())
        return m

    return _with(naspipe.Choice("l1", {"a": lambda: nn.Linear(8, 8), "np": make}))
