"""Context switching in pictures: simulated device budgets, swap modes and the paper's CSP-vs-BSP trend.

Why it exists: the notebook on context switching draws the rows of ``naspipe.experiments.memory_sweep`` (one
space under several budgets, swap modes and pin modes); ``memory_figure`` draws throughput against unlimited
memory and the hit rate per configuration. The sweeps themselves (and ``trend_row``, the CSP-vs-BSP
comparison behind the paper's 1.1x-6.8x) live in ``naspipe.experiments.sweeps``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

SWAP_COLORS = {"predictive": "#4C78A8", "on-demand": "#E45756", "resident": "#9D9D9D"}


def memory_figure(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> go.Figure:
    """Two panels per configuration: samples/s against unlimited memory, and the hit rate."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("throughput / unlimited memory", "hit rate (tasks with layers resident)"))
    labels = [r["label"] for r in rows]
    colors = [SWAP_COLORS.get(r["swap"], "#54A24B") for r in rows]
    for col, key in enumerate(("retention", "hit_rate"), start=1):
        fig.add_trace(go.Bar(x=labels, y=[r[key] for r in rows], marker={"color": colors}, showlegend=False,
                             text=[f"{r[key]:.3f}" for r in rows], textposition="outside",
                             hovertext=[f"batch {r['batch']}, stall {100 * r['stall_share']:.2f}%, waiting for "
                                        f"memory {100 * r['memory_wait_share']:.1f}%" for r in rows],
                             hovertemplate="%{x}: %{y:.3f}<br>%{hovertext}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(range=[0, 1.12], row=1, col=col)
    fig.add_hline(y=0.9, line={"dash": "dot", "color": "#333333"}, row=1, col=1)
    fig.update_layout(title={"text": title or "context switching: budgets and swap modes"}, height=420,
                      template="plotly_white", margin={"l": 60, "r": 20, "t": 80, "b": 110})
    return fig


