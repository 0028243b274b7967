"""What a run folder holds: its kind (``train`` or ``reference``) and its identity, in ``run.json``.

Why it exists: bit-identity is promised only between runs of the same configuration, so a run must say
what produced it. ``naspipe train`` (and the torchrun entry point) and ``naspipe reference`` both write
``run.json`` here, before training and again once the sequence is known::

    {"kind": "train", "identity": {"space": ..., "space_sha256": ..., "updates": ..., "seed": ..., "subnets": ...,
     "sampler": ..., "sequence_sha256": ..., "optimizer": ..., "lr": ..., "threads": ..., "shared_layers": ...}}

A user supernet's run adds the digests of its definition, ``source_sha256`` and ``weights_sha256`` (per block;
``naspipe.supernet.definition``): an edit of its module between two runs is named by ``verify`` and refused by
``--resume``. ``updates`` is ``exact`` for the reference and every causal policy, else the policy (``pipedream``):
such a run differs from the reference by design, and ``verify`` says so.

The identity holds what decides the numbers of a CSP run besides the schedule-free parts (policy, stages,
window and timing must not change them). Threads belong to it: another intra-op thread count changes the
order of floating-point reductions inside an operation, so results agree bit for bit only at equal counts.

``naspipe verify`` compares the identities of two runs before their numbers (``differences``); a reference
refuses to write into a train run, and a train run into a reference, unless ``--overwrite`` clears the folder
first (``kind_of``, ``clear``). No torch here.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RUN_JSON = "run.json"
# the file names of a run directory, written here once (every module that reads or writes one imports them)
LOSSES = "losses.csv"
PARAMS = "params.json"
TRACE = "trace.json"
METRICS = "metrics.json"
EVENTS = "events.jsonl"
STATUS = "status.json"
SEQUENCE = "sequence.json"
SPACE = "space.json"  # a custom search space put beside a trace by hand (the report reads it)
WEIGHTS = "weights.pt"
PARTS = "parts"
KINDS = ("train", "reference")
# the fields of an identity, in the order verify reports them
IDENTITY = ("space", "space_sha256", "source_sha256", "weights_sha256", "updates", "seed", "subnets", "sampler",
            "sequence_sha256", "optimizer", "lr", "threads", "shared_layers", "replicas", "replica_exchange")
# the supernet's definition (``naspipe.supernet.definition``): only comparable between spaces of one name
DEFINITION = ("source_sha256", "weights_sha256")
EXACT = "exact"  # ``updates`` of the reference and of every causal policy: one write per subnet, in order
# files and folders a run writes (cleared by ``clear``): both kinds, a failed run's leftovers, checkpoints
RUN_FILES = (LOSSES, PARAMS, TRACE, METRICS, EVENTS, STATUS, PARTS, SEQUENCE, WEIGHTS, RUN_JSON)
CHECKPOINTS = "checkpoint"
RUN_GLOBS = ("error-stage*.txt", "weights-stage*.pt", "params-stage*.json")


class RunFileError(ValueError):
    """``run.json`` is malformed (the message names the file)."""


def identity(*, space: Any, seed: int, subnets: int, sampler: str | None, sequence_sha256: str | None, optimizer: str,
             lr: float, threads: int, shared_layers: str, replicas: int = 1,
             replica_exchange: str | None = None, updates: str = EXACT) -> dict[str, Any]:
    """A run's identity (JSON-ready). ``space``: a ``SearchSpace``; ``lr``: the learning rate actually used;
    ``replica_exchange``: how replicas combine gradients (``exact`` or ``native``; None with one replica);
    ``updates``: ``exact`` (the reference, a causal policy) or the policy whose updates are not (``pipedream``).
    A user supernet's space adds the digests of its definition (``source_sha256``, ``weights_sha256``)."""
    digests = getattr(space.model, "digests", None) or {}
    return {
        "space": space.name, "space_sha256": space.digest(),
        **{k: digests[k] for k in DEFINITION if k in digests}, "updates": str(updates),
        "seed": int(seed), "subnets": int(subnets), "sampler": None if sampler is None else str(sampler),
        "sequence_sha256": sequence_sha256,
        "optimizer": str(optimizer), "lr": float(lr), "threads": int(threads), "shared_layers": str(shared_layers),
        "replicas": int(replicas),
        **({"replica_exchange": str(replica_exchange)} if replica_exchange is not None else {}),
        # not compared (not in IDENTITY): which in-process definition of a notebook supernet (search finds it)
        **({"definition": space.model.definition} if getattr(space.model, "definition", None) else {}),
    }


