"""Can this space's model be built and run? Checked before any process starts.

Why it exists: a space JSON can satisfy the schema (``naspipe.spaces.space``) and still name a model that cannot be
built (an attention candidate whose head count does not divide ``d_model``, an unknown op, a zero kernel or
vocabulary, a fixed block in the wrong place, an absurd batch). Found inside the stage processes, such a
space ends a run with a C++ stack dump; here it becomes one line naming the block, the candidate and what is
wrong (``ModelCheckError``, which the CLI reports with exit code 2).

``check_model(space, seed, shared)`` makes one probe batch of two samples, then, block by block, builds the
block (all its candidates) and runs every candidate on the previous block's probe output; the candidates of a
block must agree on the output's shape and dtype, and the last block's output must fit the loss. Finally a
full batch is sized against this machine's memory. Results are cached per (space, seed, shared layers).
What depends on the run's shape is checked on top: ``check_messages`` (a block output that ends a stage must be
a dtype and a rank the transport sends) and ``probe_replica_shards`` (a user supernet runs on a shard of
``batch_size / R``).
"""

from __future__ import annotations

import dataclasses
import json

from naspipe.errors import UserError
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace
from naspipe.supernet.usercode import first_line, user_errors

PROBE_SAMPLES = 2
MEMORY_SHARE = 0.5  # a batch's activations over all blocks may take at most this share of the machine's memory
_checked: set[tuple[str, int, str]] = set()
_out_dtypes: dict[tuple[str, int, str], list] = {}  # (space, seed, shared) -> each block's output leaves' (place,
# dtype)
_unsendable: dict[tuple[str, int, str], list] = {}  # (space, seed, shared) -> per block: why it cannot be sent


class ModelCheckError(UserError):
    """The space's model cannot be built or run (one line naming the block, the candidate and the reason)."""


def _line(e: BaseException) -> str:
    """The first line of an exception's message (torch's C++ errors carry a stack below it)."""
    return first_line(e) or type(e).__name__


def _where(space: SearchSpace, b: int, c: int | None) -> str:
    blk = space.blocks[b]
    if c is None:
        return f"space {space.name!r}: block {b} ({blk.name!r})"
    cand = blk.candidates[c]
    args = json.dumps(dict(cand.args), sort_keys=True) if cand.args else "{}"
    return f"space {space.name!r}: block {b} ({blk.name!r}), candidate {c} ({cand.name!r}, op {cand.op!r}, args {args})"


