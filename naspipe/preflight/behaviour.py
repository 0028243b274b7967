"""What a supernet computes, as one digest, taken in a process other than the caller's.

Why it exists: a run's identity names a supernet by its structure, its source files and its blocks' initial
weights (``naspipe.supernet.definition``). None of them sees a forward that changes while the source does not (an
activation read from a file or an environment variable, a helper module the source digest does not reach), so a
``--resume``, a truth that continues or ``naspipe rank`` mixed two supernets without a word. Nor does a probe in
one process see initial weights that depend on per-process state (a factory seeded with ``hash("x")``, which
Python randomises per process): each stage process then starts from other weights.

``measure(space)`` runs a fixed input (batch 0 of the space's own data, drawn as the probe draws it) through a
few fixed subnets (candidate 0 everywhere, then ``SUBNETS - 1`` drawn from a seed-named generator) at the initial
weights of seed 0, forward and backward, on one thread, and hashes the losses and the gradients' bytes
(``behaviour_sha256``). With ``weights`` it also digests every block's candidates' initial weights as the probe
does (``naspipe.supernet.validate``), so the caller compares them with its own: a block that differs is
per-process state, refused before start by name (``weights_differ``). ``in_child(ctx, space, kind)`` measures in
a process of a multiprocessing context (the run's fork server: forked from a server started under the run's
kernels with torch loaded, a fraction of a second) and returns what it found.

The digest depends on the CPU kernels (``naspipe.lifecycle.kernels``) it is taken under, so two are compared only
when taken under the same kernels on the same kind of CPU (``naspipe.runfolder.runs.machine_of``).
"""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any

from naspipe.errors import UserError
from naspipe.lifecycle.threads import intra_op_threads

SUBNETS = 3  # candidate 0 everywhere, then two drawn by name
SEED = 0  # the initial weights it runs at (the probe's): a property of the definition, not of a run's seed
DOMAIN = "naspipe-behaviour"


class BehaviourError(UserError):
    """The supernet's behaviour cannot be taken, or differs between two processes (one line)."""


def subnets(space: Any) -> list[tuple[int, ...]]:
    """The subnets the digest runs: candidate 0 of every block, then ``SUBNETS - 1`` drawn from a generator
    seeded by name (Python's ``random`` seeded with a string: the same in every process)."""
    rng = random.Random(DOMAIN)
    ks = [blk.k for blk in space.blocks]
    return [tuple(0 for _ in ks), *(tuple(rng.randrange(k) for k in ks) for _ in range(SUBNETS - 1))]


def measure(space: Any, weights: bool = False) -> dict[str, Any]:
    """``{"behaviour_sha256", "weights_sha256" (label -> digest, with ``weights``; else None), "seconds"}`` of
    ``space``'s supernet in this process (the caller's random state and thread count are left as they were)."""
    import torch

    import naspipe.models  # noqa: F401 - registers the presets' families (``take``'s fresh interpreter has none yet)
    from naspipe.spaces.few_shot import base_of
    from naspipe.supernet.seeding import GLOBAL_RNG

    space = base_of(space)  # a few-shot space computes what its base does (its copies start equal)
    t0 = time.perf_counter()
    # one thread: the digest is the same whatever thread count a run uses
    with intra_op_threads(1), GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        digest, blocks = _measure(space, weights)
    return {"behaviour_sha256": digest, "weights_sha256": blocks, "seconds": time.perf_counter() - t0}


def _measure(space: Any, weights: bool) -> tuple[str, dict[str, str] | None]:
    from naspipe.supernet.build import build_candidate, draw_batch
    from naspipe.supernet.definition import WeightsDigest
    from naspipe.supernet.load import supernet_of
    from naspipe.supernet.seeding import hashed_generator

    sn = supernet_of(space)
    chosen = subnets(space)
    mods: dict[tuple[int, int], Any] = {}
    blocks: dict[str, str] | None = {} if weights else None
    for b, blk in enumerate(sn.blocks):
        need = {s[b] for s in chosen}
        digest = WeightsDigest() if weights else None
        for c, name in enumerate(blk.candidates):
            if digest is None and c not in need:
                continue
            mod = build_candidate(sn, b, c, SEED)
            if digest is not None:
                digest.add(name, mod)  # as built, before a forward changes a buffer (as the probe digests it)
            if c in need:
                mods[(b, c)] = mod
        if blocks is not None and digest is not None:
            blocks[blk.label] = digest.hexdigest()
    x0, target = draw_batch(sn.data, sn.batch_size, hashed_generator("data-user", 0, 0), 0)
    h = hashlib.sha256(f"{DOMAIN}:{SUBNETS}".encode())
    for sub in chosen:
        used = [mods[(b, c)] for b, c in enumerate(sub)]
        for m in used:
            for p in m.parameters():
                p.grad = None
        x = x0
        for m in used:
            x = m(x)
        loss = sn.loss(x, target)
        loss.backward()
        h.update(f"\0subnet {list(sub)}\0".encode())
        h.update(_bytes(loss))
        for b, (c, m) in enumerate(zip(sub, used, strict=True)):
            for name, p in m.named_parameters():
                h.update(f"\0{b}:{c}:{name}:".encode())
                h.update(b"-" if p.grad is None else _bytes(p.grad))
    return h.hexdigest(), blocks


