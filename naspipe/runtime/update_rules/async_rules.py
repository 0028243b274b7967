"""Update rules of the asynchronous baselines: PipeDream, PipeDream-2BW, PipeMare and PipeOptim.

Why it exists: these policies share CSP's executor and the 1F1B scheduler (``AsyncScheduler``) and differ
only in which weight version a forward and a backward read and how gradients become updates. Every rule
records the version each task read in ``reads[(kind, j)]`` (a stage's version = its update count, one update
per subnet, or per group for ``2bw``), which the worker puts into ``TraceEvent.version``; ``lags_from_reads``
turns them into measured lags. Updates are applied in subnet order on every stage (1F1B runs backwards in
order), so the update applying subnet ``j`` starts from version ``j`` (``j // m`` for groups).

* ``pipedream`` (PipeDream 1F1B + weight stashing): the forward reads the live weights and runs on a snapshot
  copy of the ones it uses; the backward differentiates that snapshot (stashed version), the gradient is
  applied to the live weights. Lags: F = B = P-1-i. (Same rule as ``asp``.) With ``vsync`` (vertical sync)
  every stage reads version ``max(0, j-P+1)`` for subnet ``j`` (the version stage 0 reads in steady 1F1B)
  in forward and backward, kept as snapshots (up to P per stage): ``W(j+1) = W(j) - lr * grad(W(j-P+1))``,
  lags F = B = P-1 on every stage; deterministic, so the run is reproducible (``TwoBWUpdates`` with groups of
  one subnet and delay P-1).
* ``2bw`` (PipeDream-2BW): groups of ``m`` subnets (option ``group``, default P); group ``g`` reads version
  ``max(0, g-1)`` (``g`` on one stage) in forward and backward; its gradients are summed in subnet order,
  averaged over ``m`` and applied in one update when the group's last backward ends: ``W(g+1) = W(g) - lr *
  mean grad(W(g-1))``. Two weight buffers (``held_versions``). Lag 1. Deterministic: the run is
  reproducible (but differs from the sequential reference).
* ``pipemare`` (no stashing): the forward reads the live weights; the backward must read the *current*
  weights. With autograd the graph of the forward holds the forward-time weights, so the stage
  **recomputes** its forward at backward time on the stashed stage input with the current weights (or with
  T2's corrected ones) and backpropagates the received output gradient through that. This is exact
  PipeMare for a stage whose weights enter once (a linear layer: ``dW = x^T g``, ``dx = g W_B^T``); for a
  deeper stage the activations *inside* the stage are also those of the current weights (an approximation:
  the stage input and the output gradient come from the asynchronous pipeline, everything within the stage
  is evaluated at ``W_B``). Costs one extra forward per backward. Options: ``t1=K`` (T1: the step of
  subnet ``j`` is scaled by ``t1_multiplier(k, tau, K)``, ``k = max(0, j - warmup)``, ``tau = P-1-i`` or
  option ``tau``), ``t2=D`` (T2: a velocity per candidate, the backward runs on ``w - tau*d``), ``warmup=N``
  (the scheduler runs subnets ``< N`` one at a time: synchronous; T2 and prediction are off for them).
  Lags: F = P-1-i, B = 0.
* ``pipeoptim``: ``pipemare``'s execution, plus weight prediction before each forward (``predicted_weights``:
  ``W - lr*s*dW`` from the optimizer state of each used candidate, then restored). ``s``: ``stage`` (default,
  ``P-1-i+offset``), ``inflight`` (per candidate: the earlier subnets in flight on this stage that use it,
  i.e. the updates it will really receive before this backward, + offset) or a number. With ``s=0`` the
  run equals ``pipemare`` bit for bit.

Shared fixed weights that train (``serial``) are handled like candidates; ``delayed:D`` with ``D > 0`` is
refused before any process starts (``TrainConfig.validate``: these policies declare ``delayed_shared=False``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from naspipe.corrections.pipemare import DiscrepancyCorrector, rescheduled_lr
from naspipe.corrections.pipeoptim import predicted_weights, version_gap
from naspipe.corrections.stashing import two_bw_delay
from naspipe.models import StageModel
from naspipe.runtime.update_rules.updates import (
    ForwardContext,
    Key,
    OptimizerBank,
    RuleState,
    StashedUpdates,
    snapshot_grads,
    take_grads,
)

ASYNC_POLICIES = ("pipedream", "2bw", "pipemare", "pipeoptim")  # the rules make_async_updates builds (key "async")
FIXED = (-1, -1)  # the key of the stage's trainable fixed weights in per-key bookkeeping


@dataclass
class AsyncContext(ForwardContext):
    x: Tensor | None = None
    subnet: Sequence[int] = ()


def lags_from_reads(reads: Mapping[tuple[str, int], int], group: int = 1) -> dict[int, tuple[int, int]]:
    """``{j: (forward lag, backward lag)}``: ``u_j - version read``, ``u_j = j // group`` (in-order updates)."""
    out = {}
    for (kind, j), v in reads.items():
        if kind == "F" and ("B", j) in reads:
            u = j // group
            out[j] = (u - v, u - reads[("B", j)])
    return out


