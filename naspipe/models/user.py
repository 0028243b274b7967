"""The torch side of a supernet (``naspipe.Supernet``): candidates built per stage, batches, loss.

Why it exists: ``naspipe.models.stage`` builds every supernet, the presets included (``naspipe.models.presets``
declares them), through one small interface (``make``, ``loss``, ``accuracy``); this module is it.
Weights depend on the run's seed, the block and the candidate alone: each factory runs under torch's
random state seeded from those three, so
every partition and the reference build the same tensors from the user's own default initialisation.
Batch ``j`` is ``data(j, generator)`` with the generator seeded from the run's seed and ``j``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from naspipe.models.seeding import GLOBAL_RNG, candidate_generator, hashed_generator
from naspipe.space import SearchSpace
from naspipe.supernet.declare import Supernet, SupernetError
from naspipe.supernet.load import supernet_of


def init_seed(seed: int, block: int, choice: int) -> int:
    """The torch seed a factory runs under (a function of the run's seed, the block and the candidate)."""
    return int(torch.randint(0, 2**62, (1,), generator=candidate_generator(seed, block, choice)))


def build_candidate(sn: Supernet, block: int, choice: int, seed: int) -> nn.Module:
    """Call the factory under the seeded random state (then ``sn.init``, if any); SupernetError names it."""
    label, name = sn.blocks[block].label, sn.candidate_names(block)[choice]
    try:
        with GLOBAL_RNG, torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed(seed, block, choice))
            mod = sn.factory(block, choice)()
            if isinstance(mod, nn.Module) and sn.init is not None:
                sn.init(mod, candidate_generator(seed, block, choice))
    except Exception as e:  # noqa: BLE001 - user code: one line naming block and candidate
        raise SupernetError(f"block {label!r}, candidate {name!r}: the factory raised {type(e).__name__}: "
                            f"{_line(e)}") from None
    if not isinstance(mod, nn.Module):
        raise SupernetError(f"block {label!r}, candidate {name!r}: the factory returned {type(mod).__name__}, "
                            "not an nn.Module")
    return mod


def _line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else ""


def _draw(src: Any, batch_size: int, g: torch.Generator, j: int | None) -> tuple[Tensor, Any]:
    if callable(src):
        batch = src(j, g)
    else:  # a map-style Dataset: batch j's indices come from the generator
        from torch.utils.data import default_collate

        idx = torch.randperm(len(src), generator=g)[:batch_size].tolist()
        batch = default_collate([src[i] for i in idx])
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise SupernetError(f"data must return (input, target); got {type(batch).__name__}")
    x, y = batch
    if not isinstance(x, Tensor):
        raise SupernetError(f"data's input must be one tensor (the message between stages), got {type(x).__name__}")
    return x, y


def user_batch(space: SearchSpace, seed: int, j: int) -> tuple[Tensor, Any]:
    """Training batch ``j`` of a run with ``seed``."""
    sn = supernet_of(space)
    return _draw(sn.data, sn.batch_size, hashed_generator(f"data-{sn.seed_domain}", int(seed), int(j)), int(j))


def user_heldout(space: SearchSpace, n: int | None) -> list[tuple[Tensor, Any]]:
    """``n`` evaluation batches (default ``heldout_batches``): a held-out Dataset in order, else drawn."""
    sn = supernet_of(space)
    n = sn.heldout_batches if n is None else n
    src = sn.heldout if sn.heldout is not None else sn.data
    if sn.heldout is not None and not callable(src):
        from torch.utils.data import default_collate

        bs = sn.batch_size
        avail = (len(src) + bs - 1) // bs
        n = avail if n is None else n
        if n > avail:
            raise ValueError(f"the held-out set has {len(src)} samples = {avail} batches of {bs}; asked for {n}")
        return [tuple(default_collate([src[i] for i in range(k * bs, min(len(src), (k + 1) * bs))]))
                for k in range(n)]
    return [_draw(src, sn.batch_size, hashed_generator(f"heldout-{sn.seed_domain}", i), i)
            for i in range(8 if n is None else n)]


class SupernetBuilder:
    """The interface ``naspipe.models.stage`` builds every model through (presets are supernets too)."""

    def __init__(self, space: SearchSpace):
        self.sn = supernet_of(space)

    def make(self, space: SearchSpace, block: int, choice: int, seed: int) -> nn.Module:
        return build_candidate(self.sn, block, choice, seed)

    def loss(self, out: Tensor, target: Any) -> Tensor:
        return self.sn.loss(out, target)

    def accuracy(self, out: Tensor, target: Any) -> float:
        if self.sn.accuracy is not None:
            return float(self.sn.accuracy(out, target))
        if isinstance(target, Tensor) and not target.is_floating_point() and out.dim() == target.dim() + 1:
            return float(out.argmax(-1).eq(target).sum()) / max(1, target.numel())
        return 0.0
