"""Refuse bad user code before any process starts: one forward of every candidate on one batch.

Why it exists: a factory that raises, candidates of one block whose outputs differ in shape, a loss
that is not a scalar or a ``data`` that is not deterministic would otherwise surface as a crash (or,
worse, a silent mismatch) inside a stage process minutes into a run. ``probe_supernet`` builds every
candidate exactly as a stage would, draws batch 0 twice, runs each candidate on the previous block's
output and the loss on the head's output, and raises ``SupernetError`` with one line naming the block
and the candidate. It runs once per supernet object in a process, and records each block's digest of its
candidates' shapes and initial weights (``probed_weights``; ``naspipe.supernet.definition``), which the run's
identity holds.

What a pipeline cannot reproduce is refused here too: every candidate is built twice and must have the same
initial weights (a factory drawing from numpy's global generator does not); batch 0 must hold ``batch_size``
samples along dim 0 (the dimension replicas split) with one target tensor; a candidate run twice from the same
state must give the same output (no randomness from torch's global generator, e.g. dropout, nor a lazy module);
and a fixed block's forward must not change what its next forward computes (e.g. spectral_norm), because a
pipeline runs a fixed block's forwards out of sequence order (a candidate's run in sequence order: that is accepted).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from naspipe.spaces.space import replicas_error
from naspipe.supernet.declare import Supernet, SupernetError
from naspipe.supernet.usercode import first_line, user_errors

_PROBED: dict[int, Supernet] = {}
_PROBED_SHARDS: dict[tuple[int, int], Supernet] = {}
# (id(blocks), id(init)) -> (blocks, init, {label: digest of its candidates' initial weights}): kept alive
_WEIGHTS: dict[tuple[int, int], tuple[Any, Any, dict[str, str]]] = {}


def probe_supernet(sn: Supernet, where: str = "") -> None:
    """Build and run every candidate once on batch 0; SupernetError (prefixed by ``where``) on bad user code."""
    if _PROBED.get(id(sn)) is sn:
        return
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what user code prints must not mix into --json output
            digests = _probe(sn)
    except SupernetError as e:
        raise SupernetError(f"{where}{e}") from None
    _PROBED[id(sn)] = sn
    _WEIGHTS[(id(sn.blocks), id(sn.init))] = (sn.blocks, sn.init, digests)


def probed_weights(sn: Supernet) -> dict[str, str] | None:
    """The digest of each block's candidates' shapes and initial weights (by label) that the probe of ``sn`` (or of
    a supernet with the same blocks and init, e.g. ``sn.with_costs(...)``'s original) computed; None if unprobed."""
    hit = _WEIGHTS.get((id(sn.blocks), id(sn.init)))
    return dict(hit[2]) if hit is not None and hit[0] is sn.blocks and hit[1] is sn.init else None


def probe_replicas(sn: Supernet, replicas: int, where: str = "") -> None:
    """With ``replicas`` > 1 every replica computes ``batch_size / replicas`` samples: run every candidate and the
    loss on shard 0 of batch 0 (BatchNorm needs more than one sample per channel, say); SupernetError (prefixed by
    ``where``) naming the block and the candidate."""
    if replicas == 1 or _PROBED_SHARDS.get((id(sn), replicas)) is sn:
        return
    try:
        _probe_shards(sn, replicas)
    except SupernetError as e:
        raise SupernetError(f"{where}{e}") from None
    _PROBED_SHARDS[(id(sn), replicas)] = sn


def _probe_shards(sn: Supernet, replicas: int) -> None:
    import torch

    from naspipe.supernet.build import build_candidate, draw_batch
    from naspipe.supernet.seeding import hashed_generator

    bs = sn.batch_size
    if (why := replicas_error(bs, replicas)) is not None:
        raise SupernetError(f"--{why}")
    x, target = draw_batch(sn.data, bs, hashed_generator("data-user", 0, 0), 0)
    _check_batch_rows(sn, x, target)
    size = bs // replicas  # replica 0's shard: rows [0, B/R) (naspipe.models.shards, not imported: it imports us)
    x, target = x.narrow(0, 0, size).contiguous(), target.narrow(0, 0, size).contiguous()
    what = f" (a shard of {bs // replicas} of batch_size {bs} with --replicas {replicas})"
    with torch.no_grad():
        for b, blk in enumerate(sn.blocks):
            outs = []
            for c, name in enumerate(blk.candidates):
                mod = build_candidate(sn, b, c, 0)
                outs.append(_forward(blk, name, mod, x, what, sendable=False))
            x = outs[0]
        try:
            sn.loss(x, target)
        except user_errors() as e:  # noqa: BLE001
            raise SupernetError(f"loss raised {type(e).__name__} on the head's output {_describe(x)}{what}: "
                                f"{_line(e)}") from None


def _same(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and bool(torch.equal(a, b)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _probe(sn: Supernet) -> dict[str, str]:
    """Probe ``sn``; returns the digest of each block's candidates' shapes and initial weights (by label)."""
    import torch

    from naspipe.supernet.build import build_candidate, draw_batch
    from naspipe.supernet.definition import WeightsDigest
    from naspipe.supernet.seeding import hashed_generator

    def draw() -> tuple[Any, Any]:
        try:
            return draw_batch(sn.data, sn.batch_size, hashed_generator("data-user", 0, 0), 0)
        except SupernetError:
            raise
        except user_errors() as e:  # noqa: BLE001
            raise SupernetError(f"data raised {type(e).__name__} drawing batch 0: {_line(e)}") from None

    holder = torch.nn.ModuleDict()
    for blk in sn.blocks:  # names nn.ModuleDict cannot hold (its own attributes)
        for what, name in (("label", blk.label), *((f"block {blk.label!r}: candidate", n) for n in blk.candidates)):
            if hasattr(holder, name):
                raise SupernetError(f"{what} {name!r} cannot name a torch module: it is an attribute of "
                                    "nn.ModuleDict; choose another name")
    x, target = draw()
    x2, target2 = draw()
    if not (_same(x, x2) and _same(target, target2)):
        raise SupernetError("data is not deterministic: batch 0 drawn twice differs; draw randomness only from "
                            "the torch.Generator naspipe passes in")
    _check_batch(sn, x, target)
    digests: dict[str, str] = {}
    owners = ParameterOwners()
    with torch.no_grad():
        for b, blk in enumerate(sn.blocks):
            first_name, first = None, None  # only the first output is kept: a block may hold thousands
            weights = WeightsDigest()
            for c, name in enumerate(blk.candidates):
                mod = build_candidate(sn, b, c, 0)
                owners.add(blk, name, mod)
                _refuse_lazy(blk, name, mod)
                _same_twice(blk, name, mod, build_candidate(sn, b, c, 0))
                weights.add(name, mod)  # as built, before a forward changes a buffer
                out = _forward_twice(blk, name, mod, x, sendable=False)
                del mod
                if first is None:
                    first_name, first = name, out
                elif _signature(out) != _signature(first):
                    raise SupernetError(f"block {blk.label!r}: candidates {first_name!r} and {name!r} give outputs "
                                        f"{_outputs(first, out)}; every candidate of a "
                                        "block must give the same shape (and, for a tuple, list or dict of tensors, "
                                        "the same structure)")
            digests[blk.label] = weights.hexdigest()
            x = first
    try:
        loss = sn.loss(x, target)
    except user_errors() as e:  # noqa: BLE001
        raise SupernetError(f"loss raised {type(e).__name__} on the head's output {_describe(x)}: {_line(e)}") \
            from None
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0 or not loss.is_floating_point():
        scalar = isinstance(loss, torch.Tensor) and loss.dim() == 0
        got = f"a scalar of dtype {loss.dtype}" if scalar else tuple(loss.shape) \
            if isinstance(loss, torch.Tensor) else type(loss).__name__
        fix = "compute it in floating point" if scalar else "reduce it, e.g. with .mean()"
        raise SupernetError(f"loss must return a scalar float tensor, got {got} (last block "
                            f"{sn.blocks[-1].label!r}); {fix}")
    return digests


class ParameterOwners:
    """Which candidate built each live parameter: two candidates (or blocks) holding the same ``nn.Parameter``
    object (a module bank shared between candidates) are refused, since naspipe gives every candidate its own
    weights and optimizer state, updated by its own subnets on the stage that holds it. Entries are weak: a
    parameter freed with its module leaves, so its id, reused by a later tensor, is never mistaken for it."""

    def __init__(self) -> None:
        self._owner: dict[int, tuple[Any, str, str, str]] = {}  # id -> (weak ref, label, candidate, name)

    def add(self, blk: Any, cand: str, mod: Any) -> None:
        import weakref

        for pname, p in mod.named_parameters():
            hit = self._owner.get(id(p))
            if hit is not None and hit[0]() is p:
                _, label, other, oname = hit
                who = (f"block {label!r}: candidates {other!r} and {cand!r}" if label == blk.label else
                       f"block {label!r}, candidate {other!r} and block {blk.label!r}, candidate {cand!r}")
                raise SupernetError(f"{who} hold the same parameter ({oname!r} of {other!r} is {pname!r} of "
                                    f"{cand!r}): a module shared between candidates, which naspipe does not train "
                                    "(every candidate has its own weights and optimizer state, updated in its own "
                                    "subnets' order, possibly on another stage); build every module inside the "
                                    "factory, or put what all subnets share in a Fixed block "
                                    "(docs/shared-parameters.md)")
            key = id(p)
            self._owner[key] = (weakref.ref(p, lambda _, k=key: self._owner.pop(k, None)), blk.label, cand, pname)


def _line(e: BaseException) -> str:
    return first_line(e)


def _refuse_lazy(blk: Any, name: str, mod: Any) -> None:
    from torch.nn.modules.lazy import LazyModuleMixin

    lazy = next((m for m in mod.modules() if isinstance(m, LazyModuleMixin) and m.has_uninitialized_params()), None)
    if lazy is not None:
        raise SupernetError(f"block {blk.label!r}, candidate {name!r}: {type(lazy).__name__} creates its parameters "
                            "in its first forward from torch's global generator, not in the seeded build, so runs "
                            "would not be reproducible; give its sizes (e.g. nn.Linear instead of nn.LazyLinear)")


def _same_twice(blk: Any, name: str, mod: Any, again: Any) -> None:
    """SupernetError when a candidate built twice under the same seed has other initial weights (its factory draws
    from a generator naspipe does not seed: numpy's or Python's global one, a clock)."""
    a, b = mod.state_dict(), again.state_dict()
    key = next((k for k in a if k not in b or not _identical(a[k], b[k])), None)
    if key is None and a.keys() == b.keys():
        return
    what = f"{key!r} differs" if key is not None else "its parameter names differ"
    raise SupernetError(f"block {blk.label!r}, candidate {name!r}: the factory built twice under the same seed gives "
                        f"other initial weights ({what}): it draws from a random generator naspipe does not seed "
                        "(numpy's or Python's global one, say), so runs would not be reproducible; initialise with "
                        "torch's random functions (seeded per candidate) or pass Supernet(init=...)")


def _forward(blk: Any, name: str, mod: Any, x: Any, what: str = "", sendable: bool = False) -> Any:
    """``mod(x)``; SupernetError naming the block and candidate when it raises or returns no message: a tensor or
    a tuple, list or dict of tensors (``naspipe.supernet.messages``; what may cross the chosen partition's stage
    boundaries
    is ``naspipe.preflight.modelcheck.check_messages``'s); with ``sendable`` (a block that is not the last, so its
    output may cross a stage boundary), also one the transport cannot send (dtype, rank)."""
    from naspipe.supernet import messages

    try:
        out = mod(x)
    except user_errors() as e:  # noqa: BLE001
        raise SupernetError(f"block {blk.label!r}, candidate {name!r}: forward on the previous block's "
                            f"output {_describe(x)}{what} raised {type(e).__name__}: {_line(e)}") from None
    bad = messages.problem(out, sendable=sendable)
    if bad is not None:
        raise SupernetError(f"block {blk.label!r}, candidate {name!r}: forward {bad}")
    return out


def _describe(x: Any, dtype: bool = False) -> str:
    from naspipe.supernet import messages

    text = messages.describe(x)
    return f"{text} {x.dtype}" if dtype and hasattr(x, "dtype") else text


def _outputs(a: Any, b: Any) -> str:
    """``A and B``, the two outputs described; where the descriptions read the same (a dtype or a dict's key order
    inside a structured message), what tells them apart (``naspipe.supernet.messages.difference``)."""
    from naspipe.supernet import messages

    da, db = _describe(a, True), _describe(b, True)
    return f"{da} and {db}" if da != db else f"{da} that differ: {messages.difference(a, b)}"


def _signature(x: Any) -> Any:
    from naspipe.supernet import messages

    return messages.signature(x)


def _identical(a: Any, b: Any) -> bool:
    """Bit-equal tensors (NaN equal to NaN: a non-finite output is not randomness)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


def _same_message(a: Any, b: Any) -> bool:
    """Bit-equal messages (a tensor, or a tuple, list or dict of tensors; NaN equal to NaN)."""
    from naspipe.supernet import messages

    return messages.identical(a, b)


def _forward_twice(blk: Any, name: str, mod: Any, x: Any, sendable: bool = False) -> Any:
    """The output of ``mod`` on ``x``; SupernetError when a second forward from the same state differs (it draws
    randomness, e.g. dropout) or, for a fixed block, when a forward changes what the next one computes."""
    import torch

    _refuse_lazy(blk, name, mod)
    state = {k: v.clone() for k, v in mod.state_dict().items()}
    with torch.random.fork_rng(devices=[]):
        before = torch.get_rng_state()
        out = _forward(blk, name, mod, x, sendable=sendable)
        after = torch.get_rng_state()
        changed = {k: v.clone() for k, v in mod.state_dict().items()}
        drew = not torch.equal(before, after)
        if drew:  # from another state of the generator: a forward that seeds its own draws ends where it did
            mod.load_state_dict(state)
            torch.manual_seed(int(before.double().sum().item()) + 1)
            _forward(blk, name, mod, x)
            drew = not torch.equal(after, torch.get_rng_state())
    mod.load_state_dict(state)
    if drew or not _same_message(out, _forward(blk, name, mod, x)):
        how = "its forward draws from torch's global random generator" if drew else \
            "two forwards on the same input from the same state give different outputs"
        raise SupernetError(f"block {blk.label!r}, candidate {name!r}: {how} (randomness, e.g. dropout), which "
                            "naspipe cannot reproduce in a pipeline; remove it (dropout: use none, or a fixed "
                            "mask drawn in the factory)")
    if blk.fixed:
        mod.load_state_dict(changed)
        if not _same_message(out, _forward(blk, name, mod, x)):
            raise SupernetError(f"fixed block {blk.label!r}: its forward changes state its next forward reads (a "
                                "buffer, e.g. spectral_norm's power iteration); a pipeline runs a fixed block's "
                                "forwards out of sequence order, so runs would not be reproducible; declare it as "
                                "a Choice with one candidate (trained; its forwards run in sequence order)")
    return out


def _check_batch(sn: Supernet, x: Any, target: Any) -> None:
    """A Dataset holds a batch and the target is one tensor (a stage moves it to its device as one)."""
    import torch

    bs = sn.batch_size
    if not callable(sn.data) and len(sn.data) < bs:
        raise SupernetError(f"data is a Dataset of {len(sn.data)} samples, fewer than batch_size {bs}")
    if not isinstance(target, torch.Tensor):
        raise SupernetError(f"data's target must be one tensor, got {type(target).__name__}; pack a structured "
                            "target into one tensor (e.g. torch.stack of its parts as float) and unpack it in loss")


def _check_batch_rows(sn: Supernet, x: Any, target: Any) -> None:
    """With replicas: batch 0 holds ``batch_size`` samples along dim 0, input and target (the rows replicas split;
    without replicas a sequence-first batch or a scalar target is the model's own business)."""
    bs = sn.batch_size
    if x.dim() == 0 or x.shape[0] != bs:
        raise SupernetError(f"data's input {tuple(x.shape)} does not hold batch_size {bs} samples along dim 0 (the "
                            "batch dimension naspipe splits and counts); return batch_size samples, batch first "
                            "(a sequence-first model transposes in its first block)")
    if target.dim() == 0 or target.shape[0] != bs:
        raise SupernetError(f"data's target {tuple(target.shape)} does not hold batch_size {bs} samples along "
                            "dim 0; return batch_size targets, batch first")
