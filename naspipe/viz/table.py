"""Rows as a table: ``table_figure`` shows plain rows (e.g. ``naspipe.experiments.summary_rows``: policies
side by side against the CSP lower bound) as a plotly table, readable in JupyterLab and in exported HTML."""

from __future__ import annotations

import textwrap
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
    """A plotly table of ``rows`` (``columns``: which keys, in order; default all keys of the first row).

    Columns are as wide as their longest text (in proportion), and the figure exactly as tall as its rows:
    plotly does not grow a table to fit (a row that wraps is cut off at the bottom) nor shrink one (blank
    space under it), so the rows' heights are computed here as plotly draws them (``row_heights``)."""
    cols = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    cells = [[_fmt(r.get(c, "")) for r in rows] for c in cols]
    weights = column_weights(cols, cells)
    fig = go.Figure(go.Table(header={"values": [f"<b>{c}</b>" for c in cols], "align": "left",
                                     "fill": {"color": "#E8EEF6"}, "height": HEADER_PX},
                             cells={"values": cells, "align": "left", "height": ROW_PX},
                             columnwidth=weights))
    header = max(HEADER_PX, row_heights([cols], weights)[0]) if cols else 0
    body = sum(row_heights(list(zip(*cells, strict=True)), weights)) if cells else 0
    top = 60 + 22 * title.count("<br>") if title else 10
    fig.update_layout(title={"text": title or ""}, height=top + header + body + BOTTOM_PX, template="plotly_white",
                      margin={"l": 10, "r": 10, "t": top, "b": BOTTOM_PX})
    return fig


ROW_PX = 20  # a one-line row (plotly's default cell height, font 12)
HEADER_PX = 30  # plotly draws a one-line header this tall
EXTRA_LINE_PX = 26  # what each further line of a wrapped cell adds (measured in chromium: 2 lines, 46 px)
BOTTOM_PX = 10
TABLE_WIDTH_PX = 800  # a narrow notebook column: cells wrap at least this much
CHAR_PX = 7.0  # plotly's default font, an average character
PAD_PX = 16  # a cell's left and right padding


def column_weights(cols: Sequence[str], cells: Sequence[Sequence[str]]) -> list[int]:
    """Relative column widths: the longest text of each column (header or cell), between 4 and 40 characters."""
    return [min(40, max(4, len(c), *(len(v) for v in col))) for c, col in zip(cols, cells, strict=True)]


def row_heights(rows: Sequence[Sequence[str]], weights: Sequence[int]) -> list[int]:
    """Pixel height of each row at ``TABLE_WIDTH_PX``: plotly wraps a cell's text at spaces (a word longer than
    its column overflows instead), one line is ``ROW_PX`` and each further line ``EXTRA_LINE_PX``."""
    total = sum(weights) or 1
    chars = [max(1, int((TABLE_WIDTH_PX * w / total - PAD_PX) / CHAR_PX)) for w in weights]
    out = []
    for row in rows:
        lines = max(1, *(len(textwrap.wrap(str(v).replace("<b>", "").replace("</b>", ""), n,
                                           break_long_words=False)) for v, n in zip(row, chars, strict=True)))
        out.append(ROW_PX + EXTRA_LINE_PX * (lines - 1))
    return out
