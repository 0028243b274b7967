"""Structured messages between blocks and stages: one tensor, or a tuple, list or dict of tensors (a pytree).

Why it exists: a cell search space (NAS-Bench-201, DARTS) passes several node states from edge to edge; packing
them into one stacked tensor makes every message (and every edge's copy) as large as the whole stack. A block
may therefore take and return a pytree of tensors. This module is the one place that knows what such a message
is, for the probe (``naspipe.supernet.validate``), the stage executor, the transport and the profile:

* ``leaves(msg)``: its *distinct* tensors in a fixed order (flattening order, the second occurrence of the same
  tensor object dropped): a skip edge that returns a node state unchanged puts one tensor in two places, and it
  travels once, arrives as one tensor in both places, and receives one gradient accumulated in the same order as
  in the whole model's backward (so the pipeline keeps the sequential run's bits);
* ``layout(msg)`` / ``rebuild(leaves, layout)``: the structure (``torch.utils._pytree``'s spec, serialised)
  plus which distinct leaf fills each place, as bytes the transport sends when it changes;
* ``problem(msg)``: why a value cannot be a message (a non-tensor leaf named by its path, a dtype or a rank the
  transport does not send), or None;
* ``nbytes``, ``describe``, ``identical``: bytes of its distinct leaves, a short description for error lines,
  bit equality of two messages (the probe's determinism check);
* ``at_boundary(msg)``: the one layout every block boundary has, forward and backward (below).

One layout at every block boundary. A block may return any view: transposed or permuted (a token-mixing block
ends in ``.transpose()``), expanded (stride 0), channels-last, sliced, overlapping. The next block computes with
what it gets, and a matrix product or a convolution rounds differently on another layout. The transport sends a
fresh contiguous copy to the next stage, so without one rule the block after a stage boundary would see another
layout than in the sequential reference, and another than on a partition that keeps both blocks on one stage.
The rule: after every block, in every trainer (the reference, the stages, replicas, the split backward, the truth
trainer: they all run ``StageModel.forward``), each leaf is made *canonical*: standard contiguous strides, offset
0 and a 64-byte-aligned start, copied only where it is not (``canonical``); and the gradient that flows back into
a block's output is made canonical the same way (a gradient hook), as the transport's copy makes it between stages.
A plain contiguous output passes unchanged (no copy), so supernets whose blocks return plain tensors keep their
bits.

A plain tensor stays a plain tensor everywhere (the wire format of single-tensor supernets is unchanged).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import Tensor

# dtypes the transport sends (codes are positions: append only); integer and bool leaves carry no gradient (token
# ids between stages); no int16: NCCL has no such type
WIRE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16,
               torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)
MAX_DIMS = 7
CONTAINERS = (tuple, list, dict)


def is_structured(msg: Any) -> bool:
    """True for a pytree message (anything but one plain tensor)."""
    return not isinstance(msg, Tensor)


def _flat(msg: Any) -> tuple[list[Any], Any]:
    return pytree.tree_flatten(msg)


def leaves(msg: Any) -> list[Tensor]:
    """The distinct tensors of ``msg`` in flattening order (a tensor object appearing twice is listed once)."""
    if isinstance(msg, Tensor):
        return [msg]
    seen: set[int] = set()
    out = []
    for t in _flat(msg)[0]:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def leaf_places(msg: Any) -> list[str]:
    """Where each of ``leaves(msg)`` sits, in a phrase for a refusal: "" for a plain tensor, else " (tuple element
    [1])", " (dict element ['a'])"."""
    if isinstance(msg, Tensor):
        return [""]
    seen: set[int] = set()
    out = []
    for key, t in pytree.tree_flatten_with_path(msg)[0]:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(f" ({_place(msg, key)})")
    return out


def layout(msg: Any) -> bytes:
    """The structure of ``msg`` and, per place, the index of its distinct leaf: what ``rebuild`` needs."""
    flat, spec = _flat(msg)
    first: dict[int, int] = {}
    slots = [first.setdefault(id(t), len(first)) for t in flat]
    return json.dumps({"spec": pytree.treespec_dumps(spec), "slots": slots}, separators=(",", ":")).encode()


def rebuild(parts: Sequence[Tensor], lay: bytes) -> Any:
    """The message whose distinct leaves are ``parts`` and whose layout is ``lay``."""
    d = json.loads(lay.decode())
    spec = pytree.treespec_loads(d["spec"])
    return pytree.tree_unflatten([parts[i] for i in d["slots"]], spec)


