"""Reproducibility at a glance: one digest per run directory, a table of them, and the notebooks' helpers.

* ``run_digest(run_dir)``: SHA-256 of a run's ``losses.csv`` and ``params.json`` (the files ``naspipe verify``
  compares), so "bit-for-bit identical" becomes "same short hash";
* ``hash_table(rows, reference)`` / ``hash_table_figure``: rows of runs with their digests and whether each
  equals the reference's, as dicts and as a plotly table;
* ``conflict_dense(space, k)``: the space with only ``k`` candidates per choice block, so neighbouring
  subnets share layers and an asynchronous pipeline reads stale weights (the hazard CSP prevents);

Training and reference jobs (``TrainJob``, ``start_training``, ``start_reference``, ``write_reference``) live in
``naspipe.experiments``: this module only reads run directories and draws.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from naspipe.runfolder.runs import LOSSES, TRACE  # the run-directory names live in naspipe.runfolder.runs
from naspipe.spaces.space import Block, SearchSpace, resolve_space

SHORT = 12  # hex digits shown in tables


def _params_bytes(run_dir: Path) -> bytes:
    """``params.json`` in its canonical form (what ``naspipe.runfolder.results.write_params`` writes)."""
    from naspipe.runfolder.results import read_params

    return (json.dumps(dict(sorted(read_params(run_dir).items())), indent=1) + "\n").encode()


def run_digest(run_dir: str | Path) -> dict[str, str]:
    """SHA-256 digests of a run directory: ``losses``, ``params`` and ``run`` (both files together).

    Raises ``naspipe.runfolder.results.ResultsError`` (or FileNotFoundError) when the files are missing.
    """
    d = Path(run_dir)
    losses = (d / LOSSES).read_bytes()
    params = _params_bytes(d)
    run = hashlib.sha256()
    run.update(hashlib.sha256(losses).digest())
    run.update(hashlib.sha256(params).digest())
    return {"losses": hashlib.sha256(losses).hexdigest(), "params": hashlib.sha256(params).hexdigest(),
            "run": run.hexdigest()}


def schedule_digest(run_dir: str | Path) -> str | None:
    """SHA-256 of the order in which a run executed its tasks (``(stage, kind, subnet)`` by start time, from
    ``trace.json``): jitter changes it, CSP keeps the result anyway. None when the run has no trace."""
    from naspipe.sched.trace import Trace

    path = Path(run_dir) / TRACE
    if not path.exists():
        return None
    events = sorted(Trace.load(path).compute_events(), key=lambda e: (e.start, e.stage, e.kind, e.subnet))
    return hashlib.sha256(repr([(e.stage, e.kind, e.subnet) for e in events]).encode()).hexdigest()


def hash_table(rows: Iterable[Mapping[str, Any]], reference: str | Path | None = None,
               reference_name: str = "reference") -> list[dict[str, Any]]:
    """One row per run: the input row's fields (a ``dir`` key is required), ``hash`` (short run digest),
    ``losses sha`` / ``params sha`` (short), ``schedule`` (short ``schedule_digest``, "-" without a trace)
    and, with a ``reference`` directory, ``equal`` (bool) and
    ``verdict`` ("identical" / "DIFFERS"). The reference row comes first, its ``run`` is ``reference_name``
    (which should start with "reference": ``summary`` skips such rows).
    """
    out: list[dict[str, Any]] = []
    ref = run_digest(reference) if reference is not None else None
    items = list(rows)
    if reference is not None:
        items.insert(0, {"run": reference_name, "policy": "sequential reference", "dir": str(reference)})
    for r in items:
        if "dir" not in r:
            raise KeyError(f"hash_table rows need a 'dir' key: {dict(r)!r}")
        dg = run_digest(r["dir"])
        row = {k: v for k, v in r.items() if k != "dir"}
        row.update({"hash": dg["run"][:SHORT], "losses sha": dg["losses"][:SHORT], "params sha": dg["params"][:SHORT]})
        row["schedule"] = (schedule_digest(r["dir"]) or "-")[:SHORT]
        if ref is not None:
            row["equal"] = dg["run"] == ref["run"]
            row["verdict"] = "identical" if row["equal"] else "DIFFERS"
        out.append(row)
    return out


def hash_table_figure(table: list[dict[str, Any]], title: str | None = None) -> go.Figure:
    """A plotly table of ``hash_table`` rows, rows that differ from the reference in red."""
    from naspipe.viz.table import table_figure

    cols = [c for c in table[0] if c != "equal"] if table else []
    fig = table_figure(table, cols, title=title)
    fill = ["#FDE2E1" if r.get("equal") is False else "white" for r in table]
    fig.data[0].cells.fill = {"color": [fill] * len(cols)}
    return fig


def summary(table: list[dict[str, Any]], expect_equal: str = "policy", differs: str = "asp") -> dict[str, Any]:
    """What the table shows, as plain data: whether every run other than those whose ``expect_equal``
    field is ``differs`` equals the reference, and whether those differ."""
    runs = [r for r in table if not str(r.get("run", "")).startswith("reference")]
    same = [r for r in runs if r.get(expect_equal) != differs]
    hazard = [r for r in runs if r.get(expect_equal) == differs]
    return {"runs": len(runs), "reproducible_runs": sum(bool(r.get("equal")) for r in same),
            "all_reproducible": bool(same) and all(r.get("equal") for r in same),
            "hazard_runs": len(hazard), "hazard_differs": bool(hazard) and not any(r.get("equal") for r in hazard),
            "distinct_hashes": len({r["hash"] for r in table})}


def loss_curves(runs: Mapping[str, str | Path], title: str = "training loss per subnet") -> go.Figure:
    """Loss of every subnet for each run directory (``{name: dir}``), one line each: identical runs overlap."""
    from naspipe.runfolder.results import read_losses

    fig = go.Figure()
    for i, (name, d) in enumerate(runs.items()):
        losses = read_losses(Path(d) / LOSSES)
        js = sorted(losses)
        fig.add_trace(go.Scatter(x=js, y=[losses[j] for j in js], mode="lines+markers", name=name,
                                 line={"dash": ("solid", "dash", "dot", "dashdot")[i % 4], "width": 3 if i == 0 else 2},
                                 hovertemplate=f"{name}<br>subnet %{{x}}<br>loss %{{y:.6g}}<extra></extra>"))
    fig.update_layout(title={"text": title}, template="plotly_white", height=360,
                      xaxis={"title": {"text": "subnet (training order)"}}, yaxis={"title": {"text": "loss"}},
                      legend={"title": {"text": "run"}})
    return fig


def loss_series_figure(series: Mapping[str, Sequence[float]], window: int = 1,
                       title: str = "training loss (moving average)") -> go.Figure:
    """Loss per subnet of several runs given as lists (``{name: losses}``), each a moving average over ``window``
    subnets, in the look of ``loss_curves``: the first series (the reference) thick and solid, the others dashed
    so lines that overlap stay visible; tall enough to tell them apart."""
    fig = go.Figure()
    w = max(1, int(window))
    for i, (name, values) in enumerate(series.items()):
        v = np.asarray(values, dtype=float)
        avg = np.convolve(v, np.ones(w), "full")[:len(v)] / np.minimum(np.arange(1, len(v) + 1), w)
        fig.add_trace(go.Scatter(x=list(range(len(v))), y=avg, mode="lines", name=name,
                                 line={"dash": ("solid", "dash", "dot", "dashdot", "longdash")[i % 5],
                                       "width": 4 if i == 0 else 2},
                                 hovertemplate=f"{name}<br>subnet %{{x}}<br>loss %{{y:.4g}}<extra></extra>"))
    fig.update_layout(title={"text": title}, template="plotly_white", height=460,
                      xaxis={"title": {"text": "subnet (training order)"}}, yaxis={"title": {"text": "loss"}},
                      legend={"title": {"text": "run"}})
    return fig


def conflict_dense(space: SearchSpace | str, k: int = 1) -> SearchSpace:
    """``space`` with only the first ``k`` candidates of every choice block (fixed blocks unchanged)."""
    sp = resolve_space(space)
    if k < 1:
        raise ValueError("conflict_dense needs k >= 1")
    blocks = tuple(b if b.fixed else Block(b.name, b.candidates[:k], b.fixed, b.role) for b in sp.blocks)
    return dataclasses.replace(sp, name=f"{sp.name}-k{k}", blocks=blocks)


def digests_json(table: list[dict[str, Any]], **extra: Any) -> str:
    """The table's run names and hashes plus ``summary`` as one JSON line (a notebook's machine-readable result)."""
    data = {"hashes": {str(r.get("run")): r["hash"] for r in table}, **summary(table), **extra}
    return json.dumps(data, sort_keys=True)


__all__ = ["conflict_dense", "digests_json", "hash_table", "hash_table_figure", "loss_curves", "loss_series_figure",
           "run_digest", "schedule_digest", "summary"]

