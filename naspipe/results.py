"""Run results on disk, and the bit-for-bit comparison of two runs.

A run directory holds ``losses.csv`` (``subnet,loss`` with the loss as ``float.hex``, exact),
``params.json`` (global parameter name -> SHA-256 of dtype, shape and bytes) and ``metrics.json``.
A pipeline run may instead write one ``params-stage<S>.json`` per stage; ``read_params`` merges them.
``verify`` says whether two runs are identical and, if not, names the first difference.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

LOSSES = "losses.csv"
PARAMS = "params.json"
METRICS = "metrics.json"
STAGE_PARAMS_GLOB = "params-stage*.json"


class ResultsError(ValueError):
    """A results file is missing or malformed (the message names the file)."""


def write_losses(path: str | Path, losses: Mapping[int, float]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["subnet", "loss"])
        for j in sorted(losses):
            w.writerow([int(j), float(losses[j]).hex()])


def read_losses(path: str | Path) -> dict[int, float]:
    p = Path(path)
    try:
        with open(p, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise ResultsError(f"cannot read {str(p)!r}: {e.strerror}") from None
    if not rows or rows[0] != ["subnet", "loss"]:
        raise ResultsError(f"{p}: first line must be 'subnet,loss'")
    out: dict[int, float] = {}
    for i, row in enumerate(rows[1:], start=2):
        try:
            j, text = row
            out[int(j)] = float.fromhex(text)
        except ValueError:
            raise ResultsError(f"{p}: line {i} is not 'subnet,hex-float': {row!r}") from None
    return out


def tensor_hash(t: Tensor) -> str:
    """SHA-256 over dtype, shape and the contiguous CPU bytes of ``t``."""
    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}:{tuple(t.shape)}:".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def param_hashes(named_params: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]) -> dict[str, str]:
    items = named_params.items() if isinstance(named_params, Mapping) else named_params
    return {name: tensor_hash(t) for name, t in items}


def write_params(path: str | Path, hashes: Mapping[str, str]) -> None:
    Path(path).write_text(json.dumps(dict(sorted(hashes.items())), indent=1) + "\n")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ResultsError(f"cannot read {str(path)!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None


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
    Path(path).write_text(json.dumps(dict(metrics), indent=1, sort_keys=True, default=str) + "\n")


def verify(dir_a: str | Path, dir_b: str | Path) -> tuple[bool, str]:
    """Compare two run directories; ``(True, summary)`` when identical, else the first difference.

    Raises ResultsError when a file is missing or malformed.
    """
    a, b = Path(dir_a), Path(dir_b)
    la, lb = read_losses(a / LOSSES), read_losses(b / LOSSES)
    pa, pb = read_params(a), read_params(b)
    for j in sorted(set(la) | set(lb)):
        if j not in la or j not in lb:
            where = a if j not in la else b
            return False, f"subnet {j}: no loss in {where}"
        if la[j].hex() != lb[j].hex():
            return False, f"subnet {j}: loss {la[j]!r} ({la[j].hex()}) != {lb[j]!r} ({lb[j].hex()})"
    for name in sorted(set(pa) | set(pb)):
        if name not in pa or name not in pb:
            where = a if name not in pa else b
            return False, f"tensor {name}: missing in {where}"
        if pa[name] != pb[name]:
            return False, f"tensor {name}: hash {pa[name][:12]}... != {pb[name][:12]}..."
    return True, f"identical: {len(la)} subnets, {len(pa)} tensors"