def _path(key: Any) -> str:
    return pytree.keystr(key) or "(top)"


def _place(msg: Any, key: Any) -> str:
    """Where a leaf sits in a refusal: "tuple element [1]", "dict element ['a']"."""
    return f"{type(msg).__name__} element {_path(key)}"


def problem(msg: Any, sendable: bool = True) -> str | None:
    """Why ``msg`` cannot be a block's output, in a phrase naming the offending leaf, or None.

    ``sendable``: also refuse leaves the transport cannot send (dtype, rank). Containers are tuple, list and dict
    (string keys), nested as deep as needed; anything else is a leaf and must be a tensor."""
    if isinstance(msg, Tensor):
        return _tensor_problem(msg, "") if sendable else None
    if not isinstance(msg, CONTAINERS):
        return (f"returned {type(msg).__name__}, not a tensor nor a tuple, list or dict of tensors (a block's output "
                "is the next block's input, sent between stages)")
    pairs, _ = pytree.tree_flatten_with_path(msg)
    if not pairs:
        return f"returned an empty {type(msg).__name__}; a message needs at least one tensor"
    for key, leaf in pairs:
        where = _place(msg, key)
        if not isinstance(leaf, Tensor):
            return (f"returned a {where} that is a {type(leaf).__name__}, not a tensor; every leaf of a message must "
                    f"be a tensor (make it one, e.g. torch.tensor(...), or keep it out of the message)")
        if sendable:
            bad = _tensor_problem(leaf, f" ({where})")
            if bad is not None:
                return bad
    for key, _ in pairs:
        for k in key:
            if isinstance(k, pytree.MappingKey) and not isinstance(k.key, str):
                return f"returned a dict with key {k.key!r}; a message's dict keys must be strings"
    try:
        layout(msg)
    except Exception as e:  # noqa: BLE001 - a container torch cannot serialise (e.g. a namedtuple)
        return f"returned a {type(msg).__name__} whose structure cannot be sent ({e}); use tuple, list or dict"
    return None


def _tensor_problem(t: Tensor, where: str) -> str | None:
    if t.dtype not in WIRE_DTYPES:
        return (f"returned a tensor of dtype {t.dtype}{where}, which cannot be sent between stages; supported: "
                f"{', '.join(str(d).removeprefix('torch.') for d in WIRE_DTYPES)}")
    if t.dim() > MAX_DIMS:
        return f"returned a tensor of {t.dim()} dims{where}; a message's tensors have at most {MAX_DIMS} dims"
    return None


def nbytes(msg: Any) -> int:
    """Bytes of the distinct leaves of ``msg`` (what travels)."""
    return sum(t.numel() * t.element_size() for t in leaves(msg))


def signature(msg: Any) -> tuple[Any, ...]:
    """Structure, shapes and dtypes: equal for two messages a stage could exchange for one another."""
    if isinstance(msg, Tensor):
        return ("tensor", tuple(msg.shape), msg.dtype)
    flat, spec = _flat(msg)
    return (str(spec), tuple((tuple(t.shape), t.dtype) if isinstance(t, Tensor) else type(t) for t in flat))


def describe(msg: Any) -> str:
    """``(32, 16, 8, 8)`` for a tensor, ``tuple of 3 [(32, 16, 8, 8), ...]`` for a structured message."""
    if isinstance(msg, Tensor):
        return str(tuple(msg.shape))
    flat = _flat(msg)[0]
    shapes = ", ".join(str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__ for t in flat[:4])
    more = ", ..." if len(flat) > 4 else ""
    return f"{type(msg).__name__} of {len(flat)} [{shapes}{more}]"


