"""PipeMare's corrections for asynchronous pipelines (arXiv 1910.05124): T1, T2 and synchronous warm-up.

Why it exists: without weight stashing, stage ``i`` of a 1F1B pipeline computes its gradient from weights
``tau_i = P-1-i`` updates old (better: the lag ``naspipe.corrections.stashing`` measured). Delayed SGD is
only stable for a step ``O(1/tau)`` (``naspipe.corrections.delay``); PipeMare's techniques restore
stability without giving up the bubble-free asynchronous schedule. These are pure per-stage helpers on
torch tensors and a ``torch.optim.Optimizer``; the runtime decides where to call them.

* **T1, learning-rate rescheduling**: stage ``i`` trains with ``lr(k) * t1_multiplier(k, tau_i, K)``,
  ``t1_multiplier = 1 / tau ** p(k)``, ``p(k) = 1 - min(k/K, 1)``: ``1/tau`` at step 0, back to the base
  schedule from step ``K`` on; a stage with ``tau <= 1`` is not scaled. Pair it with a *decaying* base
  schedule: with a constant base rate T1 only postpones divergence to step ``K``.
* **T2, discrepancy correction** *(unconfirmed details: the velocity form, ``g`` and ``D = 0.1`` come from
  secondary reading; all are parameters)*: a velocity per stage ``d(t+1) = g*d(t) + (1-g)*(w(t+1) -
  w(t))``, ``g = D ** (1/(tau_fwd - tau_bkwd))``; the backward runs with ``w(t) - (tau_fwd - tau_bkwd) *
  d(t)``, an estimate of the weights the forward used. Persistent memory: one weight-sized buffer per
  stage (``d``); transient: one copy while a step is observed or while the corrected weights are swapped in.
  No correction when ``tau_fwd <= tau_bkwd``.
* **Synchronous warm-up** *(count unconfirmed; the paper tunes it, 0 on CIFAR10, 10 epochs on IWSLT)*:
  the first steps (or epochs) run synchronously before the switch to asynchrony.

API::

    t1_multiplier(step, tau, anneal_steps) -> float
    t1_learning_rate(base_lr, step, tau, anneal_steps) -> float
    with rescheduled_lr(optimizer, step, tau, anneal_steps) as m: optimizer.step()   # lr *= m, restored after
    one_f_one_b_delays(stages) -> list[int]                                           # [P-1-i]
    discrepancy_gamma(tau_fwd, tau_bkwd=0, decay=0.1) -> float | None
    corr = DiscrepancyCorrector(params, tau_fwd, tau_bkwd=0, decay=0.1)
    with corr.observe_step(): optimizer.step()        # updates the velocity from w(t+1) - w(t)
    corr.corrected(weights=None) -> list[Tensor]      # w - (tau_fwd - tau_bkwd) * d, new tensors
    with corr.corrected_weights(): ...backward...     # the parameters hold the corrected values meanwhile
    SyncWarmup(steps=N) / SyncWarmup.from_epochs(E, steps_per_epoch): .synchronous(step), .async_step(step)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

DEFAULT_DECAY = 0.1  # T2's D (unconfirmed; the paper's sweeps suggest D <= 0.2)


# -- T1 ---------------------------------------------------------------------------------------------
def t1_multiplier(step: int, tau: float, anneal_steps: int) -> float:
    """``1 / tau ** p(step)``, ``p(k) = 1 - min(k/K, 1)``; exactly ``1/tau`` at step 0 and exactly 1 from
    step ``K = anneal_steps`` on, and for ``tau <= 1``. ``K = 0`` means no rescheduling."""
    if step < 0 or anneal_steps < 0:
        raise ValueError("step and anneal_steps must be >= 0")
    if tau <= 1 or anneal_steps == 0 or step >= anneal_steps:
        return 1.0
    p = 1.0 - step / anneal_steps
    return 1.0 / tau ** p


def t1_learning_rate(base_lr: float, step: int, tau: float, anneal_steps: int) -> float:
    """The stage's learning rate at ``step``: ``base_lr * t1_multiplier(step, tau, anneal_steps)``."""
    return base_lr * t1_multiplier(step, tau, anneal_steps)


@contextmanager
def rescheduled_lr(optimizer: torch.optim.Optimizer, step: int, tau: float,
                   anneal_steps: int) -> Iterator[float]:
    """Scale every param group's ``lr`` by the T1 multiplier inside the block; restore the exact previous
    values after it (so a base scheduler keeps owning ``lr``). Yields the multiplier."""
    m = t1_multiplier(step, tau, anneal_steps)
    saved = [g["lr"] for g in optimizer.param_groups]
    if m != 1.0:
        for g in optimizer.param_groups:
            g["lr"] = g["lr"] * m
    try:
        yield m
    finally:
        for g, lr in zip(optimizer.param_groups, saved, strict=True):
            g["lr"] = lr


