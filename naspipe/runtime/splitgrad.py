"""The split backward with autograd: ``B`` computes the input gradient, ``W`` the weight gradients, per block.

Why it exists: zero-bubble pipelines split a stage's backward into ``B`` (the gradient with respect to the
stage input, which the upstream stage waits for) and ``W`` (the gradients with respect to the weights, which
only the update needs). This module does that split with autograd alone, no hand-written gradients
(TECHNIQUES section 8):

* during ``F`` the stage model appends each block's output tensor to a list (``StageModel.capturing``);
* ``input_grad`` (``B``) registers a hook on each captured output, calls
  ``torch.autograd.grad(out, x, grad_outputs=g, retain_graph=True)`` and returns the input gradient together
  with the gradient of every block output (what the hooks saw);
* ``weight_grads`` (``W``) calls ``torch.autograd.grad(block_out, block_targets, grad_outputs=captured)``
  once per block that owns trainable tensors, and frees that block's part of the graph as it goes.

Bit-identity with one full backward: each weight gradient is computed by the same autograd node from the
same incoming gradient, and a tensor receives contributions from one block only (candidates and fixed blocks
own disjoint parameters; ``delayed:D`` gives each fixed parameter its own leaf), so no sum is reordered.
The block-output gradient a hook sees is the fully accumulated one, as in the full backward.

``BlockTargets`` maps each block of a stage to the tensors its weight gradients are taken for: the
candidate the subnet uses (parameters that require grad) and, for a fixed block, its fixed-version leaves
(``delayed:D``, ``serial``) or its own trainable parameters; frozen blocks have none and cost nothing in ``W``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

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


def input_grad(out: Tensor, x: Tensor, grad: Tensor | None, block_outs: Sequence[Tensor]
               ) -> tuple[Tensor, list[Tensor | None]]:
    """``B``: the gradient of ``out`` (seeded with ``grad``; None for a scalar loss) with respect to ``x``,
    and the gradient each of ``block_outs`` received on the way (None for an output that got none).

    The graph is retained for ``weight_grads``.
    """
    seen: list[Tensor | None] = [None] * len(block_outs)
    handles = []

    def keep(i: int):
        def hook(g: Tensor) -> None:
            seen[i] = g
        return hook

    for i, t in enumerate(block_outs):
        if t.requires_grad:
            handles.append(t.register_hook(keep(i)))
    try:
        (gin,) = torch.autograd.grad(out, x, grad_outputs=grad, retain_graph=True)
    finally:
        for h in handles:
            h.remove()
    for i, t in enumerate(block_outs):  # the root itself: its gradient is the seed
        if seen[i] is None and t is out and t.requires_grad:
            seen[i] = grad if grad is not None else torch.ones_like(out)
    return gin, seen


def weight_grads(block_outs: Sequence[Tensor], out_grads: Sequence[Tensor | None],
                 targets: Sequence[Sequence[Tensor]]) -> dict[Tensor, Tensor | None]:
    """``W``: per block, the gradients of its ``targets`` from its output gradient (tensor -> gradient).

    Blocks are processed last to first and each call frees its block's part of the graph. A target that
    does not influence its block's output gets None, as ``.grad`` would stay None in a full backward.
    """
    grads: dict[Tensor, Tensor | None] = {}
    for t_out, g, ts in reversed(list(zip(block_outs, out_grads, targets, strict=True))):
        if not ts:
            continue
        if g is None or not t_out.requires_grad:
            grads.update({t: None for t in ts})
            continue
        got = torch.autograd.grad(t_out, list(ts), grad_outputs=g, retain_graph=False, allow_unused=True)
        grads.update(zip(ts, got, strict=True))
    return grads
