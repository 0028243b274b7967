"""Explicit weight gradients of the dominant layer types, computed from their autograd node's saved tensors.

Why it exists: the split backward (``naspipe.runtime.split_backward.splitgrad``) wants ``B`` to cost the
input-gradient half of a backward and ``W`` the weight-gradient half, as zero-bubble pipelines do. ``B`` is one
``torch.autograd.grad`` for the stage input, which runs no weight-gradient kernel (autograd skips the edges
no requested input needs). ``W`` then needs, per layer call, the kernels autograd would have run for the
weights; this module calls exactly those kernels, with the tensors the call's autograd node saved, so each
gradient has the same bits as in one full backward:

* ``nn.Linear`` (``addmm`` / ``mm`` on the input flattened to 2-d, or ``matmul`` + ``add`` on a
  non-contiguous n-d input): weight ``grad.t().mm(input_2d)`` (autograd's ``mm_mat2_backward`` for the
  column-major ``weight.t()``), bias the sum over the leading dimensions of the gradient the bias's node received
  (the engine's ``sum_to``: the n-d gradient after ``add``, the 2-d one in ``addmm``; on a non-contiguous
  gradient the two differ in the last bits);
* ``nn.LayerNorm``: ``native_layer_norm_backward`` with the saved mean and rstd, input gradient masked off;
* ``nn.Conv1d/2d/3d``: ``convolution_backward`` with the saved input (padded first for a padding mode other
  than zeros), input gradient masked off.

``recipe`` returns None for anything else (another module type, a subclass with its own ``forward``, a
weight that is not the node's, a weight with a gradient hook, an unexpected graph shape); the caller then falls back to
``torch.autograd.grad``, which is as exact but walks the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

Recipe = Callable[[Tensor], list[Tensor]]  # output gradient -> the gradient of each weight, in order

_CONVS = (nn.Conv1d.forward, nn.Conv2d.forward, nn.Conv3d.forward)


def _leaf(node: object, w: Tensor) -> bool:
    return node is not None and getattr(node, "variable", None) is w


def _slots(node: object, weights: Sequence[Tensor], edges: Sequence[int]) -> list[int] | None:
    """For each weight, the index in ``edges`` of the node's next edge that accumulates into it."""
    nxt = node.next_functions  # type: ignore[attr-defined]
    out = []
    for w in weights:
        hit = [k for k, e in enumerate(edges) if _leaf(nxt[e][0], w)]
        if len(hit) != 1:
            return None
        out.append(hit[0])
    return out


def _masked(fn: object, node: str, weights: Sequence[Tensor], op: Callable[..., Any],
            saved: Callable[[Any], tuple[Any, ...]]) -> Recipe | None:
    """A node whose backward kernel ``op(grad, *saved(fn), mask)`` returns (input, weight, bias) gradients: the
    weights' ones, input gradient masked off (LayerNorm, convolution)."""
    if fn.name() != node:  # type: ignore[attr-defined]
        return None
    slots = _slots(fn, weights, (1, 2))
    if slots is None:
        return None
    args, mask = saved(fn), [False, 0 in slots, 1 in slots]

    def grads(g: Tensor) -> list[Tensor]:
        res = op(g, *args, mask)
        return [res[1 + k] for k in slots]
    return grads


def _layer_norm(fn: object, weights: Sequence[Tensor]) -> Recipe | None:
    return _masked(fn, "NativeLayerNormBackward0", weights, torch.ops.aten.native_layer_norm_backward,
                   lambda f: (f._saved_input, f._saved_normalized_shape, f._saved_result1, f._saved_result2,
                              f._saved_weight, f._saved_bias))


def _conv(fn: object, weights: Sequence[Tensor]) -> Recipe | None:
    return _masked(fn, "ConvolutionBackward0", weights, torch.ops.aten.convolution_backward,
                   lambda f: (f._saved_input, f._saved_weight, f._saved_bias_sym_sizes_opt, f._saved_stride,
                              f._saved_padding, f._saved_dilation, f._saved_transposed, f._saved_output_padding,
                              f._saved_groups))


_LINEAR_NODES = {"AddmmBackward0", "ViewBackward0", "MmBackward0", "UnsafeViewBackward0", "AddBackward0"}


_LINEAR_PATH = _LINEAR_NODES | {"TBackward0"}


def _reaches_leaves(fn: object, weights: Sequence[Tensor], stop: object) -> bool:
    """Whether every weight is a leaf that ``F.linear``'s own nodes (transpose, view, mm, addmm, add) lead to
    from ``fn`` without passing the input's graph (``stop``): false for a weight computed from a parameter
    (``spectral_norm``'s ``weight_orig / sigma``), whose gradient the explicit rule would assign wrongly."""
    found: set[int] = set()
    todo, seen = [fn], 0
    while todo and seen < 32:
        node = todo.pop()
        seen += 1
        if node is None or node is stop:
            continue
        name = node.name()  # type: ignore[attr-defined]
        if name == "torch::autograd::AccumulateGrad":
            found.add(id(node.variable))  # type: ignore[attr-defined]
        elif name in _LINEAR_PATH:
            todo.extend(f for f, _ in node.next_functions)  # type: ignore[attr-defined]
    return all(id(w) in found for w in weights)