def lags_from_events(events: Sequence[Any], group: int = 1) -> dict[int, dict[int, tuple[int, int]]]:
    """Per stage ``{j: (F lag, B lag)}`` from trace events that carry ``version`` (``TraceEvent`` or dicts)."""
    per: dict[int, dict[tuple[str, int], int]] = {}
    for e in events:
        d = e if isinstance(e, Mapping) else e.to_dict()
        if d.get("version") is not None and d["kind"] in ("F", "B"):
            per.setdefault(d["stage"], {})[(d["kind"], d["subnet"])] = d["version"]
    return {s: lags_from_reads(r, group) for s, r in sorted(per.items())}


class PipeDreamUpdates(StashedUpdates):
    """pipedream: weight stashing (``StashedUpdates``) with the versions read recorded."""

    def __init__(self, model: StageModel, bank: OptimizerBank):
        super().__init__(model, bank)
        self.reads: dict[tuple[str, int], int] = {}

    def forward(self, j: int, x: Tensor, subnet: Sequence[int]) -> tuple[Tensor, ForwardContext]:
        self.reads[("F", j)] = self.bank.steps
        return super().forward(j, x, subnet)

    def after_backward(self, j: int, ctx: ForwardContext) -> None:
        self.reads[("B", j)] = self.reads[("F", j)]  # the stashed version
        super().after_backward(j, ctx)


