"""Gantt charts of traces: one row per stage (stage 0 on top), one coloured bar trace per event kind.

Any trace works, simulated or measured. Several traces are drawn as stacked subplots sharing one time
axis, so "simulated against measured" is one picture. Speed comes from drawing one ``go.Bar`` per event
kind (``base`` = starts, ``x`` = durations, horizontal), never one trace or shape per event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from naspipe.trace import COMPUTE_KINDS, Trace, TraceEvent
from naspipe.viz.style import LANE, NAMES, color, ordered_kinds, time_unit

Traces = Trace | Mapping[str, Trace] | Sequence[Trace] | Sequence[tuple[str, Trace]]

DEFAULT_MAX_EVENTS = 20_000
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "units": 1.0}  # "units": abstract unit-time costs (teaching examples)
LABEL_LIMIT = 400  # write subnet ids inside the bars when a figure has at most this many events
LABEL_MIN_PX = 6  # smallest label font (plotly hides a label that needs less): one-digit ids fit a one-unit bar


def trace_name(trace: Trace, index: int = 0) -> str:
    """A short name from the trace's metadata: driver and policy (``sim csp``), else ``trace i``."""
    m = trace.meta
    parts = [str(m[k]) for k in ("driver", "policy") if m.get(k)]
    return " ".join(parts) if parts else f"trace {index}"


def normalize_traces(traces: Traces) -> list[tuple[str, Trace]]:
    """Accept one trace, a list of traces, a list of (name, trace) pairs or a {name: trace} mapping."""
    if isinstance(traces, Trace):
        return [(trace_name(traces), traces)]
    if isinstance(traces, Mapping):
        items = list(traces.items())
    else:
        items = [t if isinstance(t, tuple) else (trace_name(t, i), t) for i, t in enumerate(traces)]
    if not items:
        raise ValueError("gantt needs at least one trace")
    for name, t in items:
        if not isinstance(t, Trace):
            raise TypeError(f"{name!r} is not a naspipe.trace.Trace (got {type(t).__name__})")
    return [(str(n), t) for n, t in items]


def hover_text(e: TraceEvent, unit: str, factor: float) -> str:
    """Hover line(s) of one event: kind, subnet, stage, start, end, duration, bytes and version if set."""
    if e.kind in COMPUTE_KINDS:
        head = f"{e.kind}({e.subnet},{e.stage})"
    else:
        head = f"{e.kind} for subnet {e.subnet}, stage {e.stage}"
    out = (f"{head}<br>subnet {e.subnet}<br>start {e.start * factor:.4g} {unit}<br>end {e.end * factor:.4g} {unit}"
           f"<br>duration {(e.end - e.start) * factor:.4g} {unit}")
    if e.bytes:
        out += f"<br>bytes {e.bytes:,}"
    if e.version is not None:
        out += f"<br>version {e.version}"
    return out


def gantt_bars(events: Sequence[TraceEvent], *, unit: str = "s", factor: float = 1.0, labels: bool = False,
               legend: set[str] | None = None, kinds: Sequence[str] | None = None,
               xaxis: str = "x", yaxis: str = "y", keep_legend: bool = False) -> list[go.Bar]:
    """One horizontal ``go.Bar`` per event kind (all ``kinds`` if given, else those present).

    ``legend``: kinds already shown in the legend (updated in place), so subplots share one legend; a kind's
    entry goes on the first trace that has bars of it (plotly lists no entry for an empty trace).
    ``keep_legend``: an empty kind gets one zero-length bar, so its legend entry stays while bars come and go
    (a slider at step 0).
    """
    by_kind: dict[str, list[TraceEvent]] = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    out = []
    for kind in (list(kinds) if kinds is not None else ordered_kinds(by_kind)):
        evs = by_kind.get(kind, [])
        off, width = LANE.get(kind, (0.0, 0.4))
        show = legend is None or (kind not in legend and bool(evs))
        if legend is not None and evs:
            legend.add(kind)
        placeholder = keep_legend and not evs
        if placeholder:
            evs = [TraceEvent(0, kind, -1, 0.0, 0.0)]
        start = np.fromiter((e.start for e in evs), float, len(evs)) * factor
        dur = np.fromiter((e.end - e.start for e in evs), float, len(evs)) * factor
        bar = go.Bar(
            name=NAMES.get(kind, kind), legendgroup=kind, showlegend=show, orientation="h",
            base=start, x=dur, y=np.fromiter((e.stage for e in evs), int, len(evs)),
            width=width, offset=off - width / 2, marker={"color": color(kind), "line": {"width": 0}},
            hovertext=[""] if placeholder else [hover_text(e, unit, factor) for e in evs],
            hovertemplate="%{hovertext}<extra></extra>",
            xaxis=xaxis, yaxis=yaxis,
        )
        if labels and kind in COMPUTE_KINDS:
            bar.update(text=[""] if placeholder else [str(e.subnet) for e in evs], textposition="inside",
                       insidetextanchor="middle",
                       textfont={"color": "white", "size": 10})
        out.append(bar)
    return out


