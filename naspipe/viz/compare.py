"""Policies side by side on one subnet sequence: simulate each, summarise against the CSP lower bound.

``compare_policies`` runs the simulator once per policy on the very same stream; ``summary_rows`` turns the
results into plain rows (makespan, utilisation, bound, efficiency, speed-up against a reference policy);
``table_figure`` shows rows as a plotly table (readable in JupyterLab and in exported HTML).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from naspipe.bound import result_bound
from naspipe.partition import Partition
from naspipe.sched.policies import follows_causal_rule
from naspipe.sched.tasks import BACKWARD, WEIGHT
from naspipe.sequence import SubnetStream
from naspipe.shared import SharedLayers
from naspipe.sim import SimResult, simulate
from naspipe.space import SearchSpace
from naspipe.trace import check_causal

DEFAULT_POLICIES = ("csp", "csp-bw", "bsp", "asp")


def compare_policies(space: SearchSpace, part: Partition, stream: SubnetStream,
                     policies: Sequence[str] = DEFAULT_POLICIES, *, window: int = 200,
                     shared: SharedLayers | None = None, jitter: float = 0.0, seed: int = 0,
                     options: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, SimResult]:
    """One simulation per policy on the same stream; ``options[policy]`` are its scheduler options."""
    options = options or {}
    return {p: simulate(space, part, stream, p, window=window, shared=shared, jitter=jitter, seed=seed,
                        policy_options=dict(options.get(p, {})))
            for p in policies}


def summary_rows(results: Mapping[str, SimResult], space: SearchSpace, part: Partition, stream: SubnetStream,
                 *, shared: SharedLayers | None = None, reference: str | None = "bsp") -> list[dict[str, Any]]:
    """One row per policy. ``efficiency`` = CSP lower bound (split for ``csp-bw``) / makespan, NaN for
    policies that ignore the causal rule (bsp, asp: the bound does not bind them); ``speedup`` = reference
    makespan / makespan (reference: ``bsp`` if present, else the first policy); ``causal_violations``: forwards
    that read a candidate before an earlier subnet's write of it (0 for CSP: the sequential semantics hold)."""
    subnets = [stream[j] for j in range(len(stream))]
    blocks = [[b for b in part.blocks(s) if not space.blocks[b].fixed] for s in range(part.stages)]
    ref = reference if reference in results else next(iter(results), None)
    rows = []
    for name, r in results.items():
        split = r.schedulers[0].write_kind == WEIGHT
        causal = follows_causal_rule(name)
        b = result_bound(r, space, part, subnets, shared)
        ms = r.makespan
        rows.append({
            "policy": name, "space": space.name, "stages": part.stages, "subnets": len(subnets),
            "makespan": ms, "utilization": r.utilization, "lower_bound": b.lower_bound,
            "critical_path": b.critical_path,
            "efficiency": (b.lower_bound / ms if ms else 0.0) if causal else float("nan"),
            "bound_utilization": sum(b.stage_work) / (part.stages * b.lower_bound) if b.lower_bound else 0.0,
            "speedup": (results[ref].makespan / ms) if ms and ref else 1.0, "speedup_vs": ref,
            "causal_violations": len(check_causal(r.trace, subnets, blocks, WEIGHT if split else BACKWARD)),
        })
    return rows


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:.3f}" if abs(v) < 1e4 else f"{v:.4g}"
    return str(v)


def table_figure(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                 title: str | None = None) -> go.Figure:
    """A plotly table of ``rows`` (``columns``: which keys, in order; default all keys of the first row)."""
    cols = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    cells = [[_fmt(r.get(c, "")) for r in rows] for c in cols]
    fig = go.Figure(go.Table(header={"values": [f"<b>{c}</b>" for c in cols], "align": "left",
                                     "fill": {"color": "#E8EEF6"}},
                             cells={"values": cells, "align": "left"}))
    fig.update_layout(title={"text": title or ""}, height=120 + 28 * len(rows),
                      margin={"l": 10, "r": 10, "t": 50 if title else 10, "b": 10})
    return fig