def write_run(out: str | Path, kind: str, ident: Mapping[str, Any]) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown run kind {kind!r}; one of {', '.join(KINDS)}")
    data = {"kind": kind, "identity": dict(ident)}
    Path(out, RUN_JSON).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_run(out: str | Path) -> dict[str, Any] | None:
    """``run.json`` of a folder (None when it has none); RunFileError when it is malformed."""
    p = Path(out, RUN_JSON)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise RunFileError(f"cannot read {str(p)!r}: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise RunFileError(f"{p}: not valid JSON ({getattr(e, 'msg', 'nested too deeply')})") from None
    if not isinstance(data, dict) or data.get("kind") not in KINDS or not isinstance(data.get("identity"), dict):
        raise RunFileError(f"{p}: must be an object with 'kind' ({' or '.join(KINDS)}) and 'identity'")
    return data


def kind_of(out: str | Path) -> str | None:
    """The kind of run a folder holds: ``run.json``'s, else guessed from its files (None: no run)."""
    d = Path(out)
    if not d.is_dir():
        return None
    try:
        data = read_run(d)
    except RunFileError:
        data = None
    if data is not None:
        return str(data["kind"])
    if any((d / f).exists() for f in ("status.json", "trace.json", "events.jsonl", "parts", "checkpoint")):
        return "train"
    if any((d / f).exists() for f in ("losses.csv", "params.json", "metrics.json", "weights.pt")):
        return "reference"
    return None


def held_file(out: str | Path) -> str | None:
    """The first run file a folder holds (None: it holds no run)."""
    d = Path(out)
    return next((f for f in (*RUN_FILES, CHECKPOINTS) if (d / f).exists()), None)


def clear(out: str | Path, checkpoints: bool = True) -> None:
    """Delete every file and folder a run writes from ``out`` (nothing else); its checkpoints only if
    ``checkpoints``."""
    d = Path(out)
    for f in (*RUN_FILES, CHECKPOINTS) if checkpoints else RUN_FILES:
        p = d / f
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    for g in RUN_GLOBS:
        for p in d.glob(g):
            p.unlink()


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """The identity fields both runs record with different values, in ``IDENTITY`` order."""
    out = []
    for k in IDENTITY:
        if k in a and k in b and a[k] is not None and b[k] is not None and a[k] != b[k]:
            if k in ("space_sha256", *DEFINITION) and a.get("space") != b.get("space"):
                continue  # the names already differ
            if k == "source_sha256" and a.get("space_sha256") != b.get("space_sha256"):
                continue  # the blocks or candidates already differ (the source then differs too)
            if k == "sampler" and a.get("sequence_sha256") and b.get("sequence_sha256"):
                continue  # the sequences themselves are compared (a replayed generated one is the same run)
            out.append((k, a[k], b[k]))
    return out


def describe_differences(diffs: Sequence[tuple[str, Any, Any]]) -> str:
    """``threads 2 vs 1, seed 0 vs 3`` (digests shortened)."""
    def show(k: str, v: Any) -> str:
        if k.endswith("sha256") and isinstance(v, str):
            return v[:12]
        if k == "space_sha256":
            return v
        return repr(v) if isinstance(v, str) else json.dumps(v)

    names = {"space_sha256": "space definition", "sequence_sha256": "sequence digest",
             "shared_layers": "shared-layer policy", "threads": "thread count", "replicas": "data-parallel replicas",
             "replica_exchange": "gradient exchange"}

    def one(k: str, x: Any, y: Any) -> str:
        if k == "source_sha256":
            return f"the supernet's source {show(k, x)} vs {show(k, y)} (its code was edited between the runs)"
        if k == "weights_sha256":
            return blocks_differ(x, y)
        if k == "updates":
            async_ = [v for v in (x, y) if v != EXACT]
            return (f"updates {x!r} vs {y!r} (policy {' and '.join(map(repr, async_))} does not update exactly "
                    "as the reference does: its numbers differ by design)")
        return f"{names.get(k, k)} {show(k, x)} vs {show(k, y)}"

    return ", ".join(one(k, x, y) for k, x, y in diffs)


def blocks_differ(a: Any, b: Any) -> str:
    """Which blocks' initial weights or parameter shapes differ (``weights_sha256``: label -> digest)."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return "the candidates' initial weights or parameter shapes differ"
    labels = [k for k in a if a.get(k) != b.get(k)] + [k for k in b if k not in a]
    shown = ", ".join(repr(k) for k in labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
    return (f"the initial weights or parameter shapes of block{'s' if len(labels) > 1 else ''} {shown} differ "
            "(another factory or init)")


def train_identity(cfg: Any, sequence_sha256: str | None = None) -> dict[str, Any]:
    """The identity of a training run's ``TrainConfig`` (the sequence digest: given, or from its fixed sequence)."""
    from naspipe.sequence import sequence_digest

    if sequence_sha256 is None and not cfg.online:
        sequence_sha256 = sequence_digest(cfg.space.name, cfg.sequence)
    return identity(space=cfg.space, seed=cfg.seed, subnets=cfg.n, sampler=cfg.sampler,
                    sequence_sha256=sequence_sha256, optimizer=cfg.optimizer, lr=cfg.learning_rate(),
                    threads=cfg.threads, shared_layers=str(cfg.shared), replicas=getattr(cfg, "replicas", 1),
                    replica_exchange=cfg.replica_exchange if getattr(cfg, "replicas", 1) > 1 else None,
                    updates=EXACT if cfg.policy_spec.causal else str(cfg.policy))
