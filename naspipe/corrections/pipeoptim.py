"""PipeOptim's optimizer-dependent weight prediction for asynchronous 1F1B pipelines.

Why it exists: in 1F1B without stashing, a micro-batch's forward on stage ``i`` reads weights that ``s``
updates later will have moved on by the time its backward runs. PipeOptim replaces them, for the forward
only, by a prediction of that later version, built from the optimizer's own update rule:

    W_hat = W - lr * s * dW

``s`` is the version gap (1F1B: ``s = P-1-i``, 0 on the last stage; the authors' code uses ``P - i``, one
more: ``version_gap(stage, stages, offset=1)``). ``dW`` estimates the optimizer's next step direction
from the torch optimizer's ``state[p]``:

* SGD: ``grad``;  SGD + momentum: ``mu*buf + (1-dampening)*grad``;  nesterov: ``grad + mu*(mu*buf +
  (1-dampening)*grad)``. For the SGD family this is exactly torch's next step if the next gradient equals
  the last one (nesterov included: the buffer advanced by that gradient, then torch's nesterov direction).
* Adam / AdamW: ``m_hat / (sqrt(v_hat) + eps)``, ``m_hat = exp_avg / (1 - beta1**step)``, ``v_hat =
  exp_avg_sq / (1 - beta2**step)`` (``max_exp_avg_sq`` with amsgrad) at the current ``step``; weight decay
  is left out of the prediction.
* RMSprop: ``grad / (sqrt(square_avg) + eps)`` with the current ``square_avg`` (the authors' formula;
  torch's next step would first fold the new gradient into it); centered: ``square_avg - grad_avg**2``
  under the root; with momentum: ``mom*buf + grad/avg``.

``grad`` is the last gradient the optimizer applied. torch optimizers do not keep it, and the runtime
clears ``.grad`` after each step, so keep it with ``remember_grads(params)`` before clearing and pass it as
``grads``; ``grads=None`` reads ``p.grad``; a missing gradient counts as zero. A parameter the optimizer has
never stepped (no state, no gradient) is not moved. ``maximize=True`` flips the sign. Weight decay is
never part of the prediction (the authors' choice for Adam; for SGD and RMSprop too, for consistency).

API::

    version_gap(stage, stages, offset=0) -> int                       # P-1-i+offset, >= 0
    needs_last_grad(optimizer) -> bool                                # SGD family and RMSprop read grad
    remember_grads(params) -> list[Tensor | None]                     # clones of p.grad
    prediction_direction(p, optimizer, grad=None) -> Tensor | None    # dW (None: no information, no move)
    predict(params, optimizer, s, grads=None) -> list[Tensor]         # W_hat as new tensors
    with predicted_weights(params, optimizer, s, grads=None): ...forward...

Measured on ``naspipe.corrections.toy`` (4 stages, least squares, constant rate): with SGD + momentum
(lr 0.08) asynchrony diverges and prediction converges; with *plain* SGD the prediction extrapolates a stale
gradient and lowers the stable step (lr 0.5: asynchrony converges, prediction diverges at update ~355).

``predicted_weights`` writes ``W_hat`` into the parameters through ``.data`` (autograd's version counters
are untouched) and restores the exact real weights from one cached copy when the block ends, so the
backward, reading the parameters, sees the real weights, and the update applies to them. With ``s = 0``
the parameters keep their exact values (pipeoptim with ``s = 0`` is no-stash asynchrony).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor

_SGD_FAMILY = (torch.optim.SGD,)
_ADAM_FAMILY = (torch.optim.Adam, torch.optim.AdamW)


def version_gap(stage: int, stages: int, offset: int = 0) -> int:
    """Updates between a forward on ``stage`` and its backward in 1F1B: ``P-1-stage`` (+ ``offset``)."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage {stage} not in [0, {stages})")
    return max(0, stages - 1 - stage + offset)


