"""Data sets and batches: batch ``j`` is a pure function of ``(seed, j)``; nothing is downloaded.

* ``transformer`` spaces (``task: reverse``): random token sequences of random length (tokens
  ``2..vocab-1``, padded with 0 at the end); the target is the reversed source, the decoder input is
  ``BOS`` followed by the target shifted right. Input ``(2, B, T)`` int64 = [source, decoder input],
  target ``(B, T)`` int64 (0 = pad, ignored by the loss).
* ``cnn`` spaces: scikit-learn's ``load_digits`` (ships with the package), standardised, split once
  into a fixed train and held-out part; batch ``j`` is a seeded sample of the train part.
  Input ``(B, 1, 8, 8)`` float32, target ``(B,)`` int64.
* ``mlp`` spaces: Gaussian inputs labelled by a frozen random teacher (see ``naspipe.models.mlp``).
  Input ``(B, in)`` float32, target ``(B,)`` int64.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import torch
from torch import Tensor

from naspipe.models.seeding import hashed_generator
from naspipe.models.stage import USER_KIND, model_kind
from naspipe.models.transformer import BOS, PAD
from naspipe.space import SearchSpace

HELDOUT_FRACTION = 0.2
DIGITS_MEAN, DIGITS_STD = 0.3, 0.4  # of load_digits / 16, rounded: inputs are standardised


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
    if space.model.get("kind") == USER_KIND:
        from naspipe.models.user import user_batch

        return Batch(*user_batch(space, seed, j))
    if model_kind(space) == "transformer":
        return _reverse_batch(space, hashed_generator("data-reverse", int(seed), int(j)))
    if model_kind(space) == "mlp":
        return _teacher_batch(space, hashed_generator("data-teacher", int(seed), int(j)))
    x, y = _digits_split(train=True)
    idx = torch.randperm(len(y), generator=hashed_generator("data-digits", int(seed), int(j)))[: space.batch_size]
    return Batch(x[idx], y[idx])


def heldout_batches(space: SearchSpace, n: int | None = None) -> list[Batch]:
    """``n`` evaluation batches that no training batch draws from (same for every seed).

    Transformer: freshly generated batches (default 8). Digits: the held-out split in order, in batches
    of ``space.batch_size`` (default: all of it; asking for more is a ValueError). A user supernet: its
    held-out source (``naspipe.models.user.user_heldout``).
    """
    if space.model.get("kind") == USER_KIND:
        from naspipe.models.user import user_heldout

        return [Batch(*b) for b in user_heldout(space, n)]
    if model_kind(space) == "transformer":
        return [_reverse_batch(space, hashed_generator("heldout-reverse", i)) for i in range(8 if n is None else n)]
    if model_kind(space) == "mlp":
        return [_teacher_batch(space, hashed_generator("heldout-teacher", i)) for i in range(8 if n is None else n)]
    x, y = _digits_split(train=False)
    bs = space.batch_size
    avail = (len(y) + bs - 1) // bs
    if n is not None and n > avail:
        raise ValueError(f"digits held-out split has {len(y)} samples = {avail} batches of {bs}; asked for {n}")
    return [Batch(x[i * bs:(i + 1) * bs].clone(), y[i * bs:(i + 1) * bs].clone())
            for i in range(avail if n is None else n)]


def _reverse_batch(space: SearchSpace, g: torch.Generator) -> Batch:
    m = space.model
    if m.get("task", "reverse") != "reverse":
        raise ValueError(f"space {space.name!r}: unknown transformer task {m.get('task')!r} (known: reverse)")
    b, t, vocab = space.batch_size, int(m["seq_len"]), int(m["vocab"])
    if vocab < 3:
        raise ValueError(f"space {space.name!r}: vocab must be >= 3 (0 = pad, 1 = BOS), got {vocab}")
    lengths = torch.randint(max(1, t // 4), t + 1, (b,), generator=g)
    tokens = torch.randint(2, vocab, (b, t), generator=g)
    real = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    src = tokens.masked_fill(~real, PAD)
    target = torch.full_like(src, PAD)
    for i, n in enumerate(lengths.tolist()):
        target[i, :n] = src[i, :n].flip(0)
    dec_in = torch.cat([torch.full((b, 1), BOS, dtype=src.dtype), target[:, :-1]], dim=1)
    return Batch(torch.stack([src, dec_in]), target)


@lru_cache(maxsize=2)
def _digits_split(train: bool) -> tuple[Tensor, Tensor]:
    from sklearn.datasets import load_digits

    data, labels = load_digits(return_X_y=True)
    x = torch.tensor(data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    x = (x - DIGITS_MEAN) / DIGITS_STD
    y = torch.tensor(labels, dtype=torch.int64)
    order = torch.randperm(len(y), generator=hashed_generator("digits-split"))
    n_hold = int(len(y) * HELDOUT_FRACTION)
    idx = order[n_hold:] if train else order[:n_hold]
    return x[idx].contiguous(), y[idx].contiguous()


def _teacher_batch(space: SearchSpace, g: torch.Generator) -> Batch:
    n_in, classes = int(space.model["in"]), int(space.model.get("classes", 10))
    x = torch.randn(space.batch_size, n_in, generator=g)
    return Batch(x, (torch.tanh(x) @ _teacher(n_in, classes)).argmax(-1))


@lru_cache(maxsize=4)
def _teacher(n_in: int, classes: int) -> Tensor:
    return torch.randn(n_in, classes, generator=hashed_generator("teacher", n_in, classes))