def _bytes(t: Any) -> bytes:
    import torch

    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def weights_differ(space: Any, here: dict[str, str] | None, there: dict[str, str] | None) -> str | None:
    """Why ``space``'s blocks' initial weights as built here (``here``, the probe's) and in another process
    (``there``) differ, naming the first block; None when they agree or either is unknown."""
    if not here or not there:
        return None
    label = next((k for k in here if k in there and here[k] != there[k]), None)
    if label is None:
        return None
    return (f"space {space.name!r}: block {label!r}: the factory builds other initial weights in another process "
            "under the same seed: it draws from per-process state (hash() of a string, which Python randomises per "
            "process, a process id, a clock), so every stage and every resumed run would start from other weights; "
            "seed it from torch's random functions (naspipe seeds them per candidate) or pass Supernet(init=...)")


def in_child(ctx: Any, space: Any, kind: str, weights: bool = False) -> dict[str, Any]:
    """``measure(space, weights)`` in a process of multiprocessing context ``ctx`` that computes under kernels
    ``kind`` (started inside ``naspipe.lifecycle.kernels.launching(kind)``); BehaviourError (one line) when it
    fails. Adds ``"child_s"``: the seconds from its start to its answer."""
    from naspipe.lifecycle import kernels
    from naspipe.lifecycle.mainless import start

    t0 = time.perf_counter()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(space, kind, weights, send), name="naspipe-behaviour", daemon=True)
    with kernels.launching(kind):
        start(proc)  # (a script without a main guard is not run again in it)
    send.close()
    try:
        try:
            ok, value = recv.recv()
        except EOFError:
            proc.join(timeout=10)
            raise BehaviourError(f"the process that takes the behaviour of supernet {space.name!r} ended (exit code "
                                 f"{proc.exitcode}) before it answered") from None
    finally:
        recv.close()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
    if not ok:
        raise BehaviourError(f"taking the behaviour of supernet {space.name!r} failed: {value}")
    return {**value, "child_s": time.perf_counter() - t0}


def _child(space: Any, kind: str, weights: bool, conn: Any) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the caller's to handle: it stops this one
    try:
        import naspipe.models  # noqa: F401 - registers the presets' families (a spawned child has none yet)
        from naspipe.lifecycle import kernels

        kernels.enter(kind)
        result: tuple[bool, Any] = (True, measure(space, weights))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller, as one line
        from naspipe.supernet.usercode import first_line

        result = (False, f"{type(e).__name__}: {first_line(e) or e}")
    try:
        conn.send(result)
        conn.close()
    except OSError:  # the caller stopped waiting (Ctrl-C, its own failure): nothing to say
        pass


def take(space: Any, kind: str, fresh: bool) -> dict[str, Any]:
    """``measure(space)`` where no fork server is at hand (a truth, the reference): in a spawned interpreter
    under kernels ``kind`` when ``fresh`` (a user's supernet, whose per-process state must show; its blocks' initial
    weights are compared with the probe's here) or when this process computes under other kernels, else here.
    BehaviourError (one line) naming the block whose weights differ, or what failed."""
    from naspipe.lifecycle import kernels

    here = (getattr(space.model, "digests", None) or {}).get("weights_sha256")
    try:
        if fresh or not kernels.runs_here(kind):
            got = kernels.in_fresh_process(kind, measure, space, bool(here))
        else:
            got = measure(space)
    except Exception as e:  # noqa: BLE001 - user code or a process that ended: one line
        from naspipe.supernet.usercode import first_line

        raise BehaviourError(f"taking the behaviour of supernet {space.name!r} failed: {type(e).__name__}: "
                             f"{first_line(e) or e}") from None
    why = weights_differ(space, here, got["weights_sha256"])
    if why is not None:
        raise BehaviourError(why)
    return got
