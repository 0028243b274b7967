"""Rows as a table: ``table_figure`` shows plain rows (e.g. ``naspipe.experiments.summary_rows``: policies
side by side against the CSP lower bound) as a plotly table, readable in JupyterLab and in exported HTML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go


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
