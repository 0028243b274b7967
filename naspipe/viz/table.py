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
    heights = [_lines(r, cols) * LINE_PX + 8 for r in zip(*cells, strict=True)] if cells else []
    header = max(1, *(_lines([c], [c]) for c in cols)) * LINE_PX + 10 if cols else 0
    top = 60 + 22 * title.count("<br>") if title else 10
    fig.data[0].header.height = header
    fig.update_layout(title={"text": title or ""}, height=top + header + sum(heights) + 30,
                      margin={"l": 10, "r": 10, "t": top, "b": 10})
    return fig


LINE_PX = 20  # one line of table text (plotly's default font) with its padding
TABLE_WIDTH_PX = 800  # a narrow notebook column: cells wrap at least this much


def _lines(row: Sequence[str], cols: Sequence[str]) -> int:
    """Lines the tallest cell of a row takes when the columns share ``TABLE_WIDTH_PX`` (7 px a character):
    the figure is made that tall, so no row is cut off (plotly does not grow a table to fit)."""
    chars = max(4, TABLE_WIDTH_PX // max(1, len(cols)) // 7)
    return max(1, *(-(-len(str(v)) // chars) for v in row))