_FLATTEN_BACK = {"ViewBackward0", "UnsafeViewBackward0"}  # the view back to n-d after addmm/mm


def _direct_leaves(fn: object) -> tuple[object, object] | None:
    """The nodes ``F.linear``'s ``addmm``/``mm`` leads to directly for (weight, bias): the one behind the
    transpose of the weight and, for ``addmm``, its ``self`` slot (None without a bias); None for another graph
    shape. A weight or bias used as it is has its leaf's accumulator there, which ``_reaches_leaves`` would find
    by a walk; this is the walk's common case at a few attribute reads (``W`` asks once per layer call)."""
    name = fn.name()  # type: ignore[attr-defined]
    if name in _FLATTEN_BACK:
        fn = fn.next_functions[0][0]  # type: ignore[attr-defined]
        if fn is None:
            return None
        name = fn.name()  # type: ignore[attr-defined]
    nxt = fn.next_functions  # type: ignore[attr-defined]
    if name == "AddmmBackward0":
        bias, t = nxt[0][0], nxt[2][0]
    elif name == "MmBackward0":
        bias, t = None, nxt[1][0]
    else:
        return None
    if t is None or t.name() != "TBackward0":
        return None
    return t.next_functions[0][0], bias


def _used_as_they_are(fn: object, weights: Sequence[Tensor], kinds: Sequence[bool]) -> bool:
    """Whether the weight (2-d) and the bias (1-d) are leaves ``fn``'s ``addmm``/``mm`` reads directly."""
    direct = _direct_leaves(fn)
    return direct is not None and all(_leaf(direct[0] if k else direct[1], w)
                                      for w, k in zip(weights, kinds, strict=True))


def _linear(x: object, fn: object, weights: Sequence[Tensor], n_out: int) -> Recipe | None:
    """``F.linear(x, weight, bias)``: ``addmm``/``mm`` on ``x`` flattened to 2-d (contiguous or 2-d ``x``) or
    ``matmul`` (which flattens ``x`` by ``reshape``) then ``add`` of the bias; either way the weight's
    gradient is ``mm_mat2_backward``'s ``grad.t().mm(mat1)`` (``weight.t()`` is column-major) and the bias's
    the sum over the leading dimensions. ``weights`` are the call's own tensors (under ``functional_call``
    not the module's attributes), told apart by their dimension: the weight is 2-d, the bias 1-d; each of the
    shape the output (``n_out`` features) implies, or no recipe (a bias of another shape broadcasts, and its
    gradient is a reduction the rule does not make); the weight of ``x``'s dtype (under autocast the node saved
    a cast of ``x``, not ``x``)."""
    if not isinstance(x, Tensor) or x.dim() < 2 or fn.name() not in _LINEAR_NODES:  # type: ignore[attr-defined]
        return None
    n_in = x.shape[-1]
    kinds = []
    for w in weights:
        if w.dim() == 2:
            if w.stride(1) != 1 or w.stride(0) != w.shape[1] or w.shape != (n_out, n_in) or w.dtype != x.dtype:
                return None
            kinds.append(True)
        elif w.dim() == 1 and w.shape[0] == n_out:
            kinds.append(False)
        else:
            return None

    if not (_used_as_they_are(fn, weights, kinds) or _reaches_leaves(fn, weights, getattr(x, "grad_fn", None))):
        return None  # a weight computed from a parameter (spectral or weight norm): autograd's chain rule
    add = fn.name() == "AddBackward0"  # type: ignore[attr-defined]

    def grads(g: Tensor) -> list[Tensor]:
        g2 = g if g.dim() == 2 else g.reshape(-1, g.shape[-1])  # what the view's backward hands addmm/mm
        # the bias: sum_to of the gradient its node got (the n-d one after add, the 2-d one in addmm)
        return [torch.mm(g2.t(), x if x.dim() == 2 else x.reshape(-1, n_in)) if k
                else (g.sum(tuple(range(g.dim() - 1))) if add else g2.sum(0)) for k in kinds]
    return grads


def recipe(mod: nn.Module, x: object, out: Tensor, weights: Sequence[Tensor]) -> Recipe | None:
    """How ``W`` computes the gradients of ``weights`` (tensors ``mod`` used in its call on input ``x``, in
    order) from the gradient of ``out`` (the call's output) explicitly, or None where
    ``torch.autograd.grad`` must."""
    fn = out.grad_fn
    if fn is None or not weights:
        return None
    if any(getattr(w, "_backward_hooks", None) for w in weights):
        return None  # a gradient hook on a weight (``register_hook``): autograd applies it, the kernels would not
    fwd = type(mod).forward
    if fwd is nn.Linear.forward:
        return _linear(x, fn, weights, out.shape[-1] if out.dim() else 0)
    if fwd is nn.LayerNorm.forward:
        return _layer_norm(fn, weights)
    if fwd in _CONVS:  # (another padding mode pads first: the node saved the padded input)
        return _conv(fn, weights)
    return None
