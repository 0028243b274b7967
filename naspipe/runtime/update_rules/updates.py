"""When and how a subnet's gradients become weight updates on one stage: the policy-specific part.

Why it exists: the executor runs forwards and backwards the same way for every policy; what differs is
which weights a forward reads and when the gradients are applied:

* ``ExactUpdates`` (``sequential``, ``csp``, ``csp-bw``): the forward reads the live candidate weights.
  The causal rule guarantees nobody writes a candidate between ``F(j)`` and ``j``'s write, so no copies
  are needed. ``j``'s gradients are applied at its write task (``B``, or ``W`` with a split backward):
  one optimizer step on exactly the candidates ``j`` used. Shared fixed weights follow the shared-layer
  policy through ``FixedVersions`` (frozen: never trained).
* ``GroupUpdates`` (``bsp``, GPipe): gradients of a group of ``M`` subnets are accumulated, summed in
  subnet order (so the sum does not depend on timing), divided by ``M`` and applied in one step per
  touched candidate when the group's last backward ends on this stage. Trainable fixed weights
  (shared layers ``serial``) are accumulated the same way: every forward of a group reads the same
  weights, GPipe's own synchronisation (``delayed:D`` is refused for bsp and asp).
* ``StashedUpdates`` (``asp``, PipeDream 1F1B with weight stashing): causality is ignored, so a later
  subnet may update weights an in-flight forward saved for its backward. The forward therefore runs on a
  snapshot copy of the weights it uses (``torch.func.functional_call``); the backward computes gradients
  w.r.t. that snapshot and applies them to the live weights. This is PipeDream's weight stashing: the
  gradient is exact for the weights the forward saw, but it is applied to newer weights. Trainable fixed
  weights (``serial``) are stashed and updated like candidates.

* ``pipedream``, ``2bw``, ``pipemare``, ``pipeoptim``: ``naspipe.runtime.update_rules.async_rules``.
* ``delayed:D+predict`` / ``+t1=K`` shared layers: ``CorrectedFixedVersions`` (PipeOptim prediction stored
  when a version is snapshotted; PipeMare T1 on the shared step), as ``naspipe.oracle.sequential_trainer`` does.

Optimizers (``OptimizerBank``): per-parameter state from ``naspipe.models.make_optimizer``
(``foreach=False``); an update touches only the candidates used, so per-candidate state (momentum, Adam
moments, step counts) advances only when that candidate trains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from naspipe.models import StageModel, make_optimizer
from naspipe.runtime.update_rules.versions import FixedVersions

Key = tuple[int, int]  # (block, choice)


class OptimizerBank:
    """The stage's optimizer and the trainable parameters of each candidate and of the fixed blocks.

    One torch optimizer holds every trainable parameter of the stage; a step assigns gradients to exactly
    the parameters to update (all others hold None, which torch optimizers skip: no step count, no
    momentum decay), steps once and clears them. With ``foreach=False`` every parameter's update is computed
    on its own, so this equals one optimizer per candidate bit for bit, at the cost of one ``step()`` call
    per update instead of one per candidate (torch's per-call overhead dominates small candidates).
    """

    def __init__(self, model: StageModel, name: str, lr: float):
        space = model.space
        self.choice_blocks = [b for b in model.blocks if not space.blocks[b].fixed]
        self._params: dict[Key, list[nn.Parameter]] = {}
        for b in self.choice_blocks:
            for c in range(space.blocks[b].k):
                ps = [p for p in model.candidate_parameters(b, c) if p.requires_grad]
                if ps:
                    self._params[(b, c)] = ps
        self.fixed = {n: p for n, p in model.fixed_named_parameters().items() if p.requires_grad}
        everything = [p for ps in self._params.values() for p in ps] + list(self.fixed.values())
        self._opt = make_optimizer(everything, name, lr) if everything else None
        self.steps = 0

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The stage's one torch optimizer (None when the stage has nothing to train)."""
        return self._opt

    def keys(self) -> list[Key]:
        """The candidates of this stage that own trainable weights."""
        return list(self._params)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's ``state_dict`` and the step count (for checkpoints)."""
        return {"optimizer": self._opt.state_dict() if self._opt is not None else None, "steps": int(self.steps)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if (state["optimizer"] is None) != (self._opt is None):
            raise ValueError("optimizer state does not fit the stage")
        if self._opt is not None:
            self._opt.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])

    def used(self, subnet: Sequence[int]) -> list[Key]:
        """The candidates ``subnet`` uses on this stage that own trainable weights."""
        return [(b, subnet[b]) for b in self.choice_blocks if (b, subnet[b]) in self._params]

    def params(self, key: Key) -> list[nn.Parameter]:
        return self._params[key]

    def _step(self, pairs: Sequence[tuple[nn.Parameter, Tensor | None]]) -> None:
        if self._opt is None or not pairs:
            return
        for p, g in pairs:
            p.grad = g
        self._opt.step()
        for p, _ in pairs:
            p.grad = None

    def step(self, keys: Sequence[Key], grads: Mapping[nn.Parameter, Tensor | None]) -> None:
        """One update of the candidates ``keys`` with ``grads`` (param -> gradient; absent = None)."""
        self._step([(p, grads.get(p)) for k in keys for p in self._params[k]])
        self.steps += 1

    def step_fixed(self, grads: Mapping[str, Tensor | None]) -> None:
        """One update of the fixed parameters with ``grads`` (global name -> gradient)."""
        self._step([(p, grads.get(n)) for n, p in self.fixed.items()])


