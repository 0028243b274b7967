"""Batches: batch ``j`` is a pure function of ``(seed, j)``; nothing is downloaded.

Every supernet, preset or user's, gives its batches through ``naspipe.Supernet.data`` (``naspipe.models.user``):
batch ``j`` is ``data(j, generator)`` with the generator seeded from the run's seed and ``j``. The presets'
data live with their families (``transformer.batch``: token reversal; ``cnn.batch``: scikit-learn's digits;
``mlp.batch``: Gaussian inputs labelled by a frozen random teacher).
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from naspipe.spaces.space import SearchSpace


class Batch(NamedTuple):
    input: Tensor
    target: Tensor


def input_of(space: SearchSpace, batch: Batch) -> Tensor:
    """What the first stage's ``forward`` takes."""
    return batch[0]


def target_of(space: SearchSpace, batch: Batch) -> Tensor:
    """What the head stage's ``loss`` takes."""
    return batch[1]


def make_batch(space: SearchSpace, seed: int, j: int) -> Batch:
    """Training batch ``j`` of a run with ``seed`` (``space.batch_size`` samples)."""
    from naspipe.models.user import user_batch

    return Batch(*user_batch(space, seed, j))


def heldout_batches(space: SearchSpace, n: int | None = None) -> list[Batch]:
    """``n`` evaluation batches that no training batch draws from (same for every seed).

    A held-out Dataset (digits: the held-out split) in order, in batches of ``space.batch_size`` (default:
    all of it; asking for more is a ValueError); otherwise freshly drawn batches (default 8).
    """
    from naspipe.models.user import user_heldout

    return [Batch(*b) for b in user_heldout(space, n)]