def needs_last_grad(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the prediction reads the last gradient (SGD with or without momentum, RMSprop)."""
    return not isinstance(optimizer, _ADAM_FAMILY)


def remember_grads(params: Sequence[Tensor]) -> list[Tensor | None]:
    """Detached clones of each parameter's ``.grad`` (None stays None), to pass as ``grads`` later."""
    return [None if p.grad is None else p.grad.detach().clone() for p in params]


def _groups(optimizer: torch.optim.Optimizer) -> dict[int, dict]:
    """Each managed parameter's group, by ``id`` (one pass, not one scan per parameter)."""
    return {id(q): g for g in optimizer.param_groups for q in g["params"]}


def _group_of(optimizer: torch.optim.Optimizer, p: Tensor, groups: dict[int, dict] | None = None) -> dict:
    g = (groups if groups is not None else _groups(optimizer)).get(id(p))
    if g is None:
        raise ValueError("parameter is not managed by this optimizer")
    return g


def _scalar(x: float | Tensor) -> float:
    return float(x.item()) if isinstance(x, Tensor) else float(x)


def prediction_direction(p: Tensor, optimizer: torch.optim.Optimizer,
                         grad: Tensor | None = None, group: dict | None = None) -> Tensor | None:
    """``dW`` for one parameter (see the module docstring); None when there is nothing to predict from.
    ``group``: the parameter's param group, if the caller has it."""
    if group is None:
        group = _group_of(optimizer, p)
    state = optimizer.state.get(p, {})
    sign = -1.0 if group.get("maximize", False) else 1.0
    with torch.no_grad():
        if isinstance(optimizer, _ADAM_FAMILY):
            step = _scalar(state["step"]) if "step" in state else 0.0
            if step == 0:
                return None
            beta1, beta2 = group["betas"]
            beta1, beta2 = _scalar(beta1), _scalar(beta2)
            v = state["max_exp_avg_sq"] if group.get("amsgrad", False) else state["exp_avg_sq"]
            m_hat = state["exp_avg"] / (1 - beta1 ** step)
            v_hat = v / (1 - beta2 ** step)
            return (m_hat / (v_hat.sqrt() + group["eps"])).mul_(sign)
        if isinstance(optimizer, torch.optim.RMSprop):
            if "square_avg" not in state:
                return None
            g = torch.zeros_like(p) if grad is None else grad.detach()
            sq = state["square_avg"]
            if group.get("centered", False):
                sq = sq - state["grad_avg"] ** 2
            direction = g / (sq.sqrt() + group["eps"])
            if group.get("momentum", 0) > 0 and "momentum_buffer" in state:
                direction = state["momentum_buffer"] * group["momentum"] + direction
            return direction.mul_(sign)
        if isinstance(optimizer, _SGD_FAMILY):
            mu = group.get("momentum", 0)
            buf = state.get("momentum_buffer")
            if grad is None and (mu == 0 or buf is None):
                return None
            g = torch.zeros_like(p) if grad is None else grad.detach()
            if mu == 0 or buf is None:
                return g.clone().mul_(sign)
            damp = group.get("dampening", 0)
            advanced = buf * mu + g * (1 - damp)
            if group.get("nesterov", False):
                return (g + advanced * mu).mul_(sign)
            return advanced.mul_(sign)
    raise TypeError(f"no weight prediction for {type(optimizer).__name__}; "
                    "supported: SGD (momentum, nesterov), Adam, AdamW, RMSprop")


def _moves(params: list[Tensor], optimizer: torch.optim.Optimizer, s: int,
           grads: Sequence[Tensor | None] | None) -> Iterator[tuple[Tensor, Tensor | None]]:
    """``(p, lr * s * dW)`` per parameter (None: not moved)."""
    if s < 0:
        raise ValueError(f"version gap s must be >= 0, got {s}")
    gs = [p.grad for p in params] if grads is None else list(grads)
    if len(gs) != len(params):
        raise ValueError("grads must match params one to one")
    groups = _groups(optimizer)
    for p, g in zip(params, gs, strict=True):
        group = _group_of(optimizer, p, groups)
        d = prediction_direction(p, optimizer, g, group) if s != 0 else None
        yield p, None if d is None else d.mul_(_scalar(group["lr"]) * s)


def predict(params: Sequence[Tensor], optimizer: torch.optim.Optimizer, s: int,
            grads: Sequence[Tensor | None] | None = None) -> list[Tensor]:
    """``W - lr * s * dW`` for every parameter, as new tensors (the parameters are not touched)."""
    out = []
    with torch.no_grad():
        for p, move in _moves(list(params), optimizer, s, grads):
            w = p.detach().clone()
            out.append(w if move is None else w.sub_(move))
    return out


@contextmanager
def predicted_weights(params: Sequence[Tensor], optimizer: torch.optim.Optimizer, s: int,
                      grads: Sequence[Tensor | None] | None = None) -> Iterator[list[Tensor]]:
    """Inside the block the parameters hold ``W_hat`` (written through ``.data``); afterwards exactly ``W``
    again, from one cached copy. Yields the parameters."""
    params = list(params)
    real: list[Tensor] = []
    try:
        with torch.no_grad():
            for p, move in _moves(params, optimizer, s, grads):
                real.append(p.detach().clone())
                if move is not None:
                    p.data.sub_(move)
        yield params
    finally:
        with torch.no_grad():
            for p, r in zip(params, real, strict=False):  # only those already moved
                p.data.copy_(r)