def difference(a: Any, b: Any) -> str:
    """What first tells message ``a`` from ``b`` (for a refusal whose two descriptions read the same): leaves at
    other paths or in another order (a dict keeps its keys in insertion order), other containers, or the first leaf
    whose shape or dtype differs, named by its path; empty when their signatures agree."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return "" if signature(a) == signature(b) else f"{_leaf_text(a)} against {_leaf_text(b)}"
    pa, spec_a = pytree.tree_flatten_with_path(a)
    pb, spec_b = pytree.tree_flatten_with_path(b)
    paths_a, paths_b = [_path(k) for k, _ in pa], [_path(k) for k, _ in pb]
    if paths_a != paths_b:
        order = " (the same leaves in another order: a dict keeps its keys in the order they were set)" \
            if sorted(paths_a) == sorted(paths_b) else ""
        return f"leaves {_few(paths_a)} against {_few(paths_b)}{order}"
    if type(a) is not type(b):
        return f"a {type(a).__name__} against a {type(b).__name__}"
    if str(spec_a) != str(spec_b):
        return f"structure {spec_a} against {spec_b}"
    for (key, x), (_, y) in zip(pa, pb, strict=True):
        if signature(x) != signature(y) if isinstance(x, Tensor) and isinstance(y, Tensor) else type(x) is not type(y):
            return f"{type(a).__name__} element {_path(key)}: {_leaf_text(x)} against {_leaf_text(y)}"
    return ""


def _leaf_text(t: Any) -> str:
    if isinstance(t, Tensor):
        return f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}"
    return describe(t) if isinstance(t, CONTAINERS) else type(t).__name__


def _few(paths: list[str], most: int = 6) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def identical(a: Any, b: Any) -> bool:
    """Same structure and bit-equal leaves (NaN equal to NaN: a non-finite output is not randomness)."""
    if signature(a) != signature(b):
        return False
    return all(_bit_equal(x, y) for x, y in zip(_flat(a)[0], _flat(b)[0], strict=True))


def _bit_equal(a: Tensor, b: Tensor) -> bool:
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


def map_leaves(fn: Any, msg: Any) -> Any:
    """``msg`` with every distinct leaf replaced by ``fn(leaf)`` (a tensor in two places stays one tensor)."""
    if isinstance(msg, Tensor):
        return fn(msg)
    done: dict[int, Any] = {}

    def one(t: Tensor) -> Any:
        if id(t) not in done:
            done[id(t)] = fn(t)
        return done[id(t)]

    return pytree.tree_map(one, msg)


def requires_grad(msg: Any) -> bool:
    """True when any leaf of ``msg`` requires grad."""
    return any(t.requires_grad for t in leaves(msg))


def backward(msg: Any, grads: Any) -> None:
    """``torch.autograd.backward`` from the leaves of ``msg`` that require grad and got a gradient (``grads``: one
    per distinct leaf, None for none; or one tensor for a plain tensor message)."""
    roots, seeds = roots_and_seeds(msg, grads)
    if roots:
        torch.autograd.backward(roots, seeds)


def roots_and_seeds(msg: Any, grads: Any) -> tuple[list[Tensor], list[Tensor]]:
    """The leaves of ``msg`` that take part in a backward and their gradients."""
    if grads is None:  # no gradient at all (the loss downstream does not depend on this message)
        return [], []
    outs = leaves(msg)
    gs = [grads] if isinstance(msg, Tensor) else list(grads)
    if len(gs) != len(outs):
        raise RuntimeError(f"a gradient message of {len(gs)} tensors for an output of {len(outs)}")
    pairs = [(o, g) for o, g in zip(outs, gs, strict=True) if g is not None and o.requires_grad]
    return [o for o, _ in pairs], [g for _, g in pairs]


ALIGN = 64  # bytes: what torch's CPU allocator gives every fresh tensor (a copy received from the transport)


def _standard_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def is_canonical(t: Tensor) -> bool:
    """Standard contiguous strides (size-1 dimensions included), offset 0 and an aligned start: the layout of a
    fresh contiguous tensor, as the transport delivers one."""
    if t.numel() == 0 or t.layout != torch.strided:
        return True
    return (t.stride() == _standard_strides(t.shape) and t.storage_offset() == 0
            and t.data_ptr() % ALIGN == 0)


def canonical(t: Tensor) -> Tensor:
    """``t`` itself when canonical, else a fresh contiguous copy of it: the same values, and differentiable (the
    copy's gradient flows back to ``t``)."""
    if is_canonical(t):
        return t
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def _at_boundary_leaf(t: Tensor) -> Tensor:
    out = canonical(t)
    if out.requires_grad and torch.is_grad_enabled():
        out.register_hook(canonical)  # the gradient into the block's output, as the transport delivers one
    return out


def at_boundary(msg: Any) -> Any:
    """``msg`` as every next block sees it: each distinct leaf canonical, forward and backward (a tensor in two
    places stays one tensor)."""
    return map_leaves(_at_boundary_leaf, msg)
