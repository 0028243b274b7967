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


def _swap_name(swap: str) -> str:
    """The legend's name of a swap mode; the unlimited-memory baseline (no swap mode, ``-``) says so."""
    return f"{swap} swapping" if swap in SWAP_COLORS else "unlimited memory (no swapping)"


def memory_figure(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> go.Figure:
    """Two panels per configuration: samples/s against unlimited memory, and the hit rate. One bar trace per
    swap mode, so the legend names the colours; every bar carries its value (no reference line crosses them)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("throughput / unlimited memory", "hit rate (tasks with layers resident)"))
    swaps = list(dict.fromkeys(r["swap"] for r in rows))
    for col, key in enumerate(("retention", "hit_rate"), start=1):
        for swap in swaps:
            rs = [r for r in rows if r["swap"] == swap]
            fig.add_trace(go.Bar(x=[r["label"] for r in rs], y=[r[key] for r in rs], name=_swap_name(swap),
                                 legendgroup=swap, showlegend=col == 1,
                                 marker={"color": SWAP_COLORS.get(swap, "#54A24B")},
                                 text=[f"{r[key]:.3f}" for r in rs], textposition="outside", cliponaxis=False,
                                 hovertext=[f"batch {r['batch']}, stall {100 * r['stall_share']:.2f}%, waiting for "
                                            f"memory {100 * r['memory_wait_share']:.1f}%" for r in rs],
                                 hovertemplate="%{x}: %{y:.3f}<br>%{hovertext}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(categoryorder="array", categoryarray=[r["label"] for r in rows], row=1, col=col)
        fig.update_yaxes(range=[0, 1.12], row=1, col=col)
    fig.update_layout(title={"text": title or "context switching: budgets and swap modes"}, height=460,
                      template="plotly_white", barmode="relative", legend={"title": {"text": "bars"}},
                      margin={"l": 60, "r": 20, "t": 80, "b": 110})
    return fig