class TwoBWUpdates(RuleState):
    """2bw: group ``g`` reads version ``max(0, g - delay)``; one averaged update per group, in group order."""

    def __init__(self, model: StageModel, bank: OptimizerBank, group: int, delay: int, n: int):
        self.model, self.bank, self.m, self.delay, self.n = model, bank, group, delay, n
        self._qual = {id(p): name for name, p in model.named_parameters()}
        self._all = [p for k in bank.keys() for p in bank.params(k)] + list(bank.fixed.values())
        self.updates = 0
        self.versions: dict[int, dict[str, Tensor]] = {0: self._snapshot()}
        self.peak = 1
        self.reads: dict[tuple[str, int], int] = {}
        self._grads: dict[int, tuple[list[Key], dict[nn.Parameter, Tensor | None], dict[str, Tensor | None]]] = {}

    def _snapshot(self) -> dict[str, Tensor]:
        with torch.no_grad():
            return {self._qual[id(p)]: p.detach().clone() for p in self._all}

    def forward(self, j: int, x: Tensor, subnet: Sequence[int]) -> tuple[Tensor, ForwardContext]:
        v = max(0, j // self.m - self.delay)
        snap = self.versions.get(v)
        if snap is None:
            raise RuntimeError(f"2bw: F({j}) needs weight version {v}, the stage holds {sorted(self.versions)}")
        keys = self.bank.used(subnet)
        used = [p for k in keys for p in self.bank.params(k)] + list(self.bank.fixed.values())
        leaves = {self._qual[id(p)]: snap[self._qual[id(p)]].detach().requires_grad_(True) for p in used}
        self.reads[("F", j)] = v
        return functional_call(self.model, leaves, (x, subnet)), ForwardContext(keys, leaves)

    def after_backward(self, j: int, ctx: ForwardContext) -> None:
        self._grads[j] = snapshot_grads(self.bank, self._qual, ctx)
        self.reads[("B", j)] = self.reads[("F", j)]

    def write(self, j: int) -> None:
        g = j // self.m
        first, last = g * self.m, min((g + 1) * self.m, self.n)
        if any(i not in self._grads for i in range(first, last)):
            return
        if g != self.updates:
            raise RuntimeError(f"2bw: group {g} completed before group {self.updates}")
        keys: list[Key] = []
        total: dict[nn.Parameter, Tensor] = {}
        fixed_total: dict[str, Tensor] = {}
        for i in range(first, last):  # subnet order: the sum does not depend on timing
            ks, grads, fixed = self._grads.pop(i)
            keys += [k for k in ks if k not in keys]
            for p, t in grads.items():
                if t is not None:
                    total[p] = t.clone() if p not in total else total[p].add_(t)
            for name, t in fixed.items():
                if t is not None:
                    fixed_total[name] = t.clone() if name not in fixed_total else fixed_total[name].add_(t)
        for t in (*total.values(), *fixed_total.values()):
            t.div_(self.m)
        self.bank.step(sorted(keys), total)
        if fixed_total:
            self.bank.step_fixed(fixed_total)
        self.updates += 1
        self.versions[self.updates] = self._snapshot()
        for v in [v for v in self.versions if v < self.updates - self.delay]:
            del self.versions[v]
        self.peak = max(self.peak, len(self.versions))

    def held_versions(self) -> int:
        return self.peak

    def state_dict(self) -> dict[str, Any]:
        return {"updates": int(self.updates), "peak": int(self.peak),
                "versions": {int(v): dict(snap) for v, snap in self.versions.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.updates, self.peak = int(state["updates"]), int(state["peak"])
        self.versions = {int(v): dict(snap) for v, snap in state["versions"].items()}


class AsyncUpdates(RuleState):
    """pipemare / pipeoptim: no stash; the backward recomputes the stage at the current (or T2-corrected)
    weights; T1 rescales each step; pipeoptim predicts the weights before the forward."""

    def __init__(self, model: StageModel, bank: OptimizerBank, *, stage: int, stages: int,
                 options: Mapping[str, Any], predict: bool):
        self.model, self.bank = model, bank
        self.stage, self.stages = stage, stages
        self.t1 = int(options.get("t1", 0))
        self.t2 = float(options.get("t2", 0.0))
        self.warmup = int(options.get("warmup", 0))
        tau = options.get("tau", "stage")
        self.tau = stages - 1 - stage if tau == "stage" else int(tau)
        self.predict = predict
        s = str(options.get("s", "stage"))
        self.offset = int(options.get("offset", 0))
        self.s_mode = s if s in ("stage", "inflight") else "fixed"
        self.s_fixed = (version_gap(stage, stages, self.offset) if s == "stage" else
                        int(s) if s.isdigit() else 0)
        self.reads: dict[tuple[str, int], int] = {}
        self._grads: dict[int, tuple[list[Key], dict[nn.Parameter, Tensor | None], dict[str, Tensor | None]]] = {}
        self._last: dict[nn.Parameter, Tensor | None] = {}
        self._inflight: dict[int, list[Key]] = {}
        self._corr: dict[Key, DiscrepancyCorrector] = {}
        self.next = 0

    def _params(self, key: Key) -> list[nn.Parameter]:
        return list(self.bank.fixed.values()) if key == FIXED else self.bank.params(key)

    def _keys(self, keys: Sequence[Key]) -> list[Key]:
        return [*keys, FIXED] if self.bank.fixed else list(keys)

    def _gap(self, key: Key, j: int) -> int:
        if j < self.warmup:
            return 0
        if self.s_mode == "inflight":
            return self.offset + sum(1 for i, ks in self._inflight.items() if i < j and (key == FIXED or key in ks))
        return self.s_fixed

    def forward(self, j: int, x: Tensor, subnet: Sequence[int]) -> tuple[Tensor, ForwardContext]:
        keys = self.bank.used(subnet)
        self.reads[("F", j)] = self.bank.steps
        with ExitStack() as stack:
            if self.predict and self.bank.optimizer is not None:
                for k in self._keys(keys):
                    s = self._gap(k, j)
                    if s > 0:
                        ps = self._params(k)
                        last = [self._last.get(p) for p in ps]
                        stack.enter_context(predicted_weights(ps, self.bank.optimizer, s, last))
            out = self.model(x, subnet)
        self._inflight[j] = keys
        return out, AsyncContext(keys, None, x, tuple(subnet))

    def _corrector(self, key: Key) -> DiscrepancyCorrector:
        c = self._corr.get(key)
        if c is None:
            c = self._corr[key] = DiscrepancyCorrector(self._params(key), tau_fwd=self.tau, decay=self.t2)
        return c

    @contextmanager
    def backward_weights(self, j: int, ctx: ForwardContext) -> Iterator[None]:
        """The weights the backward of ``j`` reads: the live ones, or T2's estimate of the forward's."""
        self.reads[("B", j)] = self.bank.steps
        with ExitStack() as stack:
            if self.t2 > 0 and j >= self.warmup:
                for k in self._keys(ctx.keys):
                    stack.enter_context(self._corrector(k).corrected_weights())
            yield

    def recompute(self, j: int, ctx: ForwardContext) -> Tensor:
        assert isinstance(ctx, AsyncContext)
        return self.model(ctx.x, ctx.subnet)

    def after_backward(self, j: int, ctx: ForwardContext) -> None:
        grads = take_grads([p for k in ctx.keys for p in self.bank.params(k)])
        fixed = {n: p.grad for n, p in self.bank.fixed.items()}
        for p in self.bank.fixed.values():
            p.grad = None
        self._grads[j] = (ctx.keys, grads, fixed)

    def write(self, j: int) -> None:
        if j != self.next:
            raise RuntimeError(f"{type(self).__name__}: update of subnet {j} before subnet {self.next}'s")
        self.next += 1
        keys, grads, fixed = self._grads.pop(j)
        self._inflight.pop(j, None)
        opt = self.bank.optimizer
        k = max(0, j - self.warmup)
        with ExitStack() as stack:
            if self.t1 > 0 and opt is not None:
                stack.enter_context(rescheduled_lr(opt, k, self.tau, self.t1))
            with ExitStack() as obs:
                if self.t2 > 0:
                    for key in keys:
                        obs.enter_context(self._corrector(key).observe_step())
                self.bank.step(keys, grads)
            if self.bank.fixed:
                with self._corrector(FIXED).observe_step() if self.t2 > 0 else nullcontext():
                    self.bank.step_fixed(fixed)
        if self.predict:
            self._last.update(grads)
            self._last.update({p: fixed.get(n) for n, p in self.bank.fixed.items()})

    def held_versions(self) -> int:
        return 0

    def state_dict(self) -> dict[str, Any]:
        """The next update, pipeoptim's last gradients and T2's velocities, by parameter name."""
        qual = {id(p): n for n, p in self.model.named_parameters()}
        return {"next": int(self.next),
                "last": {qual[id(p)]: t for p, t in self._last.items() if t is not None},
                "velocity": {f"{k[0]},{k[1]}": list(c.velocity) for k, c in self._corr.items() if c.velocity}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        by_name = dict(self.model.named_parameters())
        self.next = int(state["next"])
        self._last = {by_name[n]: t for n, t in state["last"].items()}
        for key, vel in state["velocity"].items():
            b, c = (int(x) for x in key.split(","))
            corr = self._corrector((b, c))
            with torch.no_grad():
                for d, v in zip(corr.velocity, vel, strict=True):
                    d.copy_(v)


def make_async_updates(policy: str, model: StageModel, bank: OptimizerBank, *, n: int, stage: int, stages: int,
                       options: Mapping[str, Any]) -> PipeDreamUpdates | TwoBWUpdates | AsyncUpdates:
    if policy == "pipedream":
        if options.get("vsync"):  # vertical sync: v(j) = max(0, j-P+1) on every stage, one update per subnet
            return TwoBWUpdates(model, bank, 1, stages - 1, n)
        return PipeDreamUpdates(model, bank)
    if policy == "2bw":
        group = int(options.get("group", stages))
        delay = two_bw_delay(stages)
        if delay and group < stages:
            raise ValueError(f"2bw needs a group of at least the number of stages ({stages}), got {group}")
        return TwoBWUpdates(model, bank, group, delay, n)
    if policy in ("pipemare", "pipeoptim"):
        return AsyncUpdates(model, bank, stage=stage, stages=stages, options=options, predict=policy == "pipeoptim")
    raise ValueError(f"no asynchronous update rule {policy!r}")
