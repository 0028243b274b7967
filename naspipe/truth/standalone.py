"""Train one ground-truth entry: one architecture, stand-alone, for one seed (the worker's job).

Why it exists: the stand-alone accuracy is what a supernet's ranking is judged against. An entry is the
sequential reference trainer (``naspipe.oracle.sequential_trainer``) given a stream that repeats one architecture
``steps``
times: the supernet's data stream (batch ``j`` of seed ``s``), optimizer, learning rate and loss, with the fixed
blocks trained every step (``serial``). Only that architecture's candidates ever get a gradient or optimizer
state, and each candidate's initial weights depend on (seed, block, candidate) alone, so this is bit for bit a
fresh model holding only those candidates. Then the held-out evaluation ``naspipe search`` uses. Runs in a
worker process with one intra-op thread (``set_num_threads(1)`` first), so the bits do not depend on the core.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch

from naspipe.sequences.sequence import ReplayStream
from naspipe.spaces.space import SearchSpace, resolve_space
from naspipe.truth.records import SHARED_LAYERS, TruthError

_SPACES: dict[str, SearchSpace] = {}


def init_worker() -> None:
    """A worker's start (a pool's, or the build process itself with one worker): one intra-op thread before any
    torch work."""
    torch.set_num_threads(1)


def _space(spec: str, digest: str) -> SearchSpace:
    if spec not in _SPACES:
        import naspipe.supernet  # noqa: F401 - registers the module:function resolver

        sp = resolve_space(spec)
        if sp.digest() != digest:
            raise TruthError(f"space {spec!r} resolves to digest {sp.digest()[:12]} in the worker, "
                             f"not {digest[:12]}")
        _SPACES[spec] = sp
    return _SPACES[spec]


def train_entry(space: SearchSpace, arch: tuple[int, ...], seed: int, steps: int, optimizer: str,
                lr: float) -> dict[str, Any]:
    """The record of one entry: held-out accuracy and loss, the final training loss, a hash of the weights."""
    from naspipe.models import evaluate, heldout_batches
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.runfolder.results import param_hashes
    from naspipe.search.result import subnet_names
    from naspipe.spaces.shared import parse_shared

    torch.set_num_threads(1)
    repeated = ReplayStream(space, [tuple(arch)] * steps, valid=True)  # one architecture, ``steps`` times
    res = train_reference(space, repeated, seed, parse_shared(SHARED_LAYERS),
                          optimizer=optimizer, lr=lr, threads=1)
    scores = evaluate(res.model, arch, heldout_batches(space))
    h = hashlib.sha256()
    for name, digest in sorted(param_hashes(res.model.global_named_parameters()).items()):
        h.update(f"{name}:{digest}\n".encode())
    return {"arch": list(arch), "seed": int(seed), "name": "/".join(subnet_names(space, arch)),
            "space_digest": space.digest(), "steps": int(steps), "optimizer": str(optimizer), "lr": float(lr),
            "accuracy": scores["accuracy"], "loss": scores["loss"],
            "train_loss": res.losses[steps - 1] if steps else None, "params_sha256": h.hexdigest(),
            "wall_s": round(res.wall_s, 3)}


def train_job(job: tuple[str, str, tuple[int, ...], int, int, str, float]) -> tuple[bool, Any]:
    """A pool's task that only trains: ``(True, record)`` of ``(space spec, its digest, arch, seed, steps,
    optimizer, lr)``, or ``(False, its one line)``: it never raises, so nothing unpicklable crosses the pipe."""
    spec, digest, arch, seed, steps, optimizer, lr = job
    try:
        return True, train_entry(_space(spec, digest), arch, seed, steps, optimizer, lr)
    except Exception as e:  # noqa: BLE001 - a user's candidate may raise anything: one line, by entry
        first = (str(e).splitlines() or [""])[0]
        return False, f"architecture {list(arch)} seed {seed}: {type(e).__name__}: {first}"


def work(job: tuple[str, str, tuple[int, ...], int, int, str, float, str]) -> dict[str, Any]:
    """The pool's task: train the entry and store its record in the truth folder (atomically)."""
    from pathlib import Path

    from naspipe.truth.records import write_entry

    spec, digest, arch, seed, steps, optimizer, lr, folder = job
    space = _space(spec, digest)
    try:
        record = train_entry(space, arch, seed, steps, optimizer, lr)
    except Exception as e:  # noqa: BLE001 - a user's candidate may raise anything: named in one line, by entry
        first = (str(e).splitlines() or [""])[0]
        raise TruthError(f"architecture {list(arch)} seed {seed} failed to train: {type(e).__name__}: {first}") \
            from None
    if not all(isinstance(record[k], float) and math.isfinite(record[k]) for k in ("accuracy", "loss")):
        raise TruthError(f"architecture {list(arch)} seed {seed} diverged: held-out loss {record['loss']} after "
                         f"{steps} steps at lr {lr:g} (a truth needs finite numbers: try a smaller --lr)")
    write_entry(Path(folder), record)
    return record