def one_f_one_b_delays(stages: int) -> list[int]:
    """The forward delays of a 1F1B pipeline without stashing: ``tau_i = P-1-i`` (prefer measured lags)."""
    return [stages - 1 - i for i in range(stages)]


# -- T2 ---------------------------------------------------------------------------------------------
def discrepancy_gamma(tau_fwd: float, tau_bkwd: float = 0.0, decay: float = DEFAULT_DECAY) -> float | None:
    """``g = D ** (1/(tau_fwd - tau_bkwd))``; None when ``tau_fwd <= tau_bkwd`` (nothing to correct)."""
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"decay D must be in [0, 1), got {decay}")
    gap = tau_fwd - tau_bkwd
    return decay ** (1.0 / gap) if gap > 0 else None


class DiscrepancyCorrector:
    """T2 for one stage (or one candidate's parameters): the velocity buffer and the corrected weights.

    Call order per update: ``with corr.observe_step(): optimizer.step()``; for a backward, either run it
    inside ``with corr.corrected_weights():`` (the parameters hold ``w - gap*d`` meanwhile, through
    ``.data``, so autograd's version counters are untouched) or pass ``corr.corrected()`` to a functional
    call. The correction estimates the forward's weights from the current ones, so it belongs where the
    backward reads *newer* weights than its forward did (PipeMare: no stash, ``tau_bkwd = 0``).
    """

    def __init__(self, params: Sequence[Tensor], tau_fwd: float, tau_bkwd: float = 0.0,
                 decay: float = DEFAULT_DECAY):
        self.params = list(params)
        self.tau_fwd, self.tau_bkwd, self.decay = tau_fwd, tau_bkwd, decay
        self.gap = tau_fwd - tau_bkwd
        self.gamma = discrepancy_gamma(tau_fwd, tau_bkwd, decay)
        self.velocity: list[Tensor] = ([torch.zeros_like(p, memory_format=torch.preserve_format)
                                        for p in self.params] if self.gamma is not None else [])

    @property
    def active(self) -> bool:
        return self.gamma is not None

    @contextmanager
    def observe_step(self) -> Iterator[None]:
        """Wrap the optimizer step: ``d = g*d + (1-g)*(w(t+1) - w(t))`` (one transient copy of ``w(t)``)."""
        if self.gamma is None:
            yield
            return
        with torch.no_grad():
            before = [p.detach().clone() for p in self.params]
        yield
        g = self.gamma
        with torch.no_grad():
            for d, p, old in zip(self.velocity, self.params, before, strict=True):
                d.mul_(g).add_(p.detach().sub(old).mul_(1 - g))

    def corrected(self, weights: Sequence[Tensor] | None = None) -> list[Tensor]:
        """``w - (tau_fwd - tau_bkwd) * d`` as new tensors; ``weights`` default to the live parameters."""
        ws = self.params if weights is None else list(weights)
        with torch.no_grad():
            if self.gamma is None:
                return [w.detach().clone() for w in ws]
            return [w.detach() - d * self.gap for w, d in zip(ws, self.velocity, strict=True)]

    @contextmanager
    def corrected_weights(self) -> Iterator[list[Tensor]]:
        """The parameters hold the corrected weights inside the block (written through ``.data``), the exact
        real weights again after it. Yields the parameters."""
        if self.gamma is None:
            yield self.params
            return
        with torch.no_grad():
            real = [p.detach().clone() for p in self.params]
            for p, c in zip(self.params, self.corrected(), strict=True):
                p.data.copy_(c)
        try:
            yield self.params
        finally:
            with torch.no_grad():
                for p, r in zip(self.params, real, strict=True):
                    p.data.copy_(r)


# -- warm-up ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SyncWarmup:
    """The first ``steps`` updates run synchronously (``synchronous(k)`` is True for ``k < steps``).

    ``async_step(k)`` counts updates since asynchrony began; whether T1's annealing counts from the start of
    training or from the switch is not settled by our sources *(unconfirmed)*: pass the one you choose.
    """

    steps: int = 0

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError("warm-up steps must be >= 0")

    @classmethod
    def from_epochs(cls, epochs: int, steps_per_epoch: int) -> SyncWarmup:
        if epochs < 0 or steps_per_epoch < 1:
            raise ValueError("need epochs >= 0 and steps_per_epoch >= 1")
        return cls(epochs * steps_per_epoch)

    def synchronous(self, step: int) -> bool:
        return step < self.steps

    def async_step(self, step: int) -> int:
        return max(0, step - self.steps)
