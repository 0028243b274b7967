"""Checkpoints of a training run, taken at scheduler fences, and the resume that continues bit for bit.

Why it exists: a research run must survive a crash without losing hours, and the resumed run must end
with exactly the losses and parameters of an uninterrupted one.

When: with ``checkpoint_every = N`` every stage's scheduler is fenced at ``N, 2N, ...``
(``StageScheduler.set_fence``). At a fence ``c`` a stage is quiescent — every subnet ``< c`` is written on
it, none ``>= c`` admitted, nothing stashed — so its state *is* the state after the subnets ``< c``. The
stage saves it and lifts the fence to the next multiple. Stages reach a fence independently (stage 0
about last); nothing is exchanged between them for a checkpoint.

Layout (``OUT/checkpoint/``)::

    c000000020/stage0.pt     the stage's state (torch.save of plain data: tensors, dicts, lists, numbers,
    c000000020/stage0.json   strings), and its sidecar: position, sha256 and size of the .pt, fingerprint
    complete.json            {"position": 20, "stages": 2, "dir": "c000000020"}

Every file is written atomically (temporary file, fsync, rename, fsync of the directory); the sidecar is
written after its ``.pt``, so an existing sidecar means a complete stage file. Position ``c`` is
*complete* when every stage's sidecar exists. Rank 0 (the single writer) then writes ``complete.json``
and deletes older positions, so the previous complete checkpoint is kept until the new one is complete;
the launcher does the same once more after the run ends or fails. With ``keep_checkpoints = K`` (``naspipe
train --keep-checkpoints K``; default 1) the ``K`` newest complete positions stay (the run's last supernets,
which ``naspipe rank --ensemble-last`` averages; ``saved_models`` reads one's weights) and only older ones go.
Resume takes the newest complete position (found by scanning, so a crash between the last sidecar and
``complete.json`` loses nothing).

A stage file holds: the model's ``state_dict`` (parameters and buffers), the optimizer bank's ``state_dict``
(optimizer state, step count), the update rule's ``state_dict`` (``naspipe.runtime.update_rules.rules.UpdateRule``: the
fixed-layer versions and pending in-order shared updates of the exact rules, 2bw's weight versions, PipeMare's
velocities and PipeOptim's last gradients), the last stage's losses of subnets ``< c``, the torch RNG states (the
runtime draws no random numbers today — dropout and data are keyed by seeds — but a stage's RNG is
restored anyway), the position and the run's fingerprint. The scheduler needs no state: a fresh one
``make_scheduler(..., start=c)`` is exactly the scheduler after the subnets ``< c`` (the jitter is a
pure function of the task). Files are read with ``torch.load(weights_only=True)`` only.

Resume (``naspipe train --resume DIR``) takes the run's arguments again (the same as the interrupted
run's; only ``--out``, ``--checkpoint-every``, ``--keep-checkpoints``, ``--timeout``, ``--jitter-ms``, ``--window``,
``--port``, the start method and progress may differ: none of them changes a number) and refuses, before any process
starts, a missing checkpoint, a corrupted file (size or sha256 differ from the sidecar, unreadable sidecar) and a
fingerprint that differs from the arguments (space and its JSON, a user supernet's definition (its source and its
candidates' initial weights, ``naspipe.supernet.definition``), seed, policy, stages, partition, shared
layers, optimizer, lr, subnets, sequence digest, device, threads: another intra-op thread count changes the
order of reductions inside an operation, hence the bits; the kernels; and what the supernet computes,
``behaviour_sha256`` (``naspipe.preflight.behaviour``), compared where the checkpoint and the run both hold one).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naspipe.fileio import jsonfile
from naspipe.fileio.atomic import write_atomic
from naspipe.lifecycle import kernels
from naspipe.runtime.rundir import ConfigError, prepare_out_dir
from naspipe.spaces.few_shot import few_shot_of

if TYPE_CHECKING:
    from naspipe.runtime.config import TrainConfig
    from naspipe.runtime.stagerun import StageRun

CHECKPOINT_DIR = "checkpoint"
BEHAVIOUR = "behaviour_sha256"  # compared only when the checkpoint and the run both hold one
COMPLETE = "complete.json"
FORMAT = 1


class CheckpointError(ConfigError):
    """A checkpoint to resume from is missing, corrupted or belongs to another run (one line)."""


# ---- naming ------------------------------------------------------------------------------------------------
def root_of(out: Path) -> Path:
    return Path(out) / CHECKPOINT_DIR


def position_dir(root: Path, position: int) -> Path:
    return root / f"c{position:09d}"


def _positions(root: Path) -> list[int]:
    """Position directories under ``root``, newest first."""
    found = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and p.name.startswith("c") and p.name[1:].isdigit():
                found.append(int(p.name[1:]))
    return sorted(found, reverse=True)


def fingerprint(cfg: TrainConfig) -> dict[str, Any]:
    """What must be equal for a checkpoint to continue this run (JSON-ready; compared field by field)."""
    seq = json.dumps([list(s) for s in cfg.sequence])
    return {
        "space": cfg.space.name,
        "space_sha256": cfg.space.digest(),  # without costs: re-profiling does not stop a resume
        # a few-shot run's split and warm-up (naspipe.spaces.few_shot; the expanded space's digest holds the copies)
        **({"few_shot": fs.describe()} if (fs := few_shot_of(cfg.space)) is not None else {}),
        # a user supernet's definition (naspipe.supernet.definition): its source, its candidates' initial weights
        **{k: v for k, v in (getattr(cfg.space.model, "digests", None) or {}).items()},
        "seed": cfg.seed,
        "policy_options": {k: v for k, v in sorted(cfg.policy_options.items()) if k == "micro_batches"},
        "stages": cfg.stages,
        "partition": [list(b) for b in cfg.partition.bounds],
        "shared_layers": str(cfg.shared),
        "optimizer": cfg.optimizer,
        "lr": float(cfg.learning_rate()).hex(),
        "subnets": cfg.n,
        "sampler": str(cfg.sampler),
        "sequence_sha256": hashlib.sha256(seq.encode()).hexdigest(),
        "device": cfg.device,
        "threads": cfg.threads,
        # the CPU kernels (naspipe.lifecycle.kernels); natively, the kind of CPU decides the bits too
        "kernels": cfg.kernels,
        **({"cpu": kernels.cpu_key()} if cfg.kernels == kernels.NATIVE else {}),
        # what the supernet computes under those kernels (naspipe.preflight.behaviour; absent: not taken)
        **({BEHAVIOUR: cfg.behaviour_sha256} if getattr(cfg, "behaviour_sha256", None) else {}),
        **({"replicas": cfg.replicas, "replica_exchange": cfg.replica_exchange}
           if getattr(cfg, "replicas", 1) != 1 else {}),
        # last, so a refusal names the cause first: the default's plan (csp-plan:plan=S) follows from the above
        "policy": cfg.policy,
    }


# ---- saving (in the stage process) ---------------------------------------------------------------------------
def _cpu(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def stage_state(cfg: TrainConfig, rank: int, position: int, ex: Any, fp: dict | None = None) -> dict[str, Any]:
    """Everything stage ``rank`` needs to continue after subnet ``position - 1`` (plain data only)."""
    import torch

    if getattr(ex, "in_flight", 0) or ex.rule.pending():
        raise RuntimeError(f"stage {rank} is not quiescent at checkpoint {position} (subnets in flight)")
    bank = _cpu(ex.bank.state_dict())
    rule = _cpu(ex.rule.state_dict())  # the update rule's protocol (naspipe.runtime.update_rules.rules.UpdateRule)
    state: dict[str, Any] = {
        "format": FORMAT, "stage": rank, "position": position, "fingerprint": fp or fingerprint(cfg),
        "model": _cpu(ex.model.state_dict()),
        "optimizer": bank["optimizer"],
        "steps": bank["steps"],
        "versions": rule.pop("versions", None),  # fixed-layer versions (exact rules), weight versions (2bw)
        "rule": rule,  # any further state of the rule (2bw's weight versions, PipeMare's velocities)
        "losses": {int(j): float(v) for j, v in ex.losses.items()},
        "peak_in_flight": int(getattr(ex, "peak_stash", 0)),
        "rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(ex.device) if ex.device.type == "cuda" else None,
    }
    return state


def save_stage(cfg: TrainConfig, rank: int, position: int, ex: Any, root: Path | None = None,
               fp: dict | None = None) -> Path:
    """Save stage ``rank`` at fence ``position``: ``stage<rank>.pt`` then its sidecar, both atomically."""
    import torch

    fp = fp or fingerprint(cfg)
    d = position_dir(root or root_of(cfg.out), position)
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(stage_state(cfg, rank, position, ex, fp), buf)
    data = buf.getvalue()
    pt = d / f"stage{rank}.pt"
    write_atomic(pt, data)
    meta = {"format": FORMAT, "stage": rank, "position": position, "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "fingerprint": fp}
    write_atomic(d / f"stage{rank}.json", (json.dumps(meta, indent=1) + "\n").encode())
    return pt


# ---- completion ----------------------------------------------------------------------------------------------
def _stage_count(d: Path) -> int | None:
    """The number of stages recorded in stage 0's sidecar of position directory ``d`` (None if absent)."""
    p = d / "stage0.json"
    try:
        return int(jsonfile.loads(p.read_text())["fingerprint"]["stages"])
    except FileNotFoundError:  # not saved (yet), or pruned right now
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint file {str(p)!r} is corrupted ({type(e).__name__})") from None