class RuleState:
    """The checkpoint half of the update-rule protocol (``naspipe.runtime.update_rules.rules.UpdateRule``), for a
    rule whose only state between subnets is the gradients it holds: ``pending`` counts them (zero at a checkpoint
    fence), ``state_dict`` is empty. Rules with more state (fixed-layer versions, 2bw's weight versions, PipeMare's
    velocities) extend both."""

    def pending(self) -> int:
        return len(getattr(self, "_grads", {})) + len(getattr(self, "_fixed_grads", {}))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state, got {sorted(state)}")


@dataclass
class ForwardContext:
    """What a forward leaves for the backward of the same subnet (besides its tensors)."""

    keys: list[Key]
    leaves: dict[str, Tensor] | None = None  # fixed-version leaves (exact) or snapshot by qualified name (asp)


def take_grads(params: Sequence[nn.Parameter]) -> dict[nn.Parameter, Tensor | None]:
    """Move ``.grad`` off ``params`` into a dict (the parameters are left with None)."""
    out = {}
    for p in params:
        out[p] = p.grad
        p.grad = None
    return out


class CorrectedFixedVersions(FixedVersions):
    """``FixedVersions`` with the ``delayed:D`` corrections (``naspipe.spaces.shared``): ``+predict`` stores
    ``predict(v_k, s = D)`` computed when ``v_k`` is snapshotted (optimizer state and last shared gradient of
    that moment), ``+t1=K`` scales the shared step of subnet ``j`` by ``t1_multiplier(j, D, K)``."""

    def __init__(self, bank: OptimizerBank, delay: int, n: int, predict: bool, t1: int):
        self.bank, self.predict, self.t1 = bank, predict, t1
        self._last: dict[str, Tensor | None] = {}
        super().__init__(bank.fixed, delay, n, self._step)

    def _step(self, grads: Mapping[str, Tensor | None]) -> None:
        from naspipe.corrections.pipemare import rescheduled_lr

        opt = self.bank.optimizer
        if self.t1 and opt is not None:
            with rescheduled_lr(opt, self.next, self.delay, self.t1):
                self.bank.step_fixed(grads)
        else:
            self.bank.step_fixed(grads)
        self._last = dict(grads)

    def _snapshot(self, k: int) -> None:
        super()._snapshot(k)
        if k == 0 or not getattr(self, "predict", False) or k not in self._versions or self.bank.optimizer is None:
            return
        from naspipe.corrections.pipeoptim import predict

        names = list(self.live)
        last = [self._last.get(n) for n in names]
        moved = predict([self.live[n] for n in names], self.bank.optimizer, self.delay, last)
        self._versions[k] = dict(zip(names, moved, strict=True))


