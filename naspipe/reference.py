"""The independent sequential trainer: the oracle every parallel run must match bit for bit.

One process, one intra-op thread, a plain loop: subnet ``j`` is trained on batch ``j`` with one forward,
one backward and one optimizer step on exactly the parameters it used. It uses ``naspipe.models`` only
(never the scheduler or the runtime), so a bug there cannot hide in both sides of a comparison.

It also *defines* the shared-layer (fixed-block) semantics:

* ``frozen``: fixed-block parameters never change (requires_grad False; gradients still flow through
  them to earlier blocks);
* ``delayed:D`` (``serial`` = ``delayed:0``): subnet ``j`` runs the fixed blocks with version
  ``v_max(0, j-D)``, where ``v_k`` holds the weights after the updates of subnets ``< k``. The gradient
  computed at that version is applied to the *current* weights, together with the candidate update
  (delayed SGD). The loop keeps the last ``D + 1`` versions as detached clones.

A stream with a ``report(j, loss)`` method (``OnlineStream``, a run-time generated sequence) is told each
subnet's loss right after that subnet's optimizer step, so later subnets can depend on it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from naspipe.models import StageModel, build_stage, make_batch, make_optimizer
from naspipe.sched.shared import SharedLayers
from naspipe.sequence import SubnetStream
from naspipe.space import SearchSpace


@dataclass
class ReferenceResult:
    losses: dict[int, float]
    model: StageModel
    wall_s: float = 0.0
    config: dict[str, object] = field(default_factory=dict)


def _snapshot(params: dict[str, torch.nn.Parameter]) -> dict[str, Tensor]:
    return {n: p.detach().clone() for n, p in params.items()}


def train_reference(space: SearchSpace, stream: SubnetStream, seed: int, shared: SharedLayers,
                    optimizer: str = "sgd", lr: float | None = None, progress: bool = False,
                    threads: int = 1) -> ReferenceResult:
    """Train ``stream`` (``len(stream)`` subnets) sequentially; ``losses[j]`` is subnet ``j``'s loss."""
    torch.set_num_threads(threads)
    model = build_stage(space, range(space.num_blocks), seed, shared)
    opt = make_optimizer(model.parameters(), optimizer, lr)
    fixed = model.fixed_named_parameters()
    trains_shared = shared.mode != "frozen"
    delay = shared.delay if trains_shared else 0
    versions: dict[int, dict[str, Tensor]] = {0: _snapshot(fixed)} if trains_shared else {}
    losses: dict[int, float] = {}
    n = len(stream)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=n, desc=f"reference {space.name}", unit="subnet", file=sys.stderr)
    report = getattr(stream, "report", None)
    start = time.perf_counter()
    for j in range(n):
        subnet = space.validate_subnet(stream[j])
        x, target = make_batch(space, seed, j)
        opt.zero_grad(set_to_none=True)
        if trains_shared:
            read = {name: t.clone().requires_grad_(True) for name, t in versions[max(0, j - delay)].items()}
            out = model(x, subnet, fixed_params=read)
        else:
            out = model(x, subnet)
        loss = model.loss(out, target)
        loss.backward()
        if trains_shared:
            for name, p in fixed.items():
                p.grad = read[name].grad
        # only the candidates this subnet used (and, when trained, the fixed blocks) carry a gradient
        opt.step()
        losses[j] = loss.item()
        if report is not None:
            report(j, losses[j])
        if trains_shared:
            versions[j + 1] = _snapshot(fixed)
            versions.pop(j + 1 - delay - 1, None)  # subnet j+1 and later read v_{>= j+1-D}
        if bar is not None:
            bar.update(1)
            if j % 20 == 0:
                bar.set_postfix(loss=f"{losses[j]:.3f}")
    wall = time.perf_counter() - start
    if bar is not None:
        bar.close()
    config = {"space": space.name, "subnets": n, "seed": int(seed), "shared_layers": str(shared),
              "optimizer": optimizer, "lr": opt.param_groups[0]["lr"], "threads": threads,
              "torch": torch.__version__}
    return ReferenceResult(losses, model, wall, config)
