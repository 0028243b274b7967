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
* ``delayed:D+predict``: the stored ``v_k`` (``k >= 1``) is the PipeOptim prediction ``predict(w, opt, s=D,
  last shared gradient)`` made right after subnet ``k-1``'s update; ``delayed:D+t1=K``: the shared update
  of subnet ``j`` is a separate optimizer step (per-parameter updates, so the bits of the others do not
  change) with ``lr * t1_multiplier(j, D, K)`` (``naspipe.spaces.shared``).

A few-shot space (``naspipe.spaces.few_shot``): right before subnet ``warmup`` trains, every copy of a candidate
takes copy 0's weights and optimizer state (``naspipe.models.warm_start``), the one-shot warm-up's end.

Data-parallel replicas (``replicas=R > 1``): subnet ``j``'s batch is split into ``R`` fixed shards
(``naspipe.models.shards``); one forward and backward per shard, in replica order, and the shards'
gradients (and losses) combined with ``combine`` before the one optimizer step: what ``R`` replicas of
every stage of a pipeline run compute and combine, so the two agree bit for bit.

A stream with a ``report(j, loss)`` method (``OnlineStream``, a run-time generated sequence) is told each
subnet's loss right after that subnet's optimizer step, so later subnets can depend on it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from naspipe.lifecycle import kernels
from naspipe.lifecycle.threads import intra_op_threads
from naspipe.models import StageModel, build_stage, make_batch, make_optimizer
from naspipe.models.shards import combine, combine_present, shard_batch
from naspipe.models.warm_start import warm_start
from naspipe.sequences.sequence import SubnetStream, subnets_digest
from naspipe.spaces.few_shot import few_shot_of
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, replicas_error
from naspipe.supernet.usercode import first_line, user_errors


class ReferenceFailed(RuntimeError):
    """User code (``data``, a candidate, the loss) raised while training subnet ``j`` (one line naming it)."""


@dataclass
class ReferenceResult:
    losses: dict[int, float]
    model: StageModel
    wall_s: float = 0.0
    config: dict[str, object] = field(default_factory=dict)

    def save(self, out: str | Path, *, weights: bool = False, metrics: dict[str, Any] | None = None) -> Path:
        """Write the run directory ``naspipe verify`` compares: ``losses.csv``, ``params.json`` and ``run.json``
        (kind and identity, ``naspipe.runfolder.runs``), with ``weights.pt`` if ``weights`` and ``metrics.json``
        (command,
        wall time, subnets, ``metrics``) if ``metrics`` is given."""
        from naspipe.models.weights import WEIGHTS, save_weights
        from naspipe.runfolder.results import (
            LOSSES,
            METRICS,
            PARAMS,
            param_hashes,
            write_losses,
            write_metrics,
            write_params,
        )

        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        write_losses(d / LOSSES, self.losses)
        write_params(d / PARAMS, param_hashes(self.model.global_named_parameters()))
        if weights:
            save_weights(self.model, d / WEIGHTS)
        if metrics is not None:
            n = len(self.losses)
            write_metrics(d / METRICS, {"command": "reference", "wall_s": self.wall_s, "subnets": n,
                                        "subnets_per_s": n / self.wall_s if self.wall_s > 0 else None, **metrics})
        self._write_run(d, (metrics or {}).get("config") or {})
        return d

    def _write_run(self, d: Path, extra: dict[str, Any]) -> None:
        """``run.json`` (``naspipe.runfolder.runs``): kind reference and the identity ``naspipe verify`` compares."""
        from naspipe.runfolder import runs

        c = {**self.config, **extra}
        runs.write_run(d, "reference", runs.identity(
            space=self.model.space, seed=int(c["seed"]), subnets=len(self.losses), sampler=c.get("sampler"),
            sequence_sha256=c.get("sequence_sha256"), optimizer=str(c["optimizer"]), lr=float(c["lr"]),
            threads=int(c["threads"]), shared_layers=str(c["shared_layers"]), replicas=int(c.get("replicas", 1)),
            replica_exchange="exact" if int(c.get("replicas", 1)) > 1 else None,
            subnets_sha256=c.get("subnets_sha256"), kernels=str(c.get("kernels", runs.NATIVE_KERNELS)),
            machine=c.get("machine"), behaviour_sha256=c.get("behaviour_sha256")))


def _snapshot(params: dict[str, torch.nn.Parameter]) -> dict[str, Tensor]:
    return {n: p.detach().clone() for n, p in params.items()}