class ExactUpdates(RuleState):
    """sequential / csp / csp-bw: live weights, one step per subnet at its write task, fixed versions."""

    def __init__(self, model: StageModel, bank: OptimizerBank, delay: int | None, n: int):
        self.model, self.bank = model, bank
        sh = getattr(model, "shared", None)
        corrected = sh is not None and (getattr(sh, "predict", False) or getattr(sh, "t1", 0))
        self.versions = (None if not bank.fixed or delay is None else
                         CorrectedFixedVersions(bank, delay, n, sh.predict, sh.t1) if corrected else
                         FixedVersions(bank.fixed, delay, n, bank.step_fixed))
        self._grads: dict[int, tuple[list[Key], dict[nn.Parameter, Tensor | None], dict[str, Tensor | None]]] = {}

    def forward(self, j: int, x: Tensor, subnet: Sequence[int]) -> tuple[Tensor, ForwardContext]:
        leaves = self.versions.leaves(j) if self.versions is not None else None
        return self.model(x, subnet, leaves), ForwardContext(self.bank.used(subnet), leaves)

    def after_backward(self, j: int, ctx: ForwardContext) -> None:
        grads = take_grads([p for k in ctx.keys for p in self.bank.params(k)])
        fixed = {n: t.grad for n, t in ctx.leaves.items()} if ctx.leaves is not None else {}
        self._grads[j] = (ctx.keys, grads, fixed)

    def reduce(self, j: int, fn: Any, extra: Sequence[Tensor] = ()) -> list[Tensor | None]:
        """Replace ``j``'s held gradients by ``fn(j, [*extra, *gradients], like=[*extra, *parameters])``
        (data-parallel replicas: ``naspipe.runtime.transport.replica_group``); returns what ``fn`` made of ``extra``."""
        keys, grads, fixed = self._grads[j]
        ps, names = list(grads), list(fixed)
        k = len(extra)
        out = fn(j, [*extra, *(grads[p] for p in ps), *(fixed[n] for n in names)],
                 like=[*extra, *ps, *(self.bank.fixed[n] for n in names)])  # a slot's shape where it has no grad
        self._grads[j] = (keys, dict(zip(ps, out[k:k + len(ps)], strict=True)),
                          dict(zip(names, out[k + len(ps):], strict=True)))
        return out[:k]

    def write(self, j: int) -> None:
        keys, grads, fixed = self._grads.pop(j)
        self.bank.step(keys, grads)
        if self.versions is not None:
            self.versions.submit(j, fixed)

    def held_versions(self) -> int:
        return self.versions.peak_versions if self.versions is not None else 0

    def state_dict(self) -> dict[str, Any]:
        return {"versions": self.versions.state_dict() if self.versions is not None else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        vs = state.get("versions")
        if (vs is None) != (self.versions is None):
            raise ValueError("fixed-layer versions do not fit the stage")
        if self.versions is not None:
            self.versions.load_state_dict(vs)


class GroupUpdates(RuleState):
    """bsp: accumulate per subnet, sum in subnet order, average over the group, one step at its end."""

    def __init__(self, model: StageModel, bank: OptimizerBank, group: int, n: int):
        self.model, self.bank, self.m, self.n = model, bank, group, n
        self.reads: dict[tuple[str, int], int] = {}  # (kind, j) -> version read (group updates), for the trace
        self._grads: dict[int, tuple[list[Key], dict[nn.Parameter, Tensor | None]]] = {}
        self._fixed_grads: dict[int, dict[str, Tensor | None]] = {}

    def forward(self, j: int, x: Tensor, subnet: Sequence[int]) -> tuple[Tensor, ForwardContext]:
        self.reads[("F", j)] = self.bank.steps
        return self.model(x, subnet), ForwardContext(self.bank.used(subnet))

    def after_backward(self, j: int, ctx: ForwardContext) -> None:
        self.reads[("B", j)] = self.bank.steps
        self._grads[j] = (ctx.keys, take_grads([p for k in ctx.keys for p in self.bank.params(k)]))
        self._fixed_grads[j] = {n: p.grad for n, p in self.bank.fixed.items()}
        for p in self.bank.fixed.values():
            p.grad = None

    def write(self, j: int) -> None:
        g = j // self.m
        first, last = g * self.m, min((g + 1) * self.m, self.n)
        if any(i not in self._grads for i in range(first, last)):
            return  # the group's last backward has not run on this stage yet
        size = last - first
        keys: list[Key] = []
        total: dict[nn.Parameter, Tensor] = {}
        for i in range(first, last):  # subnet order: the sum does not depend on timing
            ks, grads = self._grads.pop(i)
            for k in ks:
                if k not in keys:
                    keys.append(k)
            for p, t in grads.items():
                if t is not None:
                    total[p] = t.clone() if p not in total else total[p].add_(t)
        fixed_total: dict[str, Tensor] = {}
        for i in range(first, last):
            for name, t in self._fixed_grads.pop(i).items():
                if t is not None:
                    fixed_total[name] = t.clone() if name not in fixed_total else fixed_total[name].add_(t)
        for t in (*total.values(), *fixed_total.values()):
            t.div_(size)
        self.bank.step(sorted(keys), total)
        if fixed_total:
            self.bank.step_fixed(fixed_total)

    def held_versions(self) -> int:
        return 0


def snapshot_grads(bank: OptimizerBank, qual: dict[int, str], ctx: ForwardContext) -> tuple[Any, dict, dict]:
    """The gradients a backward left on the snapshot leaves of ``ctx``, keyed by live parameter (candidates)
    and by name (fixed blocks), for a rule that applies them to the live weights later."""
    assert ctx.leaves is not None
    snap = ctx.leaves
    cand = {p: snap[qual[id(p)]].grad for k in ctx.keys for p in bank.params(k)}
    fixed = {n: snap[qual[id(p)]].grad for n, p in bank.fixed.items()}
    return ctx.keys, cand, fixed


class StashedUpdates(RuleState):
    """asp: forward on a snapshot copy of the weights it uses; gradients applied to the live weights."""

    def __init__(self, model: StageModel, bank: OptimizerBank):
        self.model, self.bank = model, bank
        self._qual = {id(p): n for n, p in model.named_parameters()}
        self._grads: dict[int, tuple[list[Key], dict[nn.Parameter, Tensor | None], dict[str, Tensor | None]]] = {}

    def forward(self, j: int, x: Tensor, subnet: Sequence[int]) -> tuple[Tensor, ForwardContext]:
        keys = self.bank.used(subnet)
        live = [p for k in keys for p in self.bank.params(k)] + list(self.bank.fixed.values())
        with torch.no_grad():
            snap = {self._qual[id(p)]: p.detach().clone().requires_grad_(True) for p in live}
        out = functional_call(self.model, snap, (x, subnet))
        return out, ForwardContext(keys, snap)

    def after_backward(self, j: int, ctx: ForwardContext) -> None:
        self._grads[j] = snapshot_grads(self.bank, self._qual, ctx)

    def write(self, j: int) -> None:
        keys, grads, fixed = self._grads.pop(j)
        self.bank.step(keys, grads)
        if fixed:
            self.bank.step_fixed(fixed)

    def held_versions(self) -> int:
        return 0
