"""A least-squares model trained by a simulated asynchronous 1F1B pipeline: a bench for the corrections.

Why it exists: the corrections must be checked on a pipeline whose delays come from an executed schedule,
but without processes. This is the smallest such pipeline; every number in it can be checked by hand.

The model: ``y = X w`` with ``w = (w_0, ..., w_{P-1})``, block ``w_i`` (``width`` numbers) on stage ``i``,
``X`` (``n x P*width``, Gaussian, seeded) scaled so the largest eigenvalue of ``X^T X / n`` is 1, and a
realisable target ``y = X w*`` (the optimum has loss 0). Every micro-batch is the whole data set, so the
only thing that differs from plain gradient descent is *which weights* each gradient was computed from.

The pipeline: the 1F1B schedule of ``stashing.pipeline_schedule`` (backward first, at most ``P - i``
micro-batches in flight on stage ``i``), no weight stashing (``VersionStore`` policy ``async``):

* ``F(j, i)`` adds ``X_i w_i`` to micro-batch ``j``'s running activation, with the weights stage ``i``
  holds at that moment (or PipeOptim's prediction of them, when ``predict_gaps`` is set); the last stage forms
  the residual ``r_j = a_j - y``;
* ``B(j, i)`` computes ``g = X_i^T r_j / n`` (a linear model's backward reads no weights, so forward-
  backward discrepancy plays no part here) and takes one optimizer step on ``w_i``.

So stage ``i``'s gradient comes from weights ``P-1-i`` updates old, as the version stores measure.

Rates: stage ``i``'s ``k``-th update uses ``lr * 0.5 ** (k / half_life)`` (``half_life=inf``: constant),
times ``t1_multiplier(k, P-1-i, anneal)`` when ``anneal`` is given (PipeMare T1). The loss
``0.5 * mean((X w - y)**2)`` at the live weights is recorded at the start and after every update of stage 0
(by then every stage has applied that micro-batch); training stops once it is not finite or above 1e30.

API::

    run = train_toy_pipeline(stages, steps, lr, *, optimizer="sgd", half_life=inf, anneal=None,
                             predict_gaps=None, seed=0, n=64, width=4) -> ToyRun
    pipeoptim_gaps(stages, offset=0) -> [version_gap(i, stages, offset) for each stage]
    run.losses, run.diverged, run.weights, run.stores
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from naspipe.corrections.pipemare import rescheduled_lr
from naspipe.corrections.pipeoptim import predicted_weights, remember_grads, version_gap
from naspipe.corrections.stashing import VersionStore, pipeline_schedule

BLOW_UP = 1e30


@dataclass
class ToyRun:
    losses: list[float]
    weights: list[Tensor]
    stores: list[VersionStore]

    @property
    def diverged(self) -> bool:
        return not self.losses[-1] <= BLOW_UP


def train_toy_pipeline(stages: int, steps: int, lr: float, *, optimizer: str = "sgd",
                       half_life: float = math.inf, anneal: int | None = None,
                       predict_gaps: Sequence[int] | None = None, seed: int = 0, n: int = 64,
                       width: int = 4) -> ToyRun:
    """Train the model above; ``predict_gaps`` (one ``s`` per stage) runs every forward of stage ``i``
    under PipeOptim's ``predicted_weights`` with ``s = predict_gaps[i]``."""
    if predict_gaps is not None and len(predict_gaps) != stages:
        raise ValueError("predict_gaps needs one version gap per stage")
    from naspipe.models.optim import make_optimizer

    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, stages * width, generator=gen, dtype=torch.float64)
    X /= torch.linalg.eigvalsh(X.T @ X / n)[-1].sqrt()
    y = X @ torch.randn(stages * width, generator=gen, dtype=torch.float64)
    blocks = [X[:, i * width:(i + 1) * width] for i in range(stages)]
    ws = [torch.nn.Parameter(torch.zeros(width, dtype=torch.float64)) for _ in range(stages)]
    opts = [make_optimizer([w], optimizer, lr) for w in ws]
    stores = [VersionStore([w], "async", micro_batches=steps) for w in ws]
    last_grads: list[list[Tensor | None]] = [[None] for _ in range(stages)]
    act: dict[int, Tensor] = {}
    res: dict[int, Tensor] = {}

    def loss() -> float:
        with torch.no_grad():
            return 0.5 * float(((X @ torch.cat([w.detach() for w in ws]) - y) ** 2).mean())

    losses = [loss()]
    for task in pipeline_schedule(stages, steps, "1f1b"):
        i, j = task.stage, task.micro_batch
        if task.kind == "F":
            (w,) = stores[i].forward(j)
            if predict_gaps is None:
                out = blocks[i] @ w.detach()
            else:
                with predicted_weights([w], opts[i], predict_gaps[i], last_grads[i]):
                    out = blocks[i] @ w.detach()
            act[j] = out if i == 0 else act.pop(j) + out
            if i == stages - 1:
                res[j] = act.pop(j) - y
            continue
        stores[i].backward(j)
        k = stores[i].updates
        opt = opts[i]
        opt.param_groups[0]["lr"] = lr * 0.5 ** (k / half_life)
        ws[i].grad = blocks[i].T @ (res.pop(j) if i == 0 else res[j]) / n
        with rescheduled_lr(opt, k, stages - 1 - i, anneal or 0):
            stores[i].update([j], step=opt.step)
        last_grads[i] = remember_grads([ws[i]])
        ws[i].grad = None
        if i == 0:
            losses.append(loss())
            if not losses[-1] <= BLOW_UP:
                break
    return ToyRun(losses, [w.detach().clone() for w in ws], stores)


def pipeoptim_gaps(stages: int, offset: int = 0) -> list[int]:
    """PipeOptim's version gap per stage: ``version_gap(i, stages, offset)``."""
    return [version_gap(i, stages, offset) for i in range(stages)]
