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

from naspipe.sched.trace import COMPUTE_KINDS, Trace, TraceEvent
from naspipe.viz.style import LANE, NAMES, color, ordered_kinds, time_unit

Traces = Trace | Mapping[str, Trace] | Sequence[Trace] | Sequence[tuple[str, Trace]]

DEFAULT_MAX_EVENTS = 20_000
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "units": 1.0}  # "units": abstract unit-time costs (teaching examples)
LABEL_LIMIT = 400  # write subnet ids inside the bars when a figure has at most this many events
# Subnet ids are drawn at one size, LABEL_PX, on every bar wide enough to hold its id (the others carry none; their
# hover says it). Plotly's own fitting pads a label by 3 px a side and shrinks it to fit: two-digit ids on the one-unit
# bars of notebook 02 (12 subnets, about 12 px a bar) were hidden at a readable size, or unreadable at 5 px. So the
# bars draw their text unshrunk (``constraintext="none"``) and ``label_fits`` decides, for a plot area of PLOT_PX
# (a notebook output at a 1400 px window with the legend below the chart: about 860 px; the report is wider).
LABEL_PX = 8
PLOT_PX = 820
DIGIT_EM = 0.62  # width of a digit in em (Open Sans, plotly's font: 0.57), with a little to spare
LABEL_MARGIN_PX = 2  # at least this much bar left over beside a label


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
            raise TypeError(f"{name!r} is not a naspipe.sched.trace.Trace (got {type(t).__name__})")
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


def label_width_px(text: str) -> float:
    """Width of a subnet id drawn at ``LABEL_PX`` (digits; an estimate a little above Open Sans's)."""
    return len(text) * DIGIT_EM * LABEL_PX


def label_fits(text: str, duration: float, span: float) -> bool:
    """A bar of ``duration`` on a time axis ``span`` long (same unit) holds ``text`` at ``LABEL_PX`` when the plot
    area is ``PLOT_PX`` wide, with ``LABEL_MARGIN_PX`` to spare."""
    return span > 0 and duration / span * PLOT_PX >= label_width_px(text) + LABEL_MARGIN_PX


def gantt_bars(events: Sequence[TraceEvent], *, unit: str = "s", factor: float = 1.0, labels: bool = False,
               legend: set[str] | None = None, kinds: Sequence[str] | None = None,
               xaxis: str = "x", yaxis: str = "y", keep_legend: bool = False,
               span: float | None = None) -> list[go.Bar]:
    """One horizontal ``go.Bar`` per event kind (all ``kinds`` if given, else those present).

    ``legend``: kinds already shown in the legend (updated in place), so subplots share one legend; a kind's
    entry goes on the first trace that has bars of it (plotly lists no entry for an empty trace).
    ``keep_legend``: an empty kind gets one zero-length bar, so its legend entry stays while bars come and go
    (a slider at step 0). ``labels``: subnet ids on the compute bars that hold them (``label_fits``) on a time
    axis ``span`` long in the figure's unit (default: up to the last event's end).
    """
    if span is None:
        span = max((e.end for e in events), default=0.0) * factor
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
            text = [""] if placeholder else [
                str(e.subnet) if label_fits(str(e.subnet), (e.end - e.start) * factor, span) else "" for e in evs]
            bar.update(text=text, textposition="inside", insidetextanchor="middle", constraintext="none",
                       textangle=0, textfont={"color": "white", "size": LABEL_PX})
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
                              xaxis="x" + suffix, yaxis="y" + suffix, span=span * factor):
            fig.add_trace(bar, row=r, col=1)
        p = t.stages
        fig.update_yaxes(row=r, col=1, title_text="stage", tickmode="array", tickvals=list(range(p)),
                         ticktext=[f"stage {s}" for s in range(p)], range=[p - 0.5, -0.5], zeroline=False,
                         showgrid=False)
    fig.update_xaxes(row=n, col=1, title_text=f"time ({unit})")
    fig.update_xaxes(rangemode="tozero", showgrid=True)
    if title is None:
        title = _default_title(named)
    height = height or int(170 + sum(60 + 38 * p for p in stages))
    margin = {"l": 80, "r": 20, "t": 70, "b": 90}
    fig.update_layout(  # the legend in a row under the time axis: the bars get the width a legend column took
        title={"text": title}, barmode="overlay", bargap=0, hovermode="closest",
        legend={"title": {"text": "task / event"}, "traceorder": "normal", "orientation": "h", "x": 0,
                "xanchor": "left", "y": -LEGEND_BELOW_PX / max(1, height - margin["t"] - margin["b"]),
                "yanchor": "top"},
        height=height, template="plotly_white", margin=margin,
    )
    return fig


LEGEND_BELOW_PX = 55  # from the bottom of the plot area to the legend's top: under the ticks and the axis title

