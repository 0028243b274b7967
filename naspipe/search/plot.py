"""Accuracy against cost for the subnets a search evaluated, the chosen one highlighted (plotly).

One marker series per search (hover: candidates, accuracy, loss, params, latency), a
star on each search's best subnet, and a dashed line at the constraint's limit when it is on the x metric.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from naspipe.search.constraints import format_cost
from naspipe.search.result import SearchResult, subnet_names

_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#9D9D9D")
_AXIS = {"params": "parameters", "latency": "forward latency per batch (ms)"}


def accuracy_vs_cost(results: SearchResult | Sequence[SearchResult], metric: str = "params",
                     title: str | None = None) -> go.Figure:
    """Scatter of held-out accuracy against ``metric`` (``params`` or ``latency``) for every evaluated subnet."""
    if metric not in _AXIS:
        raise ValueError(f"metric must be one of {', '.join(_AXIS)}, got {metric!r}")
    runs = [results] if isinstance(results, SearchResult) else list(results)
    if not runs:
        raise ValueError("accuracy_vs_cost needs at least one search result")
    scale = 1e3 if metric == "latency" else 1.0
    fig = go.Figure()
    for i, r in enumerate(runs):
        color = _COLORS[i % len(_COLORS)]
        xs = [(e.params if metric == "params" else e.latency) * scale for e in r.evaluated]
        text = [f"{' '.join(subnet_names(r.space, e.subnet))}<br>acc {e.accuracy:.4f}, loss {e.loss:.4f}<br>"
                f"{format_cost('params', e.params)} params, {format_cost('latency', e.latency)}" for e in r.evaluated]
        fig.add_trace(go.Scatter(x=xs, y=[e.accuracy for e in r.evaluated], mode="markers", name=f"{r.strategy} "
                                 f"(seed {r.seed}, {len(r.evaluated)} subnets)", text=text, hoverinfo="text",
                                 marker={"color": color, "size": 7, "opacity": 0.6}))
        best = r.best
        if best is not None:
            x = (best.params if metric == "params" else best.latency) * scale
            fig.add_trace(go.Scatter(x=[x], y=[best.accuracy], mode="markers", name=f"chosen by {r.strategy}",
                                     text=[f"chosen: {' '.join(subnet_names(r.space, best.subnet))}<br>"
                                           f"acc {best.accuracy:.4f}"], hoverinfo="text",
                                     marker={"color": color, "size": 18, "symbol": "star",
                                             "line": {"color": "black", "width": 1.5}}))
    for c in {c for r in runs for c in r.constraints if c.metric == metric}:
        fig.add_vline(x=c.limit * scale, line_dash="dash", line_color="#E45756", annotation_text=str(c))
    space = runs[0].space.name
    fig.update_layout(title={"text": title or f"{space}: held-out accuracy against {_AXIS[metric].split(' (')[0]}"},
                      xaxis_title=_AXIS[metric], yaxis_title="held-out accuracy (inherited weights)",
                      template="plotly_white", legend={"orientation": "h", "y": -0.2})
    return fig