def _predicted(params: dict[str, torch.nn.Parameter], opt: torch.optim.Optimizer, s: int) -> dict[str, Tensor]:
    """PipeOptim's prediction of the shared weights ``s`` updates ahead, from the state after this update."""
    from naspipe.corrections.pipeoptim import predict

    names = list(params)
    grads = [params[n].grad for n in names]
    return dict(zip(names, predict([params[n] for n in names], opt, s, grads), strict=True))


def _t1_steps(opt: torch.optim.Optimizer, model: StageModel, fixed: dict[str, torch.nn.Parameter], j: int,
              delay: int, anneal: int) -> None:
    """The candidates' step, then the shared layers' step at the T1-rescaled rate (``tau = D``)."""
    from naspipe.corrections.pipemare import rescheduled_lr

    shared_ids = {id(p) for p in fixed.values()}
    held = {n: p.grad for n, p in fixed.items()}
    for p in fixed.values():
        p.grad = None
    opt.step()
    others = [p for p in model.parameters() if id(p) not in shared_ids and p.grad is not None]
    saved = [p.grad for p in others]
    for p in others:
        p.grad = None
    for n, p in fixed.items():
        p.grad = held[n]
    with rescheduled_lr(opt, j, delay, anneal):
        opt.step()
    for p, g in zip(others, saved, strict=True):
        p.grad = g


def _sharded_backward(model: StageModel, subnet: Any, x: Tensor, target: Tensor, replicas: int,
                      fixed: dict[str, torch.nn.Parameter], version: dict[str, Tensor] | None) -> Tensor:
    """Forward and backward of each of the ``replicas`` shards, in order; leaves the combined gradients on
    ``.grad`` (the fixed blocks' too when ``version`` is trained) and returns the combined loss.

    Buffers a forward changes (spectral norm's power iteration, batch-norm statistics) are each replica's
    own in a run (replica ``r`` only ever sees shard ``r``), so shard ``r`` runs on replica ``r``'s buffers,
    kept on the model between subnets; the model is left holding replica 0's (the run's weights are its)."""
    params = [p for p in model.parameters() if p.requires_grad and not any(p is f for f in fixed.values())]
    grads: list[list[Tensor | None]] = [[] for _ in params]
    fixed_grads: dict[str, list[Tensor | None]] = {name: [] for name in fixed} if version is not None else {}
    losses = []
    bufs = list(model.buffers())
    states = getattr(model, "_replica_buffers", None)
    if states is None or len(states) != replicas:
        states = [[b.detach().clone() for b in bufs] for _ in range(replicas)]
        model._replica_buffers = states  # type: ignore[attr-defined]
    for r in range(replicas):
        with torch.no_grad():
            for b, keep in zip(bufs, states[r], strict=True):
                b.copy_(keep)
        xs, ts = shard_batch(model.space, x, target, r, replicas)
        if version is not None:
            read = {name: t.clone().requires_grad_(True) for name, t in version.items()}
            out = model(xs, subnet, fixed_params=read)
        else:
            out = model(xs, subnet)
        loss = model.loss(out, ts)
        if loss.requires_grad:  # a subnet may train nothing (e.g. parameter-free candidates, frozen fixed blocks)
            loss.backward()
        losses.append(loss.detach())
        for i, p in enumerate(params):
            grads[i].append(p.grad)
            p.grad = None
        for name in fixed_grads:
            fixed_grads[name].append(read[name].grad)
        states[r] = [b.detach().clone() for b in bufs]
    with torch.no_grad():
        for b, keep in zip(bufs, states[0], strict=True):
            b.copy_(keep)
    for p, gs in zip(params, grads, strict=True):
        p.grad = combine_present(gs, p)
    for name, gs in fixed_grads.items():
        fixed[name].grad = combine_present(gs, fixed[name])
    return combine(losses)


