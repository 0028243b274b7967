"""Executing the tasks of one stage on real tensors: ``F(j)``, ``B(j)`` and ``W(j)`` on a ``StageModel``.

Why it exists: it is the only place where a scheduled task touches torch. It never decides *what* runs
(the scheduler does) and never talks to other processes (the worker loop does); it turns a received
tensor into the tensor to send.

* ``F(j)``: stage 0 builds its input from ``make_batch(space, seed, j)``; other stages use the received
  activation, made to require grad exactly when the sender's output did, so the split autograd graph
  mirrors the whole model's. The last stage regenerates batch ``j`` (a pure function of ``(seed, j)``)
  for the target and computes the loss; targets never travel. The (input, output) pair is stashed; with a
  split backward also each block's output (``StageModel.capturing``).
* ``B(j)`` without a split (write kind ``B``): one backward from the received output gradient (the loss on
  the last stage); returns the input gradient to send upstream (None when the input needs none); hands
  the parameter gradients to the policy's update rule (``naspipe.runtime.update_rules.updates``), applies the update
  and drops the stash.
* ``B(j)`` with a split backward (``csp-bw``, write kind ``W``): only the input gradient, one
  ``torch.autograd.grad`` for the stage input that also hands back the output gradient of each block and
  of each weight-owning layer call captured in ``F`` (``naspipe.runtime.split_backward.splitgrad``); no weight-gradient
  kernel runs; returns it at once for the upstream stage. Where the input needs no gradient (stage 0)
  ``B`` computes nothing: all of the backward is weight gradients and waits for ``W``.
* ``W(j)`` (split backward): the weight gradients of the candidates ``j`` used and of the fixed-version
  leaves (``delayed:D``, ``serial``), per layer call from the output gradient recorded in ``B``
  (explicitly for Linear, LayerNorm and Conv, ``naspipe.runtime.split_backward.wgrad``; per block where a layer
  cannot be used; on stage 0: one plain backward, the cheapest way to get only weight gradients); they are put on
  ``.grad`` where the update rule reads them (``rule.after_backward``), the update is applied
  (``rule.write``) and the stash, graph included, is dropped. The split gradients are bit-identical to one
  full backward (tests/runtime/test_split_backward.py), so ``csp-bw`` reproduces the sequential run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from naspipe.models import StageModel, input_of, make_batch, target_of
from naspipe.models.shards import input_batch_dim, shard
from naspipe.runtime.split_backward.splitgrad import (
    BlockTargets,
    LayerCall,
    LayerCapture,
    input_grad,
    input_grads,
    weight_grads,
)
from naspipe.runtime.stagerun import StageRun
from naspipe.runtime.update_rules.rules import make_updates
from naspipe.runtime.update_rules.updates import ForwardContext, OptimizerBank
from naspipe.sched.tasks import BACKWARD, WEIGHT
from naspipe.spaces.space import Subnet
from naspipe.supernet import messages


@dataclass
class _Stash:
    x: Any  # the stage input (None on stage 0, whose input needs no gradient); a tensor or a structured message
    out: Any  # the output (the loss on the last stage)
    ctx: ForwardContext
    blocks: list[Any] | None = None  # split backward: each block's output, in block order
    block_grads: list[Any] | None = None  # split backward, after B: their gradients (structured: one per leaf)
    layers: list[LayerCall] | None = None  # split backward: the weight-owning layer calls of F
    layer_grads: list[Tensor | None] | None = None  # split backward, after B: the layer outputs' gradients
    seed: Any = None  # split backward, after B: the received output gradient (structured: a list per leaf)


class StageExecutor:
    def __init__(self, model: StageModel, subnets: Sequence[Subnet], run: StageRun, *, seed: int, optimizer: str,
                 lr: float, shared_delay: int | None, write_kind: str = BACKWARD, micro_batches: int | None = None,
                 reducer: Any = None):
        """``run``: where this stage runs and under which policy (with replicas it computes shard
        ``run.replica`` of every batch); ``reducer`` (``naspipe.runtime.transport.replica_group.ReplicaGroup``)
        combines the replicas' gradients before each write."""
        self.model = model
        self.run = run
        self.replica, self.replicas, self.reducer = run.replica, run.replicas, reducer
        self.space = model.space
        self.subnets = subnets
        self.seed = seed
        self.device = run.device
        self.first, self.last = model.holds_input, model.holds_head
        self.write_kind = write_kind
        self.bank = OptimizerBank(model, optimizer, lr)
        self.rule = make_updates(run.name, model, self.bank, shared_delay=shared_delay, n=len(subnets),
                                 micro_batches=micro_batches, stage=run.stage, stages=run.stages,
                                 options=run.async_options)
        self.split = write_kind == WEIGHT
        self._targets = BlockTargets(model) if self.split else None
        # (the first stage sends no input gradient: its W is one plain backward, so no layer calls are recorded
        # and its modules carry no hooks, which cost every call in F)
        self._layers = LayerCapture(model) if self.split and not self.first else None
        self._stash: dict[int, _Stash] = {}
        self.losses: dict[int, float] = {}
        self.peak_stash = 0

    def warm_up(self) -> None:
        """Load lazily-built data (e.g. the digits set) before the run's clock starts."""
        if self.first or self.last:
            make_batch(self.space, self.seed, 0)

    def forward(self, j: int, x: Any = None, requires_grad: bool | tuple[bool, ...] = False
                ) -> tuple[Any, bool | tuple[bool, ...]]:
        """Run ``F(j)``. Returns the activation to send (None on the last stage) and its requires-grad flag: one
        tensor and a bool, or a structured message (``naspipe.supernet.messages``) and one flag per distinct leaf."""
        if j in self._stash:
            raise RuntimeError(f"F({j}) ran twice on this stage")
        batch = None
        if self.first:
            batch = make_batch(self.space, self.seed, j)
            x = shard(input_of(self.space, batch), self.replica, self.replicas, input_batch_dim(self.space))
            x = x.to(self.device)
            stage_in = None
        else:
            if x is None:
                raise RuntimeError(f"F({j}) has no input activation")
            if isinstance(x, Tensor):
                if requires_grad:
                    x.requires_grad_(True)
            else:  # a structured message: the flags of its distinct leaves
                flags = requires_grad if isinstance(requires_grad, tuple) else (bool(requires_grad),) * len(
                    messages.leaves(x))
                for leaf, flag in zip(messages.leaves(x), flags, strict=True):
                    if flag:
                        leaf.requires_grad_(True)
            stage_in = x
        blocks: list[Tensor] | None = None
        layers: list[LayerCall] | None = None
        if self._layers is not None and stage_in is not None and messages.requires_grad(stage_in):
            layers = self._layers.active = []
            try:
                with self.model.capturing([]) as blocks:
                    out, ctx = self.rule.forward(j, x, self.subnets[j])
            finally:
                self._layers.active = None
        else:  # no split, or nothing to send upstream: W runs one plain backward
            out, ctx = self.rule.forward(j, x, self.subnets[j])
        if self.last:
            if batch is None:
                batch = make_batch(self.space, self.seed, j)
            target = shard(target_of(self.space, batch), self.replica, self.replicas)
            loss = self.model.loss(out, target.to(self.device))
            self.losses[j] = loss.item()  # (with replicas: this shard's, until the write combines them)
            self._keep(j, _Stash(stage_in, loss, ctx, blocks, layers=layers))
            return None, False
        self._keep(j, _Stash(stage_in, out, ctx, blocks, layers=layers))
        if isinstance(out, Tensor):
            return out.detach(), out.requires_grad
        return (messages.map_leaves(Tensor.detach, out),
                tuple(leaf.requires_grad for leaf in messages.leaves(out)))

    def _keep(self, j: int, st: _Stash) -> None:
        self._stash[j] = st
        self.peak_stash = max(self.peak_stash, len(self._stash))

    def backward(self, j: int, grad: Any = None, send: Callable[[Any], None] | None = None) -> Any:
        """Run ``B(j)``; returns the gradient of the stage input to send upstream (or None). ``send``, if given,
        gets that gradient as soon as it exists, before this stage's update (which the upstream stage does not
        wait for: it shortens every chain of tasks that crosses stages by the optimizer step)."""
        if self.split:
            gin = self._input_backward(j, grad)
            if send is not None:
                send(gin)
            return gin
        st = self._stash.pop(j, None)
        if st is None:
            raise RuntimeError(f"B({j}) without a stashed F({j}) on this stage")
        with self._backward_output(j, st) as out:
            if not isinstance(out, Tensor):  # a structured output: from each leaf that got a gradient
                if grad is not None:
                    messages.backward(out, grad)
            elif out.requires_grad:
                if self.last:
                    out.backward()
                elif grad is not None:
                    torch.autograd.backward(out, grad)
        gin = _input_gradient(st.x)
        if send is not None:
            send(gin)
        self.rule.after_backward(j, st.ctx)
        self._combine(j, st)
        if self.write_kind == BACKWARD:
            self.rule.write(j)
        return gin

    def _input_backward(self, j: int, grad: Any) -> Any:
        """Split ``B(j)``: the input gradient only; the stash stays (with the graph) for ``W(j)``."""
        st = self._stash.get(j)
        if st is None or st.seed is not None or st.block_grads is not None:
            raise RuntimeError(f"B({j}) without a stashed F({j}) on this stage, or B({j}) ran twice")
        if not self.last and grad is None and isinstance(st.out, Tensor) and st.out.requires_grad:
            raise RuntimeError(f"B({j}) has no output gradient")
        st.seed = grad
        if st.blocks is None or not messages.requires_grad(st.out):  # the input needs no gradient: all is W's
            if not messages.requires_grad(st.out):  # (nothing downstream depends on a weight: W computes nothing)
                st.blocks = None
            st.block_grads = []
            return _input_gradient(st.x)
        layer_outs = [c.out for c in st.layers or ()]
        if not (isinstance(st.x, Tensor) and isinstance(st.out, Tensor)
                and all(isinstance(b, Tensor) for b in st.blocks)):  # structured messages on this stage
            roots, seeds = ([st.out], None) if self.last else messages.roots_and_seeds(st.out, grad)
            outs = [messages.leaves(b) for b in st.blocks]
            flat = [t for ts in outs for t in ts]
            gins, seen = input_grads(roots, seeds, messages.leaves(st.x), [*flat, *layer_outs])
            block_grads, at = [], 0
            for ts in outs:
                block_grads.append(seen[at:at + len(ts)])
                at += len(ts)
            st.blocks, st.block_grads, st.layer_grads = outs, block_grads, seen[len(flat):]
            return gins[0] if isinstance(st.x, Tensor) else gins
        gin, seen = input_grad(st.out, st.x, None if self.last else grad, [*st.blocks, *layer_outs])
        st.block_grads, st.layer_grads = seen[:len(st.blocks)], seen[len(st.blocks):]
        return gin

    @contextmanager
    def _backward_output(self, j: int, st: _Stash) -> Iterator[Tensor]:
        """The output ``B(j)`` differentiates: the forward's, or (asynchronous rules without stashing,
        ``naspipe.runtime.update_rules.async_rules``) the stage recomputed at the weights the backward reads."""
        scope = getattr(self.rule, "backward_weights", None)
        if scope is None:
            yield st.out
            return
        with scope(j, st.ctx):
            out = self.rule.recompute(j, st.ctx)
            if self.last:
                out = self.model.loss(out, target_of(self.space, make_batch(self.space, self.seed, j)).to(self.device))
            yield out

    def version_read(self, kind: str, j: int, default: int | None = None) -> int | None:
        """The weight version task ``kind`` of ``j`` read, where the update rule records it."""
        return getattr(self.rule, "reads", {}).get((kind, j), default)

    def weight(self, j: int) -> None:
        """Run ``W(j)``: compute ``j``'s weight gradients, apply its update, drop its stash."""
        if not self.split:
            raise RuntimeError("W tasks exist only with a split-backward policy")
        st = self._stash.get(j)
        if st is None or st.block_grads is None:
            raise RuntimeError(f"W({j}) before B({j}) on this stage")
        del self._stash[j]
        if st.blocks is None:  # stage 0 (or an input without gradient): one plain backward, weights only
            if not isinstance(st.out, Tensor):
                if st.seed is not None:
                    messages.backward(st.out, st.seed)
            elif st.out.requires_grad:
                if self.last:
                    st.out.backward()
                elif st.seed is not None:
                    torch.autograd.backward(st.out, st.seed)
        else:
            assert self._targets is not None
            targets = self._targets.targets(self.subnets[j], st.ctx.leaves)
            for t, g in weight_grads(st.blocks, st.block_grads, targets, st.layers or (),
                                     st.layer_grads or ()).items():
                t.grad = g
        self.rule.after_backward(j, st.ctx)
        self._combine(j, st)
        self.rule.write(j)

    def _combine(self, j: int, st: _Stash) -> None:
        """Data-parallel replicas: ``j``'s gradients (and, on the last stage, its loss) combined over the
        stage's replicas in replica order (``naspipe.runtime.transport.replica_group``), before the write."""
        if self.reducer is None:
            return
        extra = [st.out.detach().reshape(())] if self.last else []
        out = self.rule.reduce(j, self.reducer, extra)
        if self.last:
            self.losses[j] = out[0].item()

    @property
    def in_flight(self) -> int:
        return len(self._stash)

    @property
    def updates(self) -> int:
        return self.bank.steps


def _input_gradient(x: Any) -> Any:
    """The gradient of the stage input to send upstream after a full backward: None where it needs none; for a
    structured input a list with the gradient (or None) of each distinct leaf."""
    if x is None:
        return None
    if isinstance(x, Tensor):
        return x.grad if x.requires_grad else None
    return [leaf.grad if leaf.requires_grad else None for leaf in messages.leaves(x)]
