"""Static SVG pictures of a Gantt chart and a DAG, with no browser and no extra dependency.

plotly needs kaleido and a headless Chrome to write PNG or SVG; where those are missing (as here), these
small writers produce the README's pictures. Same colours and row order as the interactive figures.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Mapping

import networkx as nx

from naspipe.sched.trace import COMPUTE_KINDS, Trace
from naspipe.viz.dag import critical_path, lanes, layout
from naspipe.viz.style import LANE, NAMES, color, ordered_kinds, time_unit


def _text(x: float, y: float, s: str, size: int = 12, anchor: str = "start", fill: str = "#222",
          weight: str = "normal", transform: str | None = None) -> str:
    tr = f' transform="{transform}"' if transform else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}"{tr}>{html.escape(s)}</text>')


def _ticks(span: float, n: int = 8) -> list[float]:
    if span <= 0:
        return [0.0]
    raw = span / n
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [round(i * step, 12) for i in range(int(span / step + 1e-9) + 1)]


def _legend(kinds: list[str], x: float, y: float) -> list[str]:
    out = []
    for k in kinds:
        out.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="14" height="12" fill="{color(k)}"/>')
        out.append(_text(x + 18, y, NAMES.get(k, k), 12))
        x += 30 + 7 * len(NAMES.get(k, k))
    return out


def _named(traces: Trace | Mapping[str, Trace]) -> list[tuple[str, Trace]]:
    return [("", traces)] if isinstance(traces, Trace) else [(str(k), v) for k, v in traces.items()]


def gantt_svg(traces: Trace | Mapping[str, Trace], title: str = "", width: int = 1100) -> str:
    """One row per stage (stage 0 on top), bars coloured by kind, subnet ids in wide-enough bars.

    ``traces``: one trace, or ``{name: trace}`` drawn as stacked panels on one shared time axis (e.g.
    simulated against measured); each panel is headed by its name.
    """
    named = _named(traces)
    end = max((e.end for _, t in named for e in t.events), default=1.0) or 1.0
    unit, f = time_unit(end)
    left, right, top, row, head = 80, 20, 60, 46, (22 if len(named) > 1 or named[0][0] else 0)
    plot_w = width - left - right
    tops, y = [], top
    for _, t in named:
        tops.append(y + head)
        y += head + row * t.stages + 8
    base = y - 8
    height = int(base + 56)
    sx = plot_w / end
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica, Arial, sans-serif">', f'<rect width="{width}" height="{height}" fill="white"/>',
           _text(left, 22, title, 15, weight="bold")]
    kinds = ordered_kinds({e.kind for _, t in named for e in t.events})
    out += _legend(kinds, left, 44)
    for (name, trace), y0 in zip(named, tops, strict=True):
        P = trace.stages
        if head:
            out.append(_text(left + 6, y0 - 6, name, 13, weight="bold", fill="#444"))
        out.append(f'<line x1="{left}" y1="{y0}" x2="{width - right}" y2="{y0}" stroke="#ccc"/>')
        for s in range(P):
            yc = y0 + row * s + row / 2
            out.append(_text(left - 8, yc + 4, f"stage {s}", 12, "end"))
            out.append(f'<line x1="{left}" y1="{y0 + row * (s + 1):.1f}" x2="{width - right}" '
                       f'y2="{y0 + row * (s + 1):.1f}" stroke="#eee"/>')
        for e in sorted(trace.events, key=lambda e: (e.kind in COMPUTE_KINDS, e.start)):
            off, th = LANE.get(e.kind, (0.0, 0.4))
            x, w = left + e.start * sx, max((e.end - e.start) * sx, 0.5)
            yy = y0 + row * e.stage + row / 2 + (off - th / 2) * row
            out.append(f'<rect x="{x:.2f}" y="{yy:.2f}" width="{w:.2f}" height="{th * row:.2f}" '
                       f'fill="{color(e.kind)}" stroke="white" stroke-width="0.5"><title>{e.kind}({e.subnet},'
                       f'{e.stage}) subnet {e.subnet}: {e.start * f:.4g}-{e.end * f:.4g} {unit}</title></rect>')
            if e.kind in COMPUTE_KINDS and w >= 14:
                out.append(_text(x + w / 2, yy + th * row / 2 + 4, str(e.subnet), 10, "middle", "white"))
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#444"/>')
    out.append(f'<line x1="{left}" y1="{base}" x2="{width - right}" y2="{base}" stroke="#444"/>')
    for t in _ticks(end * f):
        x = left + t / f * sx
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 5}" stroke="#444"/>')
        out.append(_text(x, base + 18, f"{t:g}", 11, "middle"))
    out.append(_text(left + plot_w / 2, base + 40, f"time ({unit})", 12, "middle"))
    ym = top + (base - top) / 2
    out.append(_text(16, ym, "pipeline stage", 12, "middle", transform=f"rotate(-90 16 {ym:.1f})"))
    out.append("</svg>")
    return "\n".join(out)


def _edge_legend(x: float, y: float) -> list[str]:
    out = []
    for label, style in (("data edge", 'stroke="#9a9a9a" stroke-width="1.5"'),
                         ("causal edge (write -> read)", 'stroke="#d62728" stroke-dasharray="3,3" stroke-width="1.5"'),
                         ("critical path", 'stroke="#FFB000" stroke-width="5" stroke-opacity="0.75"')):
        out.append(f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 22:.1f}" y2="{y - 4:.1f}" {style}/>')
        out.append(_text(x + 27, y, label, 12))
        x += 45 + 7 * len(label)
    return out


def dag_svg(g: nx.DiGraph, title: str = "", width: int = 1100) -> str:
    """Nodes by topological generation (x) and lane (y), data edges grey, causal red dashed, critical path gold.

    A lane grows with the most tasks sharing one of its cells (same generation and lane), so stacked nodes
    stay apart; their subnet ids go to the left of the node instead of above it.
    """
    pos = layout(g)
    ln = lanes(g.graph.get("stages", 1), g.graph.get("split_backward", False))
    cp = critical_path(g)
    gens = max((x for x, _ in pos.values()), default=0.0) + 1
    cell = Counter((x, round(y)) for x, y in pos.values())
    crowd = max(cell.values(), default=1)
    left, right, top = 100, 20, 64
    row = max(42, 20 * (crowd - 1))
    height = int(top + row * len(ln) + 62)
    sx = (width - left - right) / max(gens, 1)

    def xy(t: object) -> tuple[float, float]:
        x, y = pos[t]
        return left + (x + 0.5) * sx, top + (y + 0.5) * row

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica, Arial, sans-serif">', f'<rect width="{width}" height="{height}" fill="white"/>',
           _text(left, 22, title, 15, weight="bold")]
    kinds = [k for k in ("F", "B", "W") if any(t.kind == k for t in g)]
    out += _legend(kinds, left, 46)
    out += _edge_legend(left + sum(30 + 7 * len(NAMES.get(k, k)) for k in kinds) + 20, 46)
    per_stage = len(ln) // max(g.graph.get("stages", 1), 1)
    for i, (k, s) in enumerate(ln):
        out.append(_text(left - 8, top + (i + 0.5) * row + 4, f"{k} stage {s}", 12, "end"))
        if i and i % per_stage == 0:
            out.append(f'<line x1="{left - 90}" y1="{top + i * row:.1f}" x2="{width - right}" y2="{top + i * row:.1f}" '
                       f'stroke="#ddd"/>')
    for u, v, kind in g.edges(data="kind"):
        (x1, y1), (x2, y2) = xy(u), xy(v)
        style = 'stroke="#d62728" stroke-dasharray="3,3"' if kind == "causal" else 'stroke="#9a9a9a"'
        out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {style} stroke-width="1"/>')
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in map(xy, cp.tasks))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#FFB000" stroke-width="5" stroke-opacity="0.75"/>')
    on = set(cp.tasks)
    for t in g:
        x, y = xy(t)
        ring = "#FFB000" if t in on else "white"
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="{color(t.kind)}" stroke="{ring}" stroke-width="2">'
                   f"<title>{t}: subnet {t.subnet}, duration {g.nodes[t]['duration']:.4g}</title></circle>")
        if len(g) <= 400:
            gx, gy = pos[t]
            if cell[(gx, round(gy))] > 1:
                out.append(_text(x - 9, y + 3, str(t.subnet), 9, "end"))
            else:
                out.append(_text(x, y - 9, str(t.subnet), 9, "middle"))
    base = top + row * len(ln)
    out.append(f'<line x1="{left}" y1="{base}" x2="{width - right}" y2="{base}" stroke="#444"/>')
    for t in _ticks(gens - 1, 10):
        x = left + (t + 0.5) * sx
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 5}" stroke="#444"/>')
        out.append(_text(x, base + 18, f"{t:g}", 11, "middle"))
    out.append(_text(left + (width - left - right) / 2, base + 40, "topological generation (tasks that could run "
                     "together)", 12, "middle"))
    out.append("</svg>")
    return "\n".join(out)