def train_reference(space: SearchSpace, stream: SubnetStream, seed: int, shared: SharedLayers,
                    optimizer: str = "sgd", lr: float | None = None, progress: bool = False,
                    threads: int = 1, replicas: int = 1,
                    on_subnet_done: Callable[[int, StageModel], None] | None = None) -> ReferenceResult:
    """Train ``stream`` (``len(stream)`` subnets) sequentially; ``losses[j]`` is subnet ``j``'s loss.

    ``replicas``: split each batch into that many shards and combine their gradients as ``R`` data-parallel
    replicas do (the batch size must be divisible by it).

    ``on_subnet_done(done, model)``: called after each subnet's update (and the stream's ``report``) with the
    number of subnets trained so far and the model. Nothing in the loop depends on ``len(stream)`` (no schedule:
    subnet ``j`` trains on batch ``j`` of the seed, at the one learning rate), so where the stream's first subnets
    do not depend on its length either (the seeded samplers: uniform, fair, spread) the model it is given at
    ``done`` is, bit for bit, what a run of ``done`` subnets ends with: one long run yields every shorter length
    (``benchmarks/trust_curve.py``). It must not change the model (score a copy where the evaluation could touch a
    buffer); its time counts in ``wall_s``. It computes on ``threads`` intra-op threads and gives the caller's
    count back."""
    if (why := replicas_error(space.batch_size, replicas)) is not None:
        raise ValueError(why)
    with intra_op_threads(threads):  # (a notebook's kernel keeps its own count after a reference)
        return _trained(space, stream, seed, shared, optimizer, lr, progress, replicas, on_subnet_done)


def _trained(space: SearchSpace, stream: SubnetStream, seed: int, shared: SharedLayers, optimizer: str,
             lr: float | None, progress: bool, replicas: int,
             on_subnet_done: Callable[[int, StageModel], None] | None) -> ReferenceResult:
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
    split = few_shot_of(space)  # a few-shot space: the warm start before subnet ``split.warmup``
    start = time.perf_counter()
    j, in_hook = 0, False
    try:
        for j in range(n):
            if split is not None and j == split.warmup:
                warm_start(model, opt)
            subnet = space.validate_subnet(stream[j])
            x, target = make_batch(space, seed, j)
            opt.zero_grad(set_to_none=True)
            if replicas > 1:
                loss = _sharded_backward(model, subnet, x, target, replicas, fixed,
                                         versions[max(0, j - delay)] if trains_shared else None)
            elif trains_shared:
                read = {name: t.clone().requires_grad_(True) for name, t in versions[max(0, j - delay)].items()}
                out = model(x, subnet, fixed_params=read)
            else:
                out = model(x, subnet)
            if replicas == 1:
                loss = model.loss(out, target)
                if loss.requires_grad:  # a subnet without a trainable parameter has nothing to differentiate
                    loss.backward()
            if trains_shared and replicas == 1:
                for name, p in fixed.items():
                    p.grad = read[name].grad
            # only the candidates this subnet used (and, when trained, the fixed blocks) carry a gradient
            if trains_shared and shared.t1:
                _t1_steps(opt, model, fixed, j, delay, shared.t1)
            else:
                opt.step()
            losses[j] = loss.item()
            if report is not None:
                report(j, losses[j])
            if trains_shared:
                versions[j + 1] = _predicted(fixed, opt, delay) if shared.predict else _snapshot(fixed)
                versions.pop(j + 1 - delay - 1, None)  # subnet j+1 and later read v_{>= j+1-D}
            if on_subnet_done is not None:
                in_hook = True  # (its failure is the caller's, raised as it is: not the user code's)
                on_subnet_done(j + 1, model)
                in_hook = False
            if bar is not None:
                bar.update(1)
                if j % 20 == 0:
                    bar.set_postfix(loss=f"{losses[j]:.3f}")
    except user_errors() as e:  # noqa: BLE001 - user code (data, a candidate, the loss) failed partway: one line
        if bar is not None:
            bar.close()  # (the error goes on a line of its own)
        if in_hook:
            raise
        raise ReferenceFailed(f"subnet {j} of {n}: {type(e).__name__}: {first_line(e)}") from e
    except BaseException:  # Ctrl-C, SIGTERM: the bar ends before the command's one line is printed
        if bar is not None:
            bar.close()
        raise
    wall = time.perf_counter() - start
    if bar is not None:
        bar.close()
    digest = getattr(stream, "digest", None)
    config = {"space": space.name, "subnets": n, "seed": int(seed), "shared_layers": str(shared),
              "optimizer": optimizer, "lr": opt.param_groups[0]["lr"], "threads": torch.get_num_threads(),
              "torch": torch.__version__, "replicas": replicas,
              "sequence_sha256": digest() if digest is not None else None,
              "subnets_sha256": subnets_digest([list(stream[j]) for j in range(n)]),
              # the CPU kernels that computed it, as they are in force here (naspipe.lifecycle.kernels)
              "kernels": kernels.in_force() or "unknown",
              "machine": {"cpu": kernels.cpu_name(), "cpu_capability": kernels.capability()},
              **({"few_shot": split.describe()} if split is not None else {})}
    return ReferenceResult(losses, model, wall, config)