def is_complete(d: Path, stages: int | None = None) -> bool:
    if stages is None:
        stages = _stage_count(d)
        if stages is None:
            return False
    return all((d / f"stage{s}.json").is_file() for s in range(stages))


def newest_complete(root: Path) -> int | None:
    """The newest position whose every stage file exists (None if there is none)."""
    for c in _positions(root):
        if is_complete(position_dir(root, c)):
            return c
    return None


def read_complete(root: Path) -> int | None:
    try:
        return int(jsonfile.loads((root / COMPLETE).read_text())["position"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def mark_complete(root: Path, position: int, stages: int, keep: int = 1) -> bool:
    """If every stage saved ``position``: record it in ``complete.json`` and prune older positions: the ``keep``
    newest complete positions up to ``position`` stay (``position`` one of them: ``keep_checkpoints``), every
    other older one goes, complete or not.

    Call from one process at a time (rank 0 during the run, the launcher after it). Returns whether
    ``position`` is complete."""
    d = position_dir(root, position)
    if not is_complete(d, stages):
        return False
    current = read_complete(root)
    if current is None or current < position:
        data = {"format": FORMAT, "position": position, "stages": stages, "dir": d.name}
        write_atomic(root / COMPLETE, (json.dumps(data, indent=1) + "\n").encode())
    kept = 1  # position itself
    for c in _positions(root):  # newest first
        if c >= position:
            continue
        if kept < keep and is_complete(position_dir(root, c), stages):
            kept += 1
        else:
            shutil.rmtree(position_dir(root, c), ignore_errors=True)
    return True


def complete_positions(root: Path) -> list[int]:
    """Every position under ``root`` whose every stage file exists, newest first (a run keeps its
    ``keep_checkpoints`` newest: ``mark_complete``)."""
    return [c for c in _positions(root) if is_complete(position_dir(root, c))]


def finalize(out: Path, keep: int = 1) -> int | None:
    """After a run ended (or failed): mark the newest complete checkpoint, keeping the ``keep`` newest
    (``mark_complete``); returns its position."""
    root = root_of(out)
    try:
        c = newest_complete(root)
        if c is not None:
            stages = _stage_count(position_dir(root, c))
            mark_complete(root, c, stages or 1, keep)
        return c
    except (CheckpointError, OSError):
        return read_complete(root)


class Checkpointer:
    """The stage loop's side of checkpoints: fences, saving at them, and (rank 0) marking completion.

    A few-shot run (``naspipe.spaces.few_shot``) also fences its stages at the warm-up's end ``W``: there the stage
    copies copy 0 of every candidate into the other copies (``naspipe.models.warm_start``), before a checkpoint
    at ``W`` is saved, so a checkpoint at ``W`` holds the state after the copy and a run resumed there (or later)
    does not copy again. With ``W = 0`` the stage copies once it is built."""

    def __init__(self, cfg: TrainConfig, run: StageRun):
        self.cfg, self.rank = cfg, run.stage
        self.every = getattr(cfg, "checkpoint_every", None)
        self.keep = int(getattr(cfg, "keep_checkpoints", 1))  # complete positions kept (mark_complete)
        self.root = root_of(cfg.out)
        self.start = int(getattr(cfg, "start", 0) or 0)
        self.pending: list[int] = []  # saved here, not yet known complete (rank 0)
        self.saves = run.leader  # replica 0 of a stage saves the stage's state (its replicas hold the same)
        self._fp: dict | None = None  # computed once (it hashes the whole sequence)
        fs = few_shot_of(cfg.space)
        self.boundary = fs.warmup if fs is not None else None  # the few-shot warm start (before subnet W)

    @property
    def fence(self) -> int | None:
        """The first fence after the start (None: no checkpoints and no few-shot boundary ahead)."""
        return self._next(self.start)

    def _next(self, c: int) -> int | None:
        ahead = self.boundary if self.boundary is not None and self.boundary > c else None
        if not self.every:
            return ahead
        f = (c // self.every + 1) * self.every
        f = f if f < self.cfg.n else None
        return min((x for x in (f, ahead) if x is not None), default=None)

    def restore(self, ex: Any) -> None:
        """Load this stage's state from the checkpoint the run resumes from (if any); a few-shot run with no
        warm-up copies at once (``W = 0``: every copy starts from copy 0's initial weights)."""
        if getattr(self.cfg, "resume", None):
            load_stage(self.cfg, self.rank, ex)
        if self.boundary == 0 and self.start == 0:
            self._warm_start(ex)

    def _warm_start(self, ex: Any) -> None:
        from naspipe.models.warm_start import warm_start

        warm_start(ex.model, ex.bank.optimizer)

    def after_task(self, sched: Any, ex: Any, quiesce: Any = None) -> None:
        """Call after every finished task: at a fence, the few-shot warm start (at its boundary) and the save (at a
        checkpoint), then move the fence on; rank 0 marks completion. ``quiesce()``, if given, runs before a save
        (e.g. the context cache finishing its copies)."""
        if sched.fence is not None and sched.at_fence:
            c = sched.fence
            if c == self.boundary:
                self._warm_start(ex)
            if self.every and c % self.every == 0:  # (the few-shot boundary alone saves nothing)
                self._save(c, ex, quiesce)
            sched.set_fence(self._next(c))
        if self.pending:
            self.poll()

    def _save(self, c: int, ex: Any, quiesce: Any) -> None:
        if self._fp is None:
            self._fp = fingerprint(self.cfg)
        if quiesce is not None:
            quiesce()
        if self.saves:
            save_stage(self.cfg, self.rank, c, ex, self.root, self._fp)
        if self.rank == 0 and self.saves:
            self.pending.append(c)

    def poll(self) -> None:
        while self.pending and mark_complete(self.root, self.pending[0], self.cfg.stages, self.keep):
            self.pending.pop(0)

    def finish(self) -> None:
        if self.pending:
            self.poll()


# ---- loading (resume) ----------------------------------------------------------------------------------------
def _load(path: Path, device: Any = "cpu", raw: bytes | None = None) -> dict[str, Any]:
    """The checkpoint at ``path`` (or its bytes ``raw``, already read), unpickled with ``weights_only=True``."""
    import io

    import torch

    try:
        data = torch.load(io.BytesIO(raw) if raw is not None else path, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a corrupt file
        raise CheckpointError(f"checkpoint file {str(path)!r} is corrupted or unreadable "
                              f"({type(e).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint file {str(path)!r} is not a naspipe checkpoint (format {FORMAT})")
    return data


def load_stage(cfg: TrainConfig, rank: int, ex: Any) -> None:
    """Restore stage ``rank`` of a resumed run (``cfg.resume``: the position directory; ``cfg.start``)."""
    import torch

    d = Path(cfg.resume)  # type: ignore[arg-type]
    state = _load(d / f"stage{rank}.pt", ex.device)
    if state["stage"] != rank or state["position"] != cfg.start:
        raise RuntimeError(f"checkpoint {d} holds stage {state['stage']} at {state['position']}, expected stage "
                           f"{rank} at {cfg.start}")
    have, want = comparable(state["fingerprint"], fingerprint(cfg))
    if have != want:
        raise RuntimeError(f"checkpoint {d} stage {rank} was taken by another run")
    ex.model.load_state_dict(state["model"])
    try:
        ex.bank.load_state_dict({"optimizer": state["optimizer"], "steps": state["steps"]})
        vs = state["versions"]
        ex.rule.load_state_dict({**(state.get("rule") or {}), **({"versions": vs} if vs is not None else {})})
    except (ValueError, KeyError) as e:
        raise RuntimeError(f"checkpoint {d} stage {rank}: the saved state does not fit the stage ({e})") from None
    ex.losses.update({int(j): float(v) for j, v in state["losses"].items()})
    if hasattr(ex, "peak_stash"):
        ex.peak_stash = int(state.get("peak_in_flight", 0))
    torch.set_rng_state(state["rng"].cpu())
    if state.get("cuda_rng") is not None and ex.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"].cpu(), ex.device)


def read_sidecar(side: Path) -> tuple[dict[str, Any], int, str, int]:
    """A stage file's sidecar: ``(fingerprint, bytes, sha256, position)``; CheckpointError (one line) when it is
    unreadable or malformed. FileNotFoundError passes (the stage did not save this position)."""
    try:
        meta = jsonfile.loads(side.read_text())
        return meta["fingerprint"], int(meta["bytes"]), str(meta["sha256"]), int(meta["position"])
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint file {str(side)!r} is corrupted ({type(e).__name__})") from None


def _checked_bytes(pt: Path, size: int, sha: str) -> bytes:
    """The bytes of stage file ``pt``, read once and checked against its sidecar's ``size`` and ``sha``."""
    try:
        data = pt.read_bytes()
    except OSError as e:
        raise CheckpointError(f"checkpoint file {str(pt)!r} is missing or unreadable ({type(e).__name__})") from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
        raise CheckpointError(f"checkpoint file {str(pt)!r} is corrupted ({len(data)} bytes, expected {size}; "
                              "sha256 differs)")
    return data


def saved_models(root: Path, position: int) -> list[tuple[Path, dict[str, Any]]]:
    """Every stage's model ``state_dict`` saved at complete ``position`` under ``root``, as ``(stage file, state)``
    in stage order: the supernet's weights after the subnets ``< position`` (what ``naspipe rank --ensemble-last``
    scores). Each file is read once, checked against its sidecar (size and sha256) and unpickled with
    ``weights_only=True``; CheckpointError (one line) for a missing or corrupted one. The optimizer state and the rest
    are not returned."""
    d = position_dir(root, position)
    stages = _stage_count(d)
    if stages is None or not is_complete(d, stages):
        raise CheckpointError(f"checkpoint {str(d)!r} is not complete (a stage file is missing)")
    out = []
    for s in range(stages):
        side, pt = d / f"stage{s}.json", d / f"stage{s}.pt"
        try:
            _, size, sha, pos = read_sidecar(side)
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint file {str(side)!r} is missing (pruned while read?)") from None
        if pos != position:
            raise CheckpointError(f"checkpoint file {str(side)!r} is corrupted (position {pos} in {d.name})")
        state = _load(pt, raw=_checked_bytes(pt, size, sha))
        if state.get("stage") != s or state.get("position") != position or not isinstance(state.get("model"), dict):
            raise CheckpointError(f"checkpoint file {str(pt)!r} holds no model of stage {s} at {position}")
        out.append((pt, state["model"]))
    return out


def locate(path: str | Path) -> tuple[Path, Path]:
    """``(run directory, checkpoint root)`` for ``--resume PATH`` (a run directory or its checkpoint/)."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"no checkpoint to resume: {str(p)!r} does not exist")
    if not p.is_dir():
        raise CheckpointError(f"no checkpoint to resume: {str(p)!r} is not a directory")
    if (p / CHECKPOINT_DIR).is_dir():
        return p, p / CHECKPOINT_DIR
    if p.name == CHECKPOINT_DIR or (p / COMPLETE).exists():
        return p.parent, p
    raise CheckpointError(f"no checkpoint to resume in {str(p)!r} (no {CHECKPOINT_DIR}/ directory); "
                          "train with --checkpoint-every N to write checkpoints")


def check_resume(cfg: TrainConfig, path: str | Path) -> tuple[int, Path]:
    """Validate the newest complete checkpoint under ``path`` against ``cfg``; returns ``(position, dir)``.

    Raises CheckpointError (one line) when there is none, a file is corrupted, or it was taken by a run
    with other arguments. Reads the sidecars and hashes the stage files; unpickles nothing."""
    if getattr(cfg, "online", False):
        raise CheckpointError("checkpoints do not support run-time generated sequences (--sampler) yet")
    from naspipe.runfolder import runs

    _, root = locate(path)
    c = newest_complete(root)
    if c is None:
        raise CheckpointError(f"no complete checkpoint in {str(root)!r} (no position for which every stage "
                              "saved its state)")
    d = position_dir(root, c)
    for s in range(cfg.stages):
        side = d / f"stage{s}.json"
        try:
            fp, size, sha, pos = read_sidecar(side)
        except FileNotFoundError:
            have = _stage_count(d)
            raise CheckpointError(f"checkpoint {str(d)!r} was taken with stages {have}, but the arguments give "
                                  f"stages {cfg.stages}; resume with the arguments of the interrupted run") from None
        if pos != c:
            raise CheckpointError(f"checkpoint file {str(side)!r} is corrupted (position {pos} in {d.name})")
        fp, want = comparable(fp, fingerprint(cfg))
        if fp != want:
            differ = [k for k in want if fp.get(k) != want[k]]  # name a cause before what follows from costs
            if fp.get("few_shot") != want.get("few_shot"):  # one-shot vs few-shot: the split, not the digests
                differ.insert(0, "few_shot")
            key = next((k for k in differ if k not in _FROM_COSTS), None) or next(iter(differ), None) \
                or next(k for k in fp if k not in want)
            have, give = fp.get(key, _UNRECORDED.get(key)), want.get(key, _UNRECORDED.get(key))
            if key in runs.DEFINITION:
                why = runs.blocks_differ(have, give) if key == "weights_sha256" else (
                    "its source differs (its code was edited since)" if have and give else
                    "the checkpoint holds no digest of it (an older naspipe), so it cannot be checked")
                raise CheckpointError(f"checkpoint {str(d)!r} was taken with another definition of supernet "
                                      f"{cfg.space.name!r}: {why}; resume with the code of the interrupted run, or "
                                      "start a new run")
            if key == BEHAVIOUR:
                raise CheckpointError(f"checkpoint {str(d)!r} was taken with another behaviour of supernet "
                                      f"{cfg.space.name!r} (behaviour {_show(key, have)} vs {_show(key, give)}: the "
                                      "same structure, source and initial weights, another forward or backward: "
                                      "what its code reads changed); resume with the code of the interrupted run, "
                                      "or start a new run")
            raise CheckpointError(f"checkpoint {str(d)!r} was taken with {key} {_show(key, have)}, but the "
                                  f"arguments give {key} {_show(key, give)}; resume with the arguments "
                                  "of the interrupted run")
        _checked_bytes(d / f"stage{s}.pt", size, sha)
    if c >= cfg.n:
        raise CheckpointError(f"checkpoint {str(d)!r} is at subnet {c}, the run has only {cfg.n} subnets")
    return c, d


def comparable(fp: dict[str, Any], want: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's fingerprint ``fp`` and the run's ``want`` as they are compared: an older checkpoint's
    kernels read as native (``_kernels_of_older``), and the behaviour only where both hold one (a checkpoint from
    before it was taken, or a run that did not take it: a torchrun rank)."""
    fp = _kernels_of_older(fp, want)
    if BEHAVIOUR not in fp or BEHAVIOUR not in want:
        fp, want = ({k: v for k, v in x.items() if k != BEHAVIOUR} for x in (fp, want))
    return fp, want


def _kernels_of_older(fp: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint from before kernels were recorded was taken natively, on a CPU it did not record (taken to be
    this one)."""
    if "kernels" in fp:
        return fp
    return {**fp, "kernels": kernels.NATIVE, **({"cpu": want["cpu"]} if "cpu" in want else {})}


# fingerprint fields recorded only when they differ from their default (a run of one replica records neither)
_UNRECORDED = {"replicas": 1, "replica_exchange": "exact", "few_shot": None}


def _show(key: str, value: Any) -> str:
    if key == "lr" and isinstance(value, str):
        try:
            return repr(float.fromhex(value))
        except ValueError:
            pass
    if isinstance(value, str) and len(value) > 16 and key.endswith("sha256"):
        return value[:12]
    return repr(value) if isinstance(value, str) else json.dumps(value)


# fingerprint fields that may follow from the space's costs, not from what the run computes: the default
# partition (cost-balanced) and the plan csp-plan chooses on the simulator
_FROM_COSTS = ("partition", "policy")


def adopt_layout(cfg: TrainConfig, path: str | Path, *, adopt_plan: bool = False) -> TrainConfig:
    """``cfg`` with the partition of the newest complete checkpoint under ``path`` when everything else matches
    (the same stage count): the default partition follows from costs, and re-profiling the space must not stop
    the interrupted run from continuing as it was. With ``adopt_plan`` (the arguments said plain ``csp-plan``,
    and the plan in ``cfg`` was chosen on today's costs) the checkpoint's ``csp-plan`` plan is taken over too;
    a plan named on the command line is never overridden (a refusal names the checkpoint's, to pass as
    ``--policy``). Unchanged otherwise (``check_resume`` says why)."""
    from naspipe.spaces.partition import Partition

    try:
        _, root = locate(path)
        c = newest_complete(root)
        fp = jsonfile.loads((position_dir(root, c) / "stage0.json").read_text())["fingerprint"] if c is not None else {}
        part = Partition(tuple(tuple(int(x) for x in b) for b in fp["partition"]))
    except (CheckpointError, OSError, ValueError, KeyError, TypeError):
        return cfg
    fp, want = comparable(fp, fingerprint(cfg))
    if any(fp.get(k) != v for k, v in want.items() if k not in _FROM_COSTS) or set(fp) != set(want):
        return cfg
    changes: dict[str, Any] = {}
    if fp["partition"] != want["partition"] and part.stages == cfg.stages:
        changes["partition"] = part
    if adopt_plan and fp["policy"] != want["policy"] and _same_planned_order(fp["policy"], cfg.policy):
        changes["policy"] = fp["policy"]
    if not changes:
        return cfg
    try:
        return cfg.replace(**changes)
    except ConfigError:
        return cfg


def recorded_sampler(path: str | Path) -> str | None:
    """The sampler the run whose checkpoints lie under ``path`` was trained with (a checkpoint that names none:
    ``uniform``, the sampler of every run before it was recorded); None when no complete checkpoint can be read
    there (``check_resume`` then says why)."""
    from naspipe.sequences.samplers import RECORDED_BEFORE

    try:
        _, root = locate(path)
        c = newest_complete(root)
        if c is None:
            return None
        fp = jsonfile.loads((position_dir(root, c) / "stage0.json").read_text())["fingerprint"]
        return str(fp.get("sampler") or RECORDED_BEFORE)
    except (CheckpointError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _same_planned_order(recorded: object, policy: str) -> bool:
    """Both are ``csp-plan`` with the same ``eps``: they differ at most in the plan the costs chose."""
    from naspipe.sim.plan_choice import PLANNED, eps_of

    names = [str(p).partition(":")[0].strip() for p in (recorded, policy)]
    try:
        return names == [PLANNED, PLANNED] and eps_of(str(recorded)) == eps_of(policy)
    except (ValueError, TypeError):
        return False


def apply_resume(cfg: TrainConfig, path: str | Path, *, adopt_plan: bool = False) -> TrainConfig:
    """``cfg`` continuing from the newest complete checkpoint under ``path`` (validated; CheckpointError);
    ``adopt_plan``: see ``adopt_layout``."""
    cfg = adopt_layout(cfg, path, adopt_plan=adopt_plan)
    c, d = check_resume(cfg, path)
    return cfg.replace(start=c, resume=str(d.resolve()))


def resumes_in_place(cfg: TrainConfig) -> bool:
    """The run resumes from a checkpoint inside its own output directory."""
    if not getattr(cfg, "resume", None):
        return False
    try:
        return Path(cfg.resume).resolve().parent == root_of(cfg.out).resolve()
    except OSError:
        return False


def prepare_run_dir(cfg: TrainConfig) -> None:
    """Prepare ``cfg.out`` for a run: a fresh run clears an earlier one (with overwrite), including its
    checkpoints; a run resuming in place keeps its checkpoints up to the resume position."""
    from naspipe.runfolder import runs

    in_place = resumes_in_place(cfg)
    prepare_out_dir(cfg.out, cfg.overwrite or in_place)
    runs.write_run(cfg.out, "train", runs.train_identity(cfg))
    root = root_of(cfg.out)
    if in_place:
        for c in _positions(root):
            if c > cfg.start:  # what a crashed run saved after the checkpoint we resume from
                shutil.rmtree(position_dir(root, c), ignore_errors=True)
    elif root.exists():
        shutil.rmtree(root)


def verify_resume(cfg: TrainConfig) -> None:
    """Re-check, just before the processes start, the checkpoint a validated config resumes from."""
    if not getattr(cfg, "resume", None):
        return
    d = Path(cfg.resume)
    c, found = check_resume(cfg, d.parent)
    if found.resolve() != d.resolve() or c != cfg.start:
        raise CheckpointError(f"the checkpoints in {str(d.parent)!r} changed since the run was validated "
                              f"(newest complete: {c}, expected {cfg.start})")