def _clip(trace: Trace, max_events: int | None) -> tuple[list[TraceEvent], bool]:
    evs = sorted(trace.events, key=lambda e: (e.start, e.stage))
    if max_events is not None and len(evs) > max_events:
        return evs[:max_events], True
    return evs, False


def _default_title(named: list[tuple[str, Trace]]) -> str:
    if len(named) > 1:
        return " vs ".join(n for n, _ in named)
    name, t = named[0]
    where = f" on {t.meta['space']}" if t.meta.get("space") else ""
    return f"{name}{where}: {t.stages} stages, {t.subnets()} subnets, utilisation {t.utilization():.2f}"


def gantt(traces: Traces, title: str | None = None, max_events: int | None = DEFAULT_MAX_EVENTS,
          unit: str | None = None, labels: bool | None = None, height: int | None = None) -> go.Figure:
    """A Gantt chart of one or several traces on one time axis.

    ``max_events``: per trace, only the earliest events are drawn (the title says so); None draws all.
    ``unit``: "s", "ms", "us", or "units" for unit-time cost models (default: ms when the longest trace is
    shorter than a second).
    ``labels``: subnet ids inside the bars (default: when there are at most 400 events).
    """
    named = normalize_traces(traces)
    clipped = [(_clip(t, max_events), t) for _, t in named]
    span = max((max((e.end for e in evs), default=0.0) for (evs, _), _ in clipped), default=0.0)
    if unit is None:
        unit, factor = time_unit(span)
    elif unit in UNITS:
        factor = UNITS[unit]
    else:
        raise ValueError(f"unit must be one of {', '.join(map(repr, UNITS))}, got {unit!r}")
    total = sum(len(evs) for (evs, _), _ in clipped)
    if labels is None:
        labels = total <= LABEL_LIMIT
    n = len(named)
    stages = [t.stages for _, t in named]
    sub_titles = []
    for (name, t), ((evs, cut), _) in zip(named, clipped, strict=True):
        sub_titles.append(f"{name}: first {len(evs):,} of {len(t.events):,} events" if cut else name)
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.08 if n > 1 else 0.0,
                        row_heights=[max(p, 1) for p in stages], subplot_titles=sub_titles if n > 1 else None)
    legend: set[str] = set()
    all_kinds = ordered_kinds({e.kind for (evs, _), _ in clipped for e in evs})
    for r, ((evs, _), t) in enumerate(clipped, start=1):
        suffix = "" if r == 1 else str(r)
        for bar in gantt_bars(evs, unit=unit, factor=factor, labels=labels, legend=legend, kinds=all_kinds,
                              xaxis="x" + suffix, yaxis="y" + suffix):
            fig.add_trace(bar, row=r, col=1)
        p = t.stages
        fig.update_yaxes(row=r, col=1, title_text="stage", tickmode="array", tickvals=list(range(p)),
                         ticktext=[f"stage {s}" for s in range(p)], range=[p - 0.5, -0.5], zeroline=False,
                         showgrid=False)
    fig.update_xaxes(row=n, col=1, title_text=f"time ({unit})")
    fig.update_xaxes(rangemode="tozero", showgrid=True)
    if title is None:
        title = _default_title(named)
    fig.update_layout(
        title={"text": title}, barmode="overlay", bargap=0, hovermode="closest",
        legend={"title": {"text": "task / event"}, "traceorder": "normal"},
        height=height or int(140 + sum(60 + 38 * p for p in stages)), template="plotly_white",
        margin={"l": 80, "r": 20, "t": 70, "b": 50}, uniformtext={"minsize": LABEL_MIN_PX, "mode": "hide"},
    )
    return fig