def check_model(space: SearchSpace, seed: int = 0, shared: SharedLayers | None = None) -> None:
    """Build every block of ``space`` and run every candidate on a probe batch; ModelCheckError if anything fails."""
    shared = shared or SharedLayers()
    key = (space.to_json(), int(seed), str(shared))
    if key in _checked:
        return
    import torch

    from naspipe.models import build_stage, make_batch, model_kind
    from naspipe.models.data import input_of, target_of
    from naspipe.supernet import messages

    try:
        kind = model_kind(space)
    except ValueError as e:
        raise ModelCheckError(str(e)) from None
    probe_space = dataclasses.replace(space, batch_size=min(space.batch_size, PROBE_SAMPLES))
    try:
        batch = make_batch(probe_space, seed, 0)
        x, target = input_of(probe_space, batch), target_of(probe_space, batch)
    except user_errors() as e:  # noqa: BLE001 - any failure of the model description is the user's to fix
        raise ModelCheckError(f"space {space.name!r}: its {kind} model cannot make a batch: {_line(e)}") from None
    nb = space.num_blocks
    per_sample = 0
    dtypes = []
    unsendable: list[str | None] = []  # per block: why its output (candidate 0's; all agree) cannot be sent
    from naspipe.supernet.seeding import GLOBAL_RNG

    # the caller's random state stays as it was, and no other thread's seeded build interleaves with this one
    with GLOBAL_RNG, torch.no_grad(), torch.random.fork_rng(devices=[]):
        for b, blk in enumerate(space.blocks):
            try:
                model = build_stage(space, range(b, b + 1), seed, shared)
            except user_errors() as e:  # noqa: BLE001
                raise ModelCheckError(_blame_build(space, b, e)) from None
            outs = []
            for c in range(blk.k):
                sub = [0] * nb
                sub[b] = c
                try:
                    y = model(x, sub)
                except user_errors() as e:  # noqa: BLE001
                    raise ModelCheckError(f"{_where(space, b, c)}: fails on a probe batch: {_line(e)}") from None
                bad = messages.problem(y, sendable=False)  # (what is sent: check_messages)
                if bad is not None:
                    raise ModelCheckError(f"{_where(space, b, c)}: {bad}")
                if outs and messages.signature(y) != messages.signature(outs[0]):
                    differ = "" if _shown(y) != _shown(outs[0]) else f" ({messages.difference(y, outs[0])})"
                    raise ModelCheckError(f"{_where(space, b, c)}: gives {_shown(y)}, but candidate 0 "
                                          f"gives {_shown(outs[0])}{differ}: the candidates of a block must agree")
                outs.append(y)
            x = outs[0]
            dtypes.append(list(zip(messages.leaf_places(x), [t.dtype for t in messages.leaves(x)], strict=True)))
            unsendable.append(messages.problem(x, sendable=True))  # (a rank or dtype: check_messages, per partition)
            first = messages.leaves(x)[0]
            per_sample = max(per_sample, messages.nbytes(x) // max(1, first.shape[0] if first.dim() else 1))
        try:
            model.loss(x, target)
        except user_errors() as e:  # noqa: BLE001
            raise ModelCheckError(f"{_where(space, nb - 1, None)}: its output {messages.describe(x)} does not fit the "
                                  f"loss: {_line(e)}") from None
    _check_batch_memory(space, per_sample)
    _out_dtypes[key] = dtypes
    _unsendable[key] = unsendable
    _checked.add(key)


def _shown(y: object) -> str:
    from naspipe.supernet import messages

    return messages.describe(y) + (f" {y.dtype}" if hasattr(y, "dtype") else "")


def check_messages(space: SearchSpace, stage_ends: list[int], sendable: tuple, seed: int = 0,
                   shared: SharedLayers | None = None) -> None:
    """ModelCheckError when the output of block ``b`` in ``stage_ends`` (the message to the next stage) has a
    dtype not in ``sendable`` or a leaf of more dims than the transport sends: found before start, naming the
    candidate and the leaf, not as a transport error in a stage."""
    shared = shared or SharedLayers()
    check_model(space, seed, shared)
    key = (space.to_json(), int(seed), str(shared))
    dtypes = _out_dtypes[key]
    for b in stage_ends:
        why = _unsendable[key][b]
        if why is not None and all(d in sendable for _, d in dtypes[b]):  # (a dtype: named below)
            raise ModelCheckError(f"{_where(space, b, 0)}: forward {why}; this block's output ends a stage, so it "
                                  "is sent: reshape it, or partition elsewhere")
        bad = next(((place, d) for place, d in dtypes[b] if d not in sendable), None)
        if bad is not None:  # (every candidate of a block gives the same dtypes: candidate 0 stands for them)
            raise ModelCheckError(f"{_where(space, b, 0)}: forward returned a tensor of dtype {bad[1]}{bad[0]}; this "
                                  f"block's output ends a stage, and messages between stages can be "
                                  f"{', '.join(str(d) for d in sendable)}; cast it, or partition elsewhere")


def probe_replica_shards(space: SearchSpace, replicas: int) -> None:
    """With ``replicas`` > 1, run a user supernet's blocks on a shard of ``batch_size / replicas`` samples
    (``naspipe.supernet.validate.probe_replicas``; the presets are known to shard); ModelCheckError if one fails."""
    from naspipe.supernet.declare import SupernetError
    from naspipe.supernet.load import KIND, supernet_of
    from naspipe.supernet.validate import probe_replicas

    if replicas > 1 and space.model.get("kind") == KIND:
        try:
            probe_replicas(supernet_of(space), replicas, where=f"space {space.name!r}: ")
        except SupernetError as e:
            raise ModelCheckError(str(e)) from None


def _blame_build(space: SearchSpace, b: int, error: BaseException) -> str:
    """Name the candidate of block ``b`` whose construction fails (the block's own error if none alone does)."""
    import torch

    from naspipe.supernet.load import supernet_of
    from naspipe.supernet.seeding import GLOBAL_RNG

    try:
        sn = supernet_of(space)
    except user_errors() as e:  # noqa: BLE001
        return f"{_where(space, b, None)}: cannot be built: {_line(e)}"
    blk = space.blocks[b]
    for c in range(blk.k):
        try:
            with GLOBAL_RNG, torch.random.fork_rng(devices=[]):
                sn.factory(b, c)()
        except user_errors() as e:  # noqa: BLE001
            return f"{_where(space, b, c)}: cannot be built: {_line(e)}"
    return f"{_where(space, b, None)}: cannot be built: {_line(error)}"


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the platform does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _check_batch_memory(space: SearchSpace, per_sample: int) -> None:
    """Refuse a batch whose block outputs alone would not fit in ``MEMORY_SHARE`` of this machine's memory."""
    total = machine_memory()
    if total is None:
        return
    need = space.batch_size * per_sample * space.num_blocks
    if need > MEMORY_SHARE * total:
        raise ModelCheckError(f"space {space.name!r}: field 'batch_size' {space.batch_size} needs about {need} bytes "
                              f"of activations per subnet ({per_sample} bytes per sample and block), more than "
                              f"{MEMORY_SHARE:.0%} of this machine's {total} bytes; use a smaller batch_size")
