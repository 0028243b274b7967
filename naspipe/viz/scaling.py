"""Simulated sweeps over K (candidates per block) and stage counts: utilisation, efficiency, CSP vs BSP.

``naspipe.experiments.scaling_sweep`` simulates every (K, stages, policy) on one seeded sequence per
(K, stages); the rows are plain dicts. ``scaling_figure`` draws utilisation, efficiency against the lower
bound and the throughput ratio of each policy to ``bsp`` over K, one line per (policy, stages).

Reference: the paper's unit-time bubble model (4 stages, 8 blocks per stage, window 200) gives CSP a
utilisation of 0.32 / 0.42 / 0.56 / 0.81 at K = 12 / 24 / 48 / 96 (``PAPER_UNIT_UTILIZATION``); compare
it with ``space="unit-k{k}"``. These sweeps leave device memory out, so the paper's large speed-ups over
BSP (which come from the small batches a whole-supernet-on-device baseline must use) do not show here: the
ratio isolates the scheduling effect (``naspipe.experiments.trend_row`` adds memory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

PAPER_UNIT_UTILIZATION = {12: 0.32, 24: 0.42, 48: 0.56, 96: 0.81}
POLICY_COLORS = {"csp": "#4C78A8", "csp-bw": "#54A24B", "bsp": "#F58518", "asp": "#B279A2", "sequential": "#9D9D9D"}


def scaling_figure(rows: Sequence[Mapping[str, Any]], reference: Mapping[int, float] | None = None,
                   title: str | None = None) -> go.Figure:
    """Three panels over K: utilisation, efficiency against the lower bound, throughput / bsp throughput."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=("utilisation", "CSP efficiency (bound / makespan)", "throughput / bsp"))
    keys = sorted({(r["policy"], r["stages"]) for r in rows}, key=lambda t: (t[1], t[0]))
    for policy, p in keys:
        sel = sorted((r for r in rows if r["policy"] == policy and r["stages"] == p), key=lambda r: r["k"])
        ks = [r["k"] for r in sel]
        style = {"color": POLICY_COLORS.get(policy, "#333333"), "dash": "solid" if p == min(k[1] for k in keys)
                 else "dash"}
        for col, key in enumerate(("utilization", "efficiency", "speedup"), start=1):
            ys = [r[key] for r in sel]
            if all(y != y for y in ys):  # NaN: the CSP bound does not apply to this policy
                continue
            hover = f"{policy}, {p} stages<br>K=%{{x}}<br>{key} %{{y:.3f}}<extra></extra>"
            fig.add_trace(go.Scatter(x=ks, y=ys, mode="lines+markers", line=style,
                                     name=f"{policy}, {p} stages", legendgroup=f"{policy}{p}", showlegend=col == 1,
                                     hovertemplate=hover), row=1, col=col)
    if reference:
        fig.add_trace(go.Scatter(x=list(reference), y=list(reference.values()), mode="markers",
                                 marker={"symbol": "x", "size": 11, "color": "black"},
                                 name="paper, unit model, 4 stages"), row=1, col=1)
    for col in (1, 2, 3):
        fig.update_xaxes(title_text="K (candidates per block)", type="log", tickvals=sorted({r["k"] for r in rows}),
                         row=1, col=col)
    fig.update_yaxes(range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    fig.update_yaxes(rangemode="tozero", row=1, col=3)
    space = rows[0]["space"] if rows else ""
    entries = sum(1 for t in fig.data if t.showlegend is not False)
    fig.update_layout(title={"text": title or f"scaling over K ({space.rsplit('-k', 1)[0]} spaces, "
                                               f"{rows[0]['subnets'] if rows else 0} subnets)"},
                      template="plotly_white", height=max(430, 240 + 32 * entries),  # every legend entry shows
                      legend={"title": {"text": "policy, stages"}})
    return fig
