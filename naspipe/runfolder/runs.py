"""What a run folder holds: its kind (``train`` or ``reference``) and its identity, in ``run.json``.

Why it exists: bit-identity is promised only between runs of the same configuration, so a run must say
what produced it. ``naspipe train`` (and the torchrun entry point) and ``naspipe reference`` both write
``run.json`` here, before training and again once the sequence is known::

    {"kind": "train", "identity": {"space": ..., "space_sha256": ..., "updates": ..., "seed": ..., "subnets": ...,
     "sampler": ..., "sequence_sha256": ..., "optimizer": ..., "lr": ..., "threads": ..., "shared_layers": ...}}

A user supernet's run adds the digests of its definition, ``source_sha256`` and ``weights_sha256`` (per block;
``naspipe.supernet.definition``): an edit of its module between two runs is named by ``verify`` and refused by
``--resume``. Every run also records ``behaviour_sha256``, what the supernet computes
(``naspipe.preflight.behaviour``), compared only between runs of the same kernels and CPU. ``updates`` is
``exact`` for the reference and every causal policy, else the policy (``pipedream``): such a run differs from the
reference by design, and ``verify`` says so.

The identity holds what decides the numbers of a CSP run besides the schedule-free parts (policy, stages,
window and timing must not change them). Threads belong to it: another intra-op thread count changes the
order of floating-point reductions inside an operation, so results agree bit for bit only at equal counts.

``naspipe verify`` compares the identities of two runs before their numbers (``differences``); a reference
refuses to write into a train run, and a train run into a reference, unless ``--overwrite`` clears the folder
first (``kind_of``, ``clear``). A folder is a naspipe run only when its ``run.json`` says so: its kind is never
guessed from other files, and ``clear`` deletes only the exact names a run writes (``RUN_FILES``, ``checkpoint``
and ``RUN_PATTERN``: ``weights-stage3.pt``, never ``weights-stage-best.pt``), never an input the command reads
(``keep``). No torch here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.fileio import jsonfile
from naspipe.fileio.smallfile import read_small
from naspipe.lifecycle.kernels import AVX2, PORTABLE, SQRT_OPTIMIZERS, vendor_of

RUN_JSON = "run.json"
# the file names of a run directory, written here once (every module that reads or writes one imports them)
LOSSES = "losses.csv"
PARAMS = "params.json"
TRACE = "trace.json"
METRICS = "metrics.json"
EVENTS = "events.jsonl"
STATUS = "status.json"
LOST_HOST = "lost-host.json"  # a torchrun run's lost host, named once (the first rank to meet it: naspipe.torchrun)
SEQUENCE = "sequence.json"
SPACE = "space.json"  # a custom search space put beside a trace by hand (the report reads it)
WEIGHTS = "weights.pt"
PARTS = "parts"
KINDS = ("train", "reference")
# the fields of an identity, in the order verify reports them
IDENTITY = ("space", "space_sha256", "source_sha256", "weights_sha256", "few_shot", "updates", "seed", "subnets",
            "sampler",
            "sequence_sha256", "optimizer", "lr", "threads", "kernels", "behaviour_sha256", "shared_layers", "replicas",
            "replica_exchange")
# what the supernet computes (``naspipe.preflight.behaviour``): compared only between runs whose kernels and CPU
# are the same (``machine_of``), since the digest is taken under the run's kernels
BEHAVIOUR = "behaviour_sha256"
# a few-shot run's split (``naspipe.spaces.few_shot``: block, copies, warm-up); a one-shot run records none, and
# ``differences`` names a run that has one against a run that has none
FEW_SHOT = "few_shot"
# which CPU kernels computed the run (naspipe.lifecycle.kernels); a run from before they were recorded computed
# natively. Under ``native`` the CPU decides the bits too, so two native runs also compare ``cpu``
NATIVE_KERNELS = "native"
# the supernet's definition (``naspipe.supernet.definition``): only comparable between spaces of one name
DEFINITION = ("source_sha256", "weights_sha256")
EXACT = "exact"  # ``updates`` of the reference and of every causal policy: one write per subnet, in order
# files and folders a run writes (cleared by ``clear``): both kinds, a failed run's leftovers, checkpoints
RUN_FILES = (LOSSES, PARAMS, TRACE, METRICS, EVENTS, STATUS, LOST_HOST, PARTS, SEQUENCE, WEIGHTS, RUN_JSON)
CHECKPOINTS = "checkpoint"
# per-stage files (rank digits only): a stage's error and its record, its weights, an older naspipe's per-stage
# parameter hashes
RUN_PATTERN = re.compile(r"(?:error-stage\d+\.(?:txt|json)|weights-stage\d+\.pt|params-stage\d+\.json)\Z")
RUN_DIRS = (PARTS, CHECKPOINTS)  # the entries a run writes that are folders (every other one is a file)
REFERENCE_FILES = (LOSSES, PARAMS, METRICS, WEIGHTS, SEQUENCE, STATUS, RUN_JSON)  # what a reference writes


class RunFileError(UserError):
    """``run.json`` is malformed (the message names the file, in one line: ``naspipe rank`` printed a traceback)."""


# a run.json is a few kilobytes (a user supernet's per-block digests included): a larger file is no run.json
RUN_JSON_MAX_BYTES = 1 << 20


def identity(*, space: Any, seed: int, subnets: int, sampler: str | None, sequence_sha256: str | None, optimizer: str,
             lr: float, threads: int, shared_layers: str, replicas: int = 1,
             replica_exchange: str | None = None, updates: str = EXACT,
             subnets_sha256: str | None = None, kernels: str = NATIVE_KERNELS,
             machine: Mapping[str, str] | None = None, behaviour_sha256: str | None = None) -> dict[str, Any]:
    """A run's identity (JSON-ready). ``space``: a ``SearchSpace``; ``lr``: the learning rate actually used;
    ``replica_exchange``: how replicas combine gradients (``exact`` or ``native``; None with one replica);
    ``updates``: ``exact`` (the reference, a causal policy) or the policy whose updates are not (``pipedream``).
    A user supernet's space adds the digests of its definition (``source_sha256``, ``weights_sha256``).
    ``structure_sha256`` (the space without its name, ``SearchSpace.structure_digest``) and ``subnets_sha256``
    (the sequence without the space's name) let ``differences`` compare a space under two names. ``kernels``: the
    CPU kernels kind; ``machine``: the CPU and torch's capability in force (``naspipe.lifecycle.kernels.machine``);
    ``behaviour_sha256``: what the supernet computes under those kernels (``naspipe.preflight.behaviour``)."""
    digests = getattr(space.model, "digests", None) or {}
    split = getattr(space, "few_shot", None)  # a few-shot space (naspipe.spaces.few_shot): its base, and the split
    base = space.base if split is not None else space
    return {
        "space": base.name, "space_sha256": base.digest(), "structure_sha256": base.structure_digest(),
        **({FEW_SHOT: split.describe()} if split is not None else {}),
        **{k: digests[k] for k in DEFINITION if k in digests}, "updates": str(updates),
        "seed": int(seed), "subnets": int(subnets), "sampler": None if sampler is None else str(sampler),
        "sequence_sha256": sequence_sha256,
        **({"subnets_sha256": subnets_sha256} if subnets_sha256 is not None else {}),
        "optimizer": str(optimizer), "lr": float(lr), "threads": int(threads), "kernels": str(kernels),
        **dict(machine or {}), **({BEHAVIOUR: behaviour_sha256} if behaviour_sha256 else {}),
        "shared_layers": str(shared_layers),
        "replicas": int(replicas),
        **({"replica_exchange": str(replica_exchange)} if replica_exchange is not None else {}),
        # not compared (not in IDENTITY): which in-process definition of a notebook supernet (search finds it)
        **({"definition": space.model.definition} if getattr(space.model, "definition", None) else {}),
    }


def write_run(out: str | Path, kind: str, ident: Mapping[str, Any]) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown run kind {kind!r}; one of {', '.join(KINDS)}")
    from naspipe.fileio.atomic import write_text_atomic

    data = {"kind": kind, "identity": dict(ident)}
    write_text_atomic(Path(out, RUN_JSON), json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_run(out: str | Path) -> dict[str, Any] | None:
    """``run.json`` of a folder (None when it has none); RunFileError when it is malformed, or no regular file of at
    most ``RUN_JSON_MAX_BYTES`` (``naspipe.fileio.smallfile``)."""
    p = Path(out, RUN_JSON)
    try:  # a regular file of at most RUN_JSON_MAX_BYTES: a named pipe there hung rank and verify, /dev/zero ate memory
        text = read_small(p, RUN_JSON_MAX_BYTES, what="a run.json", error=RunFileError)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise RunFileError(f"cannot read {str(p)!r}: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = jsonfile.loads(text)
    except (json.JSONDecodeError, jsonfile.NestedTooDeeply) as e:
        raise RunFileError(f"{p}: not valid JSON ({getattr(e, 'msg', 'nested too deeply')})") from None
    if not isinstance(data, dict) or data.get("kind") not in KINDS or not isinstance(data.get("identity"), dict):
        raise RunFileError(f"{p}: must be an object with 'kind' ({' or '.join(KINDS)}) and 'identity'")
    return data


def kind_of(out: str | Path) -> str | None:
    """The kind of run a folder holds, as its ``run.json`` says (None: no run, or a malformed ``run.json``)."""
    d = Path(out)
    if not d.is_dir():
        return None
    try:
        data = read_run(d)
    except RunFileError:
        return None
    return None if data is None else str(data["kind"])


def is_run_name(name: str) -> bool:
    """``name`` is one a run writes in its folder (``RUN_FILES``, ``checkpoint``, ``RUN_PATTERN``)."""
    return name in RUN_FILES or name == CHECKPOINTS or RUN_PATTERN.match(name) is not None


def run_entries(out: str | Path, checkpoints: bool = True) -> list[Path]:
    """The entries of ``out`` named as a run's (symbolic links included), in ``RUN_FILES`` order, then the
    checkpoints (if ``checkpoints``), then the per-stage files by name."""
    d = Path(out)
    if not d.is_dir():
        return []
    names = [*RUN_FILES, *([CHECKPOINTS] if checkpoints else [])]
    fixed = [d / f for f in names if os.path.lexists(d / f)]
    staged = sorted(p for p in d.iterdir() if RUN_PATTERN.match(p.name))
    return fixed + staged


def held_file(out: str | Path) -> str | None:
    """The first run file a folder holds (None: it holds no run)."""
    entries = run_entries(out)
    return entries[0].name if entries else None


def misplaced(out: str | Path) -> str | None:
    """Why an entry of ``out`` named as a run's cannot be replaced safely: a symbolic link (naspipe neither
    follows nor deletes links), or a folder where a run writes a file (or a file where it writes a folder)."""
    for p in run_entries(out):
        if p.is_symlink():
            return f"{str(p)!r} is a symbolic link (to {os.readlink(p)!r})"
        if p.is_dir() != (p.name in RUN_DIRS):
            what, wants = ("a folder", "file") if p.is_dir() else ("not a folder", "folder")
            return f"{str(p)!r} is {what}, where a naspipe run writes a {wants} of that name"
    return None


def writes(kind: str, name: str) -> bool:
    """A run of ``kind`` writes an entry ``name`` in its folder (a train run: every run name but
    ``weights.pt``; a reference: ``REFERENCE_FILES``)."""
    if kind == "reference":
        return name in REFERENCE_FILES
    return is_run_name(name) and name != WEIGHTS


def clear(out: str | Path, checkpoints: bool = True, keep: Sequence[str | Path] = (), kind: str | None = None) -> None:
    """Delete the entries of ``out`` that the run there (its ``run.json``'s kind) or a run of ``kind`` (the one
    about to replace it) writes; nothing else (``kind`` None and no ``run.json``: any run's). Its checkpoints only
    if ``checkpoints``, never a file in ``keep`` (the inputs of the command). A symbolic link is removed itself,
    never followed; a folder only under the names a run gives its folders."""
    kinds = {k for k in (kind_of(out), kind) if k is not None} or set(KINDS)
    kept = {os.path.realpath(k) for k in keep}
    for p in run_entries(out, checkpoints):
        if os.path.realpath(p) in kept or not any(writes(k, p.name) for k in kinds):
            continue
        if p.name in RUN_DIRS and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif not p.is_dir() or p.is_symlink():
            p.unlink()


def same_structure(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Both runs record the structure of their space (blocks, candidates, batch size, model kind: ``identity``)
    and it agrees: one space, whatever each run calls it (a notebook's supernet and ``module:function``)."""
    sa, sb = a.get("structure_sha256"), b.get("structure_sha256")
    return sa is not None and sa == sb


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """The identity fields both runs record with different values, in ``IDENTITY`` order.

    Runs whose spaces agree by structure (``same_structure``) are the same space under two names: the name, the
    name-keyed digests (``space_sha256``, ``sequence_sha256``) and where the definition lives (``source_sha256``:
    a module's files or a notebook's pickled supernet) are not compared; the blocks' parameter shapes and initial
    weights (``weights_sha256``) and the subnets (``subnets_sha256``) are."""
    renamed = a.get("space") != b.get("space") and same_structure(a, b)
    a, b = _with_kernels(a), _with_kernels(b)
    out = []
    for k in IDENTITY:
        if k == FEW_SHOT:
            if a.get(k) != b.get(k):
                out.append((k, a.get(k), b.get(k)))
            continue
        if renamed and k in ("space", "space_sha256", "source_sha256", "sequence_sha256"):
            if k == "sequence_sha256" and (x := a.get("subnets_sha256")) and (y := b.get("subnets_sha256")) \
                    and x != y:
                out.append(("subnets_sha256", x, y))
            continue
        if renamed and k == "weights_sha256":  # compared: the structure is one (the names differ by design)
            if a.get(k) is not None and b.get(k) is not None and a[k] != b[k]:
                out.append((k, a[k], b[k]))
            continue
        if k in a and k in b and a[k] is not None and b[k] is not None and a[k] != b[k]:
            if k in ("space_sha256", *DEFINITION) and a.get("space") != b.get("space"):
                continue  # the names already differ
            if k == "source_sha256" and a.get("space_sha256") != b.get("space_sha256"):
                continue  # the blocks or candidates already differ (the source then differs too)
            if k == "sampler" and a.get("sequence_sha256") and b.get("sequence_sha256"):
                continue  # the sequences themselves are compared (a replayed generated one is the same run)
            if k == BEHAVIOUR and (machine_of(a) != machine_of(b) or any(
                    a.get(d) != b.get(d) for d in ("structure_sha256", "weights_sha256", *(
                        () if renamed else ("space_sha256", "source_sha256"))))):
                continue  # taken under other kernels or CPUs (named), or the definition already differs
            out.append((k, machine_of(a), machine_of(b)) if k == "kernels" else (k, a[k], b[k]))
        if k == "kernels" and a[k] == b[k] == NATIVE_KERNELS and a.get("cpu") and b.get("cpu") \
                and a["cpu"] != b["cpu"]:  # native bits belong to the kind of CPU
            out.append(("cpu", machine_of(a), machine_of(b)))
    return out


def _with_kernels(ident: Mapping[str, Any]) -> Mapping[str, Any]:
    """A run from before kernels were recorded computed natively."""
    return ident if "kernels" in ident else {**ident, "kernels": NATIVE_KERNELS}


def machine_of(ident: Mapping[str, Any]) -> str:
    """``native AVX512 on GenuineIntel Intel(R) Xeon(R) Processor`` (what a run says of its kernels and CPU)."""
    ident = _with_kernels(ident)
    cap, cpu = ident.get("cpu_capability"), ident.get("cpu")
    return f"{ident['kernels']}{f' {cap}' if cap else ''}{f' on {cpu}' if cpu else ' (CPU not recorded)'}"


def machines_note(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Why two runs of one configuration, one kernels kind (``avx2`` or ``portable``) and two CPUs may differ in
    their bits (None: no reason seen): two CPU vendors under ``avx2``; under either, an optimizer whose step takes a
    square root (``naspipe.lifecycle.kernels.SQRT_OPTIMIZERS``) or a supernet whose forward or backward differs
    between the two CPUs (its behaviour digests differ: a function torch computes with MKL's vector math). Other
    kernels, and two CPUs under ``native``, are configuration differences (``differences``)."""
    a, b = _with_kernels(a), _with_kernels(b)
    kind = a["kernels"]
    if kind != b["kernels"] or kind not in (AVX2, PORTABLE) or not (a.get("cpu") and b.get("cpu")) \
            or vendor_of(a["cpu"]) == vendor_of(b["cpu"]):
        return None
    where = f"kernels {machine_of(a)} vs {machine_of(b)}"
    opt = a.get("optimizer") or b.get("optimizer")
    x, y = a.get(BEHAVIOUR), b.get(BEHAVIOUR)
    why = []
    if kind == AVX2:
        why.append("avx2 gives the same bits only on CPUs of one vendor")
    if kind == PORTABLE and x and y and x != y:  # (under avx2 they differ anyway: its MKL follows the vendor)
        why.append(f"the supernet's forward or backward differs between the two CPUs (behaviour {x[:12]} vs "
                   f"{y[:12]}): a function torch computes with MKL's vector math (exp, log, tanh, erf, sin, ...) "
                   "follows the CPU's vendor")
    if opt in SQRT_OPTIMIZERS:
        why.append(f"{opt}'s square root gives the same bits only on CPUs of one vendor, under any kernels")
    if not why:
        return None
    fix = "rerun both on CPUs of one vendor" if len(why) > 1 or kind == PORTABLE else \
        "rerun both with --kernels portable"
    return f"{where}: {'; '.join(why)}; {fix}"


def describe_differences(diffs: Sequence[tuple[str, Any, Any]]) -> str:
    """``threads 2 vs 1, seed 0 vs 3`` (digests shortened)."""
    def show(k: str, v: Any) -> str:
        if k.endswith("sha256") and isinstance(v, str):
            return v[:12]
        if k == "space_sha256":
            return v
        return repr(v) if isinstance(v, str) else json.dumps(v)

    names = {"space_sha256": "space definition", "sequence_sha256": "sequence digest", "subnets_sha256": "subnets",
             "shared_layers": "shared-layer policy", "threads": "thread count", "replicas": "data-parallel replicas",
             "replica_exchange": "gradient exchange", "cpu": "kernels and CPU"}

    def one(k: str, x: Any, y: Any) -> str:
        if k == FEW_SHOT:
            return f"few-shot split {_split(x)} vs {_split(y)}"
        if k == "source_sha256":
            return f"the supernet's source {show(k, x)} vs {show(k, y)} (its code was edited between the runs)"
        if k == "weights_sha256":
            return blocks_differ(x, y)
        if k == BEHAVIOUR:
            return (f"the supernet's behaviour {show(k, x)} vs {show(k, y)} (the same structure, source and initial "
                    "weights, another forward or backward: what its code reads changed between the runs)")
        if k == "kernels":
            kinds = [str(v).split(" ")[0] for v in (x, y)]
            if vendor_of(x) != vendor_of(y):  # avx2's bits stay within one vendor
                return (f"kernels {x} vs {y}: rerun both with --kernels portable (on CPUs of one vendor where the "
                        "optimizer takes a square root)")
            want = next((v for v in kinds if v != NATIVE_KERNELS), kinds[0])
            return f"kernels {x} vs {y}: rerun with --kernels {want}"
        if k == "cpu":
            return (f"kernels and CPU {x} vs {y} (native kernels give the same bits only on the same kind of CPU: "
                    "rerun both with --kernels portable, on CPUs of one vendor where the optimizer takes a square "
                    "root)")
        if k == "updates":
            async_ = [v for v in (x, y) if v != EXACT]
            return (f"updates {x!r} vs {y!r} (policy {' and '.join(map(repr, async_))} does not update exactly "
                    "as the reference does: its numbers differ by design)")
        return f"{names.get(k, k)} {show(k, x)} vs {show(k, y)}"

    return ", ".join(one(k, x, y) for k, x, y in diffs)


def _split(record: Any) -> str:
    """``block 'cell0' (6 copies) after 8 subnets`` or ``none (one-shot)``."""
    if not isinstance(record, Mapping):
        return "none (one-shot)"
    return f"block {record.get('block')!r} ({record.get('copies')} copies) after {record.get('warmup')} subnets"


def blocks_differ(a: Any, b: Any) -> str:
    """Which blocks' initial weights or parameter shapes differ (``weights_sha256``: label -> digest)."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return "the candidates' initial weights or parameter shapes differ"
    labels = [k for k in a if a.get(k) != b.get(k)] + [k for k in b if k not in a]
    shown = ", ".join(repr(k) for k in labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
    return (f"the initial weights or parameter shapes of block{'s' if len(labels) > 1 else ''} {shown} differ "
            "(another factory or init)")


def train_identity(cfg: Any, sequence_sha256: str | None = None, subnets_sha256: str | None = None) -> dict[str, Any]:
    """The identity of a training run's ``TrainConfig`` (the sequence digests: given, or from its fixed
    sequence)."""
    from naspipe.sequences.sequence import sequence_digest
    from naspipe.sequences.sequence import subnets_digest as plain

    if sequence_sha256 is None and not cfg.online:
        sequence_sha256 = sequence_digest(cfg.space.name, cfg.sequence)
    if subnets_sha256 is None and not cfg.online:
        subnets_sha256 = plain(cfg.sequence)
    from naspipe.lifecycle.kernels import machine

    return identity(space=cfg.space, seed=cfg.seed, subnets=cfg.n, sampler=cfg.sampler,
                    sequence_sha256=sequence_sha256, optimizer=cfg.optimizer, lr=cfg.learning_rate(),
                    threads=cfg.threads, shared_layers=str(cfg.shared), replicas=getattr(cfg, "replicas", 1),
                    replica_exchange=cfg.replica_exchange if getattr(cfg, "replicas", 1) > 1 else None,
                    updates=EXACT if cfg.policy_spec.causal else str(cfg.policy), subnets_sha256=subnets_sha256,
                    kernels=cfg.kernels, machine=machine(cfg.kernels),
                    behaviour_sha256=getattr(cfg, "behaviour_sha256", None))
