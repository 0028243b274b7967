"""Step through a schedule: the Gantt chart up to time ``t``, driven by a slider.

``schedule_player`` returns an ipywidgets box (play button, slider, ``FigureWidget``) for the notebook;
``schedule_frames`` is the widget-free version (plotly frames and a plotly slider) that also works in
exported HTML. Tasks running at ``t`` are drawn up to ``t``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from naspipe.sched.trace import COMPUTE_KINDS, Trace, TraceEvent
from naspipe.viz.gantt import LABEL_LIMIT, UNITS, gantt, gantt_bars
from naspipe.viz.style import ordered_kinds, time_unit
from naspipe.viz.widget_views import sync_new_views, with_text


def events_until(trace: Trace, t: float) -> list[TraceEvent]:
    """Events that started before ``t``, cut at ``t``."""
    return [e if e.end <= t else TraceEvent(e.stage, e.kind, e.subnet, e.start, t, e.bytes, e.version)
            for e in trace.events if e.start < t]


def _times(trace: Trace, steps: int) -> np.ndarray:
    end = max((e.end for e in trace.events), default=0.0)
    return np.linspace(0.0, end, steps + 1)


def schedule_frames(trace: Trace, steps: int = 40, title: str | None = None) -> go.Figure:
    """A Gantt with a plotly slider (and play button) over ``steps`` points in time; no widgets needed."""
    times = _times(trace, steps)
    unit, f = time_unit(float(times[-1]))
    kinds = ordered_kinds({e.kind for e in trace.events})
    fig = gantt(trace, title=title, unit=unit)
    fig.update_xaxes(range=[0, float(times[-1]) * f * 1.01])
    span = float(times[-1]) * f * 1.01  # the time axis, fixed: a label is drawn where its bar holds it at the end
    fig.frames = [go.Frame(name=f"{t * f:.4g}", data=gantt_bars(events_until(trace, t), unit=unit, factor=f,
                                                              kinds=kinds, labels=True, span=span))
                  for t in times]
    step = [{"args": [[fr.name], {"frame": {"duration": 0, "redraw": True}, "mode": "immediate"}],
             "label": fr.name, "method": "animate"} for fr in fig.frames]
    fig.update_layout(
        sliders=[{"steps": step, "active": len(step) - 1, "currentvalue": {"prefix": f"time ({unit}) = "},
                  "pad": {"t": 40}}],
        updatemenus=[{"type": "buttons", "showactive": False, "x": 0, "y": -0.25, "xanchor": "left",
                      "buttons": [{"label": "play", "method": "animate", "args": [
                          None, {"frame": {"duration": 150, "redraw": True}, "fromcurrent": True}]}]}],
    )
    fig.update_layout(height=(fig.layout.height or 400) + 120,  # the slider sits where gantt puts the legend:
                      legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"})  # right
    return fig


def schedule_player(trace: Trace, steps: int = 40, title: str | None = None, unit: str | None = None) -> Any:
    """An ipywidgets VBox: play button + slider over time + the Gantt up to that time.

    ``unit``: as ``gantt``'s ("units" for unit-time examples). The legend and both axes stay put while the
    slider moves. Falls back to ``schedule_frames`` (a plain figure) where widgets cannot be built.
    """
    times = _times(trace, steps)
    unit, f = time_unit(float(times[-1])) if unit is None else (unit, UNITS[unit])
    kinds = ordered_kinds({e.kind for e in trace.events})
    labels = len(trace.events) <= LABEL_LIMIT
    # complete before it becomes a widget (see LiveMonitor): the axis and the line at the slider's start
    start = gantt(trace, title=title, unit=unit, labels=labels)
    start.update_xaxes(range=[0, float(times[-1]) * f * 1.01])
    start.update_layout(shapes=[_time_line(float(times[steps]) * f)])
    try:
        import ipywidgets as widgets

        fig = go.FigureWidget(start)
        slider = widgets.IntSlider(value=steps, min=0, max=steps, description="step")
        play = widgets.Play(value=steps, min=0, max=steps, interval=200, description="play")
        widgets.jslink((play, "value"), (slider, "value"))
        label = widgets.Label()
    except Exception:  # noqa: BLE001 - no widgets here: the plotly-native slider instead
        return schedule_frames(trace, steps, title)

    def show(change: Any = None) -> None:
        t = float(times[slider.value])
        bars = {b.legendgroup: b for b in gantt_bars(events_until(trace, t), unit=unit, factor=f, kinds=kinds,
                                                      labels=labels, keep_legend=True,
                                                      span=float(times[-1]) * f * 1.01)}
        with fig.batch_update():
            for tr in fig.data:
                b = bars.get(tr.legendgroup)
                if b is not None:
                    tr.base, tr.x, tr.y, tr.hovertext, tr.text = b.base, b.x, b.y, b.hovertext, b.text
            fig.layout.shapes = [_time_line(t * f)]
        sync_new_views(fig)  # a view drawn later (a page reload) shows this step, not the first one
        done = sum(1 for e in trace.events if e.kind in COMPUTE_KINDS and e.end <= t)
        label.value = f"t = {t * f:.4g} {unit}: {done} tasks finished"

    slider.observe(show, names="value")
    show()
    box = widgets.VBox([widgets.HBox([play, slider, label]), fig])
    return with_text(box, f"{fig.layout.title.text or 'schedule'} (naspipe schedule_player, widgets: drawn only while "
                          "the kernel that ran this cell is connected; schedule_frames draws it without one)")


def _time_line(x: float) -> dict[str, Any]:
    """The dashed vertical line at the slider's time."""
    return {"type": "line", "x0": x, "x1": x, "y0": 0, "y1": 1, "yref": "paper",
            "line": {"color": "black", "dash": "dash", "width": 1}}
