"""The split backward with autograd: ``B`` computes the input gradient, ``W`` the weight gradients.

Why it exists: zero-bubble pipelines split a stage's backward into ``B`` (the gradient with respect to the
stage input, which the upstream stage waits for) and ``W`` (the gradients with respect to the weights, which
only the update needs). This module does that split with autograd alone, no hand-written gradients
(TECHNIQUES section 8), at the granularity of the *layers that own weights* (Linear, Conv, LayerNorm, ...):

* during ``F``, ``LayerCapture`` (forward hooks on every module that owns parameters directly) records each
  such layer call's output and the weight tensors it used (under ``functional_call`` these are the
  fixed-version leaves); the stage model also records each block's output (``StageModel.capturing``);
* ``input_grad`` (``B``) registers a hook on each recorded output, calls
  ``torch.autograd.grad(out, x, grad_outputs=g, retain_graph=True)`` and returns the input gradient together
  with the gradient every recorded output received (what the hooks saw);
* ``weight_grads`` (``W``) calls ``torch.autograd.grad(layer_out, layer_weights, grad_outputs=captured)``
  per layer call: for a Linear that is just the weight and bias gradient kernels, nothing of ``B`` is
  recomputed. Weights a layer capture cannot cover (a module called twice, a weight used outside its
  module's ``forward`` such as a position table sliced directly, an output that got no gradient in ``B``)
  fall back to ``torch.autograd.grad(block_out, block_weights, ...)`` per block, which recomputes the
  block's internal backward but is just as exact.

Capturing per *block* only (one ``autograd.grad`` per block in ``W``) would be simpler, but then ``W``
re-runs the whole inside of each block (attention, norms) down to its first layer: measured on
tiny-transformer, B + W cost about 2.5x one backward; per layer they cost about one backward.

Bit-identity with one full backward: each weight gradient is computed by the same autograd node from the
same incoming gradient, and each target tensor gets its gradient from exactly one ``autograd.grad`` call
(no sum is reordered; a weight shared by two layer calls goes to the block-level fallback, which
accumulates in the engine's order as the full backward does). The output gradient a hook sees is the fully
accumulated one, as in the full backward. Assumption: a weight used by a captured layer call is not also
used outside any module call in the same block (a tied weight read directly); tests check the presets.

``BlockTargets`` maps each block of a stage to the tensors its weight gradients are taken for: the
candidate the subnet uses (parameters that require grad) and, for a fixed block, its fixed-version leaves
(``delayed:D``, ``serial``) or its own trainable parameters; frozen blocks have none and cost nothing in ``W``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from naspipe.models import StageModel


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

    def targets(self, subnet: Sequence[int], leaves: Mapping[str, Tensor] | None) -> list[list[Tensor]]:
        """One list per block (in block order) of the tensors needing a weight gradient; may be empty."""
        out: list[list[Tensor]] = []
        for b, fixed in zip(self.blocks, self.fixed, strict=True):
            if not fixed:
                out.append([p for p in self._model.candidate_parameters(b, subnet[b]) if p.requires_grad])
            elif leaves is not None:
                out.append([leaves[n] for n in self._fixed_names[b] if leaves[n].requires_grad])
            else:
                out.append([self._live[n] for n in self._fixed_names[b] if self._live[n].requires_grad])
        return out


class _Local:
    """One layer call run on a local graph: its detached input, its output there, and (after ``B``) the
    gradient its output received."""

    __slots__ = ("x_local", "out_local", "grad")

    def __init__(self, x_local: Tensor) -> None:
        self.x_local = x_local
        self.out_local: Tensor | None = None
        self.grad: Tensor | None = None


class _Reattach(torch.autograd.Function):
    """Joins a layer call's local graph to the stage graph: forward passes the local output on; backward
    keeps the output gradient for ``W``, computes the input gradient on the local graph alone and passes
    the output gradient into the local graph too (for a caller that asks for weight gradients through the
    stage graph, such as the per-block fallback; ``B``, which asks for the input gradient only, never runs
    the local graph that way)."""

    @staticmethod
    def forward(ctx, x: Tensor, out_local: Tensor, rec: _Local) -> Tensor:  # noqa: ANN001
        ctx.rec = rec
        return out_local.view_as(out_local)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, Tensor, None]:  # noqa: ANN001
        rec = ctx.rec
        rec.grad = g
        gx = None
        if rec.x_local.requires_grad and ctx.needs_input_grad[0]:
            (gx,) = torch.autograd.grad(rec.out_local, rec.x_local, grad_outputs=g, retain_graph=True)
        return gx, g, None


class LayerCapture:
    """Forward hooks on each module of ``model`` that owns parameters directly; while ``active`` is a list,
    every call of such a module whose output requires grad appends ``(output, weights used)`` to it.

    ``local`` (the default): a call whose only tensor argument needing a gradient is its first runs on a
    *local graph*: its input is detached at the boundary, and ``_Reattach`` joins the call's output to the
    stage graph, so ``W`` walks the layers alone (all of them in one ``autograd.grad``) instead of
    everything back to the stage input. The recorded output is then the local one; ``input_grad`` reads its
    gradient from the join."""

    def __init__(self, model: nn.Module, local: bool = True):
        self.active: list[tuple[Tensor, list[Tensor]]] | None = None
        self.local = local
        self._open: dict[int, list[tuple[Tensor, _Local]]] = {}
        mods = [m for m in model.modules() if any(p is not None for p in m._parameters.values())]
        self._handles = [m.register_forward_hook(self._hook) for m in mods]
        if local:
            self._handles += [m.register_forward_pre_hook(self._pre_hook) for m in mods]

    def _pre_hook(self, mod: nn.Module, args: tuple) -> tuple | None:
        if self.active is None or not args or not isinstance(args[0], Tensor):
            return None
        if any(isinstance(a, Tensor) and a.requires_grad for a in args[1:]):
            return None
        x = args[0]
        rec = _Local(x.detach().requires_grad_(x.requires_grad))
        self._open.setdefault(id(mod), []).append((x, rec))
        return (rec.x_local, *args[1:])

    def _hook(self, mod: nn.Module, args: object, out: object) -> Tensor | None:
        opened = self._open.get(id(mod))
        x_rec = opened.pop() if opened else None
        if self.active is None or not isinstance(out, Tensor) or not out.requires_grad:
            return None
        ws = [getattr(mod, n) for n in mod._parameters]  # under functional_call: the tensors passed in
        ws = [w for w in ws if isinstance(w, Tensor) and w.requires_grad]
        if x_rec is None:
            self.active.append((out, ws))
            return None
        x, rec = x_rec
        rec.out_local = out
        joined = _Reattach.apply(x, out, rec)
        out._naspipe_local = rec  # type: ignore[attr-defined]  # input_grad reads the gradient here
        self.active.append((out, ws))
        return joined

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def input_grad(out: Tensor, x: Tensor, grad: Tensor | None, outs: Sequence[Tensor]
               ) -> tuple[Tensor, list[Tensor | None]]:
    """``B``: the gradient of ``out`` (seeded with ``grad``; None for a scalar loss) with respect to ``x``,
    and the gradient each of ``outs`` (block and layer outputs) received on the way (None for one that got
    none).

    The graph is retained for ``weight_grads``.
    """
    seen: list[Tensor | None] = [None] * len(outs)
    handles = []

    def keep(i: int):
        def hook(g: Tensor) -> None:
            seen[i] = g
        return hook

    local: list[tuple[int, _Local]] = []
    for i, t in enumerate(outs):
        rec = getattr(t, "_naspipe_local", None)
        if rec is not None:
            rec.grad = None
            local.append((i, rec))
        elif t.requires_grad:
            handles.append(t.register_hook(keep(i)))
    try:
        (gin,) = torch.autograd.grad(out, x, grad_outputs=grad, retain_graph=True)
    finally:
        for h in handles:
            h.remove()
    for i, rec in local:
        seen[i] = rec.grad
    for i, t in enumerate(outs):  # the root itself: its gradient is the seed
        if seen[i] is None and t is out and t.requires_grad:
            seen[i] = grad if grad is not None else torch.ones_like(out)
    return gin, seen


def weight_grads(block_outs: Sequence[Tensor], block_grads: Sequence[Tensor | None],
                 targets: Sequence[Sequence[Tensor]], layers: Sequence[tuple[Tensor, list[Tensor]]] = (),
                 layer_grads: Sequence[Tensor | None] = ()) -> dict[Tensor, Tensor | None]:
    """``W``: the gradients of ``targets`` (per block) as tensor -> gradient, per layer call where possible
    (``layers``: ``(output, weights)`` with the output gradients ``layer_grads``), else per block.

    A target that does not influence its block's output gets None, as ``.grad`` would stay None in a full
    backward. The graph is retained (dropping the stash frees it).
    """
    wanted = {t for ts in targets for t in ts}
    uses: dict[Tensor, int] = {}
    for _, ws in layers:
        for w in ws:
            uses[w] = uses.get(w, 0) + 1
    grads: dict[Tensor, Tensor | None] = {}
    # layer calls on local graphs (LayerCapture's default) share no node: one autograd.grad over all of them
    # computes each weight's gradient from its own call alone, in one walk of the small local graphs
    roots, seeds, inputs = [], [], []
    for (t_out, ws), g in reversed(list(zip(layers, layer_grads, strict=True))):
        mine = [w for w in ws if w in wanted]
        if g is None or not mine or any(uses[w] > 1 for w in mine):
            continue  # left to the block-level fallback
        if getattr(t_out, "_naspipe_local", None) is not None:
            roots.append(t_out)
            seeds.append(g)
            inputs += mine
            continue
        got = torch.autograd.grad(t_out, mine, grad_outputs=g, retain_graph=True, allow_unused=True)
        grads.update(zip(mine, got, strict=True))
    if roots:
        got = torch.autograd.grad(roots, inputs, grad_outputs=seeds, retain_graph=True, allow_unused=True)
        grads.update(zip(inputs, got, strict=True))
    for t_out, g, ts in reversed(list(zip(block_outs, block_grads, targets, strict=True))):
        rest = [t for t in ts if t not in grads]
        if not rest:
            continue
        if g is None or not t_out.requires_grad:
            grads.update({t: None for t in rest})
            continue
        got = torch.autograd.grad(t_out, rest, grad_outputs=g, retain_graph=True, allow_unused=True)
        grads.update(zip(rest, got, strict=True))
    return grads
