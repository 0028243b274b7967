"""Optimizers with per-parameter state and bit-stable single-tensor kernels.

Every optimizer is built with ``foreach=False``: the per-tensor loop computes each update the same way
whatever the set of tensors stepped together, so a stage stepping only its own candidates gets the same
bits as the whole model. torch optimizers skip parameters whose ``.grad`` is None (no step count, no
momentum decay), so an update by subnet ``j`` touches only the candidates ``j`` used: call
``keep_grads_of`` (or ``zero_grad(set_to_none=True)`` before the backward) before ``step()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from naspipe.inputs.optim_names import DEFAULT_LR, OPTIMIZERS, lr_or_default

__all__ = ["DEFAULT_LR", "OPTIMIZERS", "keep_grads_of", "make_optimizer"]


def make_optimizer(params: Iterable[nn.Parameter], name: str, lr: float | None = None,
                   **kw: Any) -> torch.optim.Optimizer:
    """``name`` in OPTIMIZERS; ``lr`` None means ``DEFAULT_LR[name]``; ``kw`` goes to the torch class."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    lr = float(lr_or_default(name, lr))
    if not lr > 0 or lr == float("inf"):
        raise ValueError(f"learning rate must be a finite number > 0, got {lr}")
    params = list(params)
    kw = {"foreach": False, **kw}
    if kw["foreach"]:
        raise ValueError("naspipe optimizers run with foreach=False (bit-stable per-tensor updates)")
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, **kw)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, **{"momentum": 0.9, **kw})
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, **kw)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, **kw)
    return torch.optim.RMSprop(params, lr=lr, **kw)


def keep_grads_of(params: Iterable[nn.Parameter], used: Iterable[nn.Parameter]) -> None:
    """Set ``.grad = None`` on every parameter in ``params`` that is not in ``used``."""
    keep = {id(p) for p in used}
    for p in params:
        if id(p) not in keep:
            p.grad = None
