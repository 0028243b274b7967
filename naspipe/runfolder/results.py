"""Run results on disk, and the bit-for-bit comparison of two runs.

A run directory holds ``losses.csv`` (``subnet,loss`` with the loss as ``float.hex``, exact),
``params.json`` (global parameter name -> SHA-256 of dtype, shape and bytes) and ``metrics.json``.
A pipeline run may instead write one ``params-stage<S>.json`` per stage; ``read_params`` merges them.
``verify`` says whether two runs are identical and, if not, names the first difference: first in what
produced them (``naspipe.runfolder.runs``: seed, space, optimizer, lr, threads, ...), then in their numbers.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from naspipe.errors import UserError
from naspipe.fileio import jsonfile
from naspipe.fileio.atomic import write_text_atomic
from naspipe.fileio.smallfile import read_small
from naspipe.runfolder.runs import LOSSES, METRICS, PARAMS  # the run-directory names live in naspipe.runfolder.runs

if TYPE_CHECKING:
    from torch import Tensor

STAGE_PARAMS_GLOB = "params-stage*.json"
# losses.csv, params.json, metrics.json: tens of bytes per subnet or tensor; a larger file is none of them (and is not
# read into memory: a link to /dev/zero read until memory ran out, a named pipe blocked verify for ever)
RESULTS_MAX_BYTES = 256 << 20


class ResultsError(UserError):
    """A results file is missing or malformed (the message names the file)."""


def write_losses(path: str | Path, losses: Mapping[int, float]) -> None:
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["subnet", "loss"])
    for j in sorted(losses):
        w.writerow([int(j), float(losses[j]).hex()])
    write_text_atomic(path, buf.getvalue())


def read_losses(path: str | Path) -> dict[int, float]:
    """``losses.csv`` as ``{subnet: loss}``; ResultsError (naming the file and line) for a file that is not
    UTF-8, a malformed or truncated line, a subnet listed twice, or no subnet at all; or (naming the file) no
    regular file of at most ``RESULTS_MAX_BYTES`` (``read_small``)."""
    p = Path(path)
    try:
        text = read_small(p, RESULTS_MAX_BYTES, what="a run's results file", error=ResultsError)
    except OSError as e:
        raise ResultsError(f"cannot read {str(p)!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ResultsError(f"{p}: not a UTF-8 text file (byte {e.start})") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "subnet,loss":
        raise ResultsError(f"{p}: first line must be 'subnet,loss'")
    if not text.endswith("\n"):
        raise ResultsError(f"{p}: line {len(lines)} is truncated (no end of line): {lines[-1]!r}")
    out: dict[int, float] = {}
    first: dict[int, int] = {}
    for i, row in enumerate(csv.reader(lines[1:]), start=2):
        try:
            j, hex_loss = row
            j, loss = int(j), float.fromhex(hex_loss)
        except ValueError:
            raise ResultsError(f"{p}: line {i} is not 'subnet,hex-float': {row!r}") from None
        if j in out:
            raise ResultsError(f"{p}: line {i}: subnet {j} appears twice (first on line {first[j]})")
        out[j], first[j] = loss, i
    if not out:
        raise ResultsError(f"{p}: holds no subnet (an empty run proves nothing)")
    return out


def tensor_hash(t: Tensor) -> str:
    """SHA-256 over dtype, shape and the contiguous CPU bytes of ``t``."""
    import torch  # (here only: reading and comparing runs, ``naspipe verify``, needs no torch)

    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}:{tuple(t.shape)}:".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def param_hashes(named_params: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]) -> dict[str, str]:
    items = named_params.items() if isinstance(named_params, Mapping) else named_params
    return {name: tensor_hash(t) for name, t in items}


def write_params(path: str | Path, hashes: Mapping[str, str]) -> None:
    write_text_atomic(path, json.dumps(dict(sorted(hashes.items())), indent=1) + "\n")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"key {k!r} appears twice")
        seen[k] = v
    return seen


def _read_json(path: Path) -> Any:
    """A JSON file; ResultsError for an unreadable, non-UTF-8, malformed or too deeply nested file, a key that
    appears twice in one object, or no regular file of at most ``RESULTS_MAX_BYTES`` (``read_small``)."""
    try:
        text = read_small(path, RESULTS_MAX_BYTES, what="a run's results file", error=ResultsError)
        return jsonfile.loads(text, object_pairs_hook=_no_duplicates)
    except OSError as e:
        raise ResultsError(f"cannot read {str(path)!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path}: not a UTF-8 text file (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    except ValueError as e:  # (nested too deeply, a key twice)
        raise ResultsError(f"{path}: {e}") from None


def read_params(run_dir: str | Path) -> dict[str, str]:
    """``params.json`` of a run, or the union of its ``params-stage*.json`` (a name twice is an error)."""
    d = Path(run_dir)
    files = [d / PARAMS] if (d / PARAMS).exists() else sorted(d.glob(STAGE_PARAMS_GLOB))
    if not files:
        raise ResultsError(f"{d}: no {PARAMS} (nor {STAGE_PARAMS_GLOB})")
    out: dict[str, str] = {}
    for f in files:
        data = _read_json(f)
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ResultsError(f"{f}: must be an object of parameter name -> hash")
        merge_disjoint(out, data, f, "params", ResultsError)
    return out


def merge_disjoint(into: dict[str, Any], part: Mapping[str, Any], source: str | Path, kind: str,
                   error: type[Exception] = ValueError) -> None:
    """Add ``part`` (one stage's file ``source``) to ``into``: each parameter lives on exactly one stage, so a
    name already there raises ``error`` naming the file and the ``kind`` of file."""
    for name, value in part.items():
        if name in into:
            raise error(f"{source}: parameter {name!r} appears in more than one {kind} file")
        into[name] = value


def write_metrics(path: str | Path, metrics: Mapping[str, Any]) -> None:
    write_text_atomic(path, json.dumps(dict(metrics), indent=1, sort_keys=True, default=str) + "\n")


def run_identity(run_dir: str | Path) -> dict[str, Any] | None:
    """What produced a run: ``run.json``'s identity, else the identity fields of ``metrics.json``'s config
    (runs from before ``run.json``), else None. ResultsError for a malformed file."""
    from naspipe.runfolder import runs

    d = Path(run_dir)
    try:
        data = runs.read_run(d)
    except runs.RunFileError as e:
        raise ResultsError(str(e)) from None
    if data is not None:
        return dict(data["identity"])
    if not (d / METRICS).exists():
        return None
    metrics = _read_json(d / METRICS)
    config = metrics.get("config") if isinstance(metrics, dict) else None
    if not isinstance(config, dict):
        return None
    return {k: config[k] for k in runs.IDENTITY if k in config}


def verify(dir_a: str | Path, dir_b: str | Path) -> tuple[bool, str]:
    """Compare two run directories; ``(True, summary)`` when identical, else what differs.

    What produced the runs comes first: when their identities (``naspipe.runfolder.runs``: space, a user supernet's
    definition, update rule, seed, sequence, optimizer, lr, threads, shared-layer policy) differ, the runs are
    not comparable and the answer says how, with the first difference of numbers. Raises ResultsError when a
    file is missing or malformed (a duplicated or truncated row, an empty run).
    """
    from naspipe.runfolder import runs

    a, b = Path(dir_a), Path(dir_b)
    la, lb = read_losses(a / LOSSES), read_losses(b / LOSSES)
    pa, pb = read_params(a), read_params(b)
    ia, ib = run_identity(a), run_identity(b)
    diffs = runs.differences(ia, ib) if ia is not None and ib is not None else []
    numbers = _first_difference(a, b, la, lb, pa, pb)
    if diffs:
        tail = f"; first difference: {numbers}" if numbers else "; their numbers agree nevertheless"
        return False, f"the runs were made with different configurations: {runs.describe_differences(diffs)}{tail}"
    if numbers:
        note = runs.machines_note(ia, ib) if ia is not None and ib is not None else None
        return False, numbers + (f"; {note}" if note else "")
    return True, f"identical: {len(la)} subnets, {len(pa)} tensors"


def _first_difference(a: Path, b: Path, la: dict[int, float], lb: dict[int, float], pa: dict[str, str],
                      pb: dict[str, str]) -> str | None:
    for j in sorted(set(la) | set(lb)):
        if j not in la or j not in lb:
            where = a if j not in la else b
            return f"subnet {j}: no loss in {where}"
        if la[j].hex() != lb[j].hex():
            return f"subnet {j}: loss {la[j]!r} ({la[j].hex()}) != {lb[j]!r} ({lb[j].hex()})"
    for name in sorted(set(pa) | set(pb)):
        if name not in pa or name not in pb:
            where = a if name not in pa else b
            return f"tensor {name}: missing in {where}"
        if pa[name] != pb[name]:
            return f"tensor {name}: hash {pa[name][:12]}... != {pb[name][:12]}..."
    return None
