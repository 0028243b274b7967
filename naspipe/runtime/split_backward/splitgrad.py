"""The split backward with autograd: ``B`` computes the input gradient, ``W`` the weight gradients.

Why it exists: zero-bubble pipelines split a stage's backward into ``B`` (the gradient with respect to the
stage input, which the upstream stage waits for) and ``W`` (the gradients with respect to the weights, which
only the update needs). This module does that split the way zero-bubble implementations do, at the
granularity of the *layers that own weights* (Linear, Conv, LayerNorm, ...):

* during ``F``, ``LayerCapture`` (forward hooks on every module that owns parameters directly) records each
  such layer call: the module, its input, its output and the weight tensors it used (under
  ``functional_call`` the fixed-version leaves); the stage model also records each block's output
  (``StageModel.capturing``). The computation is untouched;
* ``input_grad`` (``B``) is ONE ``torch.autograd.grad`` with the stage input and every recorded output as
  its inputs: autograd runs no weight-gradient kernel (a weight's edge leads to no requested input), so
  ``B`` costs the input-gradient part of a backward, and the engine hands back the gradient every recorded
  output received (fully accumulated, what its node gets in a full backward);
* ``weight_grads`` (``W``) computes each layer call's weight gradients from that output gradient: for
  ``nn.Linear``, ``nn.LayerNorm`` and ``nn.Conv1d/2d/3d`` explicitly, with the very kernels autograd would
  call on the tensors their nodes saved (``naspipe.runtime.split_backward.wgrad``); for any other layer by
  ``torch.autograd.grad(layer_out, weights)`` (exact, but it walks the graph behind the output). Weights a
  layer call cannot cover (a module called twice, a weight used outside its module's ``forward`` such as a
  position table sliced directly, an output that got no gradient in ``B``) fall back to
  ``torch.autograd.grad(block_out, block_weights, ...)`` per block, which recomputes the block's internal
  backward but is just as exact.

Bit-identity with one full backward: each weight gradient is computed by the same kernel from the same
incoming gradient and saved tensors as in the full backward, and each target tensor gets its gradient from
exactly one call (no sum is reordered; a weight shared by two layer calls goes to the block-level fallback,
which accumulates in the engine's order as the full backward does). Assumption: a weight used by a captured
layer call is not also used outside any module call in the same block (a tied weight read directly); tests
check the presets and a user supernet.

``BlockTargets`` maps each block of a stage to the tensors its weight gradients are taken for: the
candidate the subnet uses (parameters that require grad) and, for a fixed block, its fixed-version leaves
(``delayed:D``, ``serial``) or its own trainable parameters; frozen blocks have none and cost nothing in ``W``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from naspipe.models import StageModel
from naspipe.runtime.split_backward.wgrad import recipe


class BlockTargets:
    """Per block of ``model``: which tensors ``W`` differentiates for a given subnet and fixed leaves."""

    def __init__(self, model: StageModel):
        space = model.space
        self.blocks = list(model.blocks)
        self.fixed = [space.blocks[b].fixed for b in self.blocks]
        live = model.fixed_named_parameters()
        self._model = model
        # fixed block -> its global parameter names (the names carry the block's name as their prefix)
        self._fixed_names: dict[int, list[str]] = {}
        for b, fixed in zip(self.blocks, self.fixed, strict=True):
            if fixed:
                prefix = f"{space.blocks[b].name}."
                self._fixed_names[b] = [n for n in live if n.startswith(prefix)]
        self._live = live
        self._cands: dict[tuple[int, int], list[Tensor]] = {}

    def targets(self, subnet: Sequence[int], leaves: Mapping[str, Tensor] | None) -> list[list[Tensor]]:
        """One list per block (in block order) of the tensors needing a weight gradient; may be empty."""
        out: list[list[Tensor]] = []
        for b, fixed in zip(self.blocks, self.fixed, strict=True):
            if not fixed:
                key = (b, subnet[b])
                if key not in self._cands:  # a candidate's parameters are fixed objects: listed once
                    self._cands[key] = [p for p in self._model.candidate_parameters(*key) if p.requires_grad]
                out.append(self._cands[key])
            elif leaves is not None:
                out.append([leaves[n] for n in self._fixed_names[b] if leaves[n].requires_grad])
            else:
                out.append([self._live[n] for n in self._fixed_names[b] if self._live[n].requires_grad])
        return out


class LayerCall(NamedTuple):
    """One call of a weight-owning layer recorded in ``F``: the module, its input, its output and the weights it used
    (those needing a gradient); ``W`` asks ``naspipe.runtime.split_backward.wgrad`` how to compute their gradients."""

    module: nn.Module
    input: object  # the call's first argument
    out: Tensor
    weights: list[Tensor]


class LayerCapture:
    """Forward hooks on each module of ``model`` that owns parameters directly; while ``active`` is a list,
    every call of such a module whose output requires grad and that used a weight needing a gradient
    appends a ``LayerCall`` to it. The computation is untouched: the hook returns nothing and does little
    (``F`` pays a few microseconds per call)."""

    def __init__(self, model: nn.Module):
        self.active: list[LayerCall] | None = None
        mods = [m for m in model.modules() if any(p is not None for p in m._parameters.values())]
        self._handles = [m.register_forward_hook(self._hook) for m in mods]

    def _hook(self, mod: nn.Module, args: object, out: object) -> None:
        if self.active is None or not isinstance(out, Tensor) or not out.requires_grad:
            return
        # under functional_call, _parameters holds the tensors passed in
        ws = [w for w in mod._parameters.values() if w is not None and w.requires_grad]
        if not ws:  # a frozen layer: nothing for W
            return
        self.active.append(LayerCall(mod, args[0] if args else None, out, ws))  # type: ignore[index]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def input_grad(out: Tensor, x: Tensor, grad: Tensor | None, outs: Sequence[Tensor]
               ) -> tuple[Tensor, list[Tensor | None]]:
    """``B``: the gradient of ``out`` (seeded with ``grad``; None for a scalar loss) with respect to ``x``,
    and the gradient each of ``outs`` (block and layer outputs) received on the way (None for one that got
    none).

    One ``autograd.grad`` with ``x`` and ``outs`` as its inputs: the engine captures each output's fully
    accumulated gradient (what its node receives in a full backward) and runs no weight-gradient kernel (no
    requested input lies behind a weight's edge). The graph is retained for ``weight_grads``.
    """
    idx = [i for i, t in enumerate(outs) if t.requires_grad and t is not out]
    got = torch.autograd.grad(out, [x, *(outs[i] for i in idx)], grad_outputs=grad, retain_graph=True,
                              allow_unused=True)
    seen: list[Tensor | None] = [None] * len(outs)
    for i, g in zip(idx, got[1:], strict=True):
        seen[i] = g
    for i, t in enumerate(outs):  # the root itself: its gradient is the seed
        if t is out and t.requires_grad:
            seen[i] = grad if grad is not None else torch.ones_like(out)
    gin = got[0]
    if gin is None:
        raise RuntimeError("the stage output does not depend on its input")
    return gin, seen


def input_grads(roots: Sequence[Tensor], seeds: Sequence[Tensor] | None, xs: Sequence[Tensor],
                outs: Sequence[Tensor]) -> tuple[list[Tensor | None], list[Tensor | None]]:
    """``input_grad`` for structured messages (``naspipe.supernet.messages``): the gradients of ``roots`` (seeded with
    ``seeds``; None for a scalar loss) with respect to each of ``xs`` (the stage input's distinct leaves; None for a
    leaf that needs or got none) and each of ``outs`` (block-output leaves and layer outputs).

    One ``autograd.grad`` over every tensor asked for (each once): a root, or an input passed through unchanged,
    gets its fully accumulated gradient like any other output, as its node gets in a full backward."""
    asked: list[Tensor] = []
    index: dict[int, int] = {}
    for t in [*xs, *outs]:
        if t.requires_grad and id(t) not in index:
            index[id(t)] = len(asked)
            asked.append(t)
    got = torch.autograd.grad(list(roots), asked, grad_outputs=None if seeds is None else list(seeds),
                              retain_graph=True, allow_unused=True) if roots and asked else [None] * len(asked)

    def pick(ts: Sequence[Tensor]) -> list[Tensor | None]:
        return [got[index[id(t)]] if id(t) in index else None for t in ts]

    return pick(xs), pick(outs)


_ACCUMULATE = torch._C._functions.AccumulateGrad  # the node that accumulates into a leaf (``.variable``)


def _graph_uses(roots: Sequence[Tensor], wanted: set[int]) -> dict[int, int]:
    """How many edges of the graph behind ``roots`` lead to each wanted leaf: more than one where a weight is
    used twice, e.g. a tied decoder ``F.linear(h, enc.weight.t())`` beside ``enc``'s own call. A per-call
    gradient (explicit or from the call's output) would miss the other use, so such a weight takes the
    block-level path. (Every node once, every edge into a leaf counted: the walk is on W's path, so it is
    kept to a set lookup and a type test per edge.)"""
    counts: dict[int, int] = {}
    todo = [t.grad_fn for t in roots if t.grad_fn is not None]
    seen = set(todo)
    push, add = todo.append, seen.add
    while todo:
        for nxt, _ in todo.pop().next_functions:
            if nxt is None or nxt in seen:
                continue
            if type(nxt) is _ACCUMULATE:
                k = id(nxt.variable)
                if k in wanted:
                    counts[k] = counts.get(k, 0) + 1
            else:
                add(nxt)
                push(nxt)
    return counts


def weight_grads(block_outs: Sequence[Tensor | list[Tensor]], block_grads: Sequence[Tensor | list | None],
                 targets: Sequence[Sequence[Tensor]], layers: Sequence[LayerCall] = (),
                 layer_grads: Sequence[Tensor | None] = ()) -> dict[Tensor, Tensor | None]:
    """``W``: the gradients of ``targets`` (per block) as tensor -> gradient, per layer call where possible
    (``layers``, with their output gradients ``layer_grads``): explicitly where the call has a recipe, else
    by ``autograd.grad`` from the call's output; the rest per block.

    A target that does not influence its block's output gets None, as ``.grad`` would stay None in a full
    backward. The graph is retained (dropping the stash frees it). A block with a structured output (``naspipe
    .messages``) gives a list of its leaves and a list of their gradients.
    """
    wanted = {id(t) for ts in targets for t in ts}
    uses: dict[int, int] = {}
    for call in layers:
        for w in call.weights:
            uses[id(w)] = uses.get(id(w), 0) + 1
    flat_outs = [t for b in block_outs for t in (b if isinstance(b, list) else [b])]
    for k, n in _graph_uses(flat_outs, wanted).items():  # a weight also used outside its call (tied weights)
        uses[k] = max(uses.get(k, 0), n)
    grads: dict[int, Tensor | None] = {}
    with torch.no_grad():  # the explicit kernels build no graph; autograd.grad below is unaffected
        for call, g in reversed(list(zip(layers, layer_grads, strict=True))):
            mine = [w for w in call.weights if id(w) in wanted]
            if g is None or not mine or any(uses[id(w)] > 1 for w in mine):
                continue  # left to the block-level fallback
            explicit = recipe(call.module, call.input, call.out, mine)
            got = explicit(g) if explicit is not None else torch.autograd.grad(
                call.out, mine, grad_outputs=g, retain_graph=True, allow_unused=True)
            grads.update(zip(map(id, mine), got, strict=True))
        for t_out, g, ts in reversed(list(zip(block_outs, block_grads, targets, strict=True))):
            rest = [t for t in ts if id(t) not in grads]
            if not rest:
                continue
            if isinstance(t_out, list):  # a structured output: from each leaf that got a gradient
                pairs = [(o, go) for o, go in zip(t_out, g or [None] * len(t_out), strict=True)
                         if go is not None and o.requires_grad]
                if not pairs:
                    grads.update((id(t), None) for t in rest)
                    continue
                got = torch.autograd.grad([o for o, _ in pairs], rest, grad_outputs=[go for _, go in pairs],
                                          retain_graph=True, allow_unused=True)
                grads.update(zip(map(id, rest), got, strict=True))
                continue
            if g is None or not t_out.requires_grad:
                grads.update((id(t), None) for t in rest)
                continue
            got = torch.autograd.grad(t_out, rest, grad_outputs=g, retain_graph=True, allow_unused=True)
            grads.update(zip(map(id, rest), got, strict=True))
    return {t: grads[id(t)] for ts in targets for t in ts}
