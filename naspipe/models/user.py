"""A space's supernet as the stage builder and the data pipeline see it (``make``, ``loss``, ``accuracy``).

Why it exists: ``naspipe.models.stage`` builds every supernet, the presets included (``naspipe.models.presets``
declares them), through one small interface; this module is it. The candidates come from
``naspipe.supernet.build`` (factories under seeded random state); batch ``j`` is ``data(j, generator)`` with the
generator seeded from the run's seed and ``j``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from naspipe.spaces.space import SearchSpace
from naspipe.supernet.build import build_candidate, draw_batch
from naspipe.supernet.declare import SupernetError
from naspipe.supernet.load import supernet_of
from naspipe.supernet.seeding import hashed_generator


def user_batch(space: SearchSpace, seed: int, j: int) -> tuple[Tensor, Any]:
    """Training batch ``j`` of a run with ``seed``."""
    sn = supernet_of(space)
    return draw_batch(sn.data, sn.batch_size, hashed_generator(f"data-{sn.seed_domain}", int(seed), int(j)), int(j))


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
            raise SupernetError(f"the held-out set has {len(src)} samples = {avail} batches of {bs}; asked for {n}")
        return [tuple(default_collate([src[i] for i in range(k * bs, min(len(src), (k + 1) * bs))]))
                for k in range(n)]
    return [draw_batch(src, sn.batch_size, hashed_generator(f"heldout-{sn.seed_domain}", i), i)
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
