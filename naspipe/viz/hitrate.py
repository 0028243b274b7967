"""Prediction hit rate and stall time over time, per stage, from a trace's ``stall`` events.

A ``stall`` event on stage ``s`` for subnet ``j`` means a layer was not on the device when a task of ``j``
wanted it (a miss of the prefetch predictor). It is attributed to the first compute task of ``j`` on
stage ``s`` that starts at or after the stall began; that task is a *miss*, every other compute task a
*hit*. Hit rate = share of compute tasks without a stall, per time bucket (by task start); stall time =
seconds of stall overlapping each bucket.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from naspipe.sched.trace import COMPUTE_KINDS, Trace, TraceEvent
from naspipe.viz.style import time_unit

STAGE_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D")


@dataclass(frozen=True)
class HitStats:
    """Totals per stage: tasks, misses (tasks that had a stall), stall seconds."""

    tasks: tuple[int, ...]
    misses: tuple[int, ...]
    stall_seconds: tuple[float, ...]
    prefetches: tuple[int, ...]

    @property
    def hit_rate(self) -> float:
        n = sum(self.tasks)
        return 1.0 - sum(self.misses) / n if n else float("nan")

    def stage_hit_rate(self) -> list[float]:
        return [1.0 - m / n if n else float("nan") for n, m in zip(self.tasks, self.misses, strict=True)]


@dataclass(frozen=True)
class HitSeries:
    """Per-bucket series: ``edges`` (seconds, len buckets+1), ``hit_rate[s]`` (NaN: no task), ``stall[s]``."""

    edges: np.ndarray
    hit_rate: np.ndarray  # (stages, buckets)
    stall: np.ndarray  # (stages, buckets) seconds of stall in the bucket
    tasks: np.ndarray  # (stages, buckets) compute tasks starting in the bucket

    @property
    def centers(self) -> np.ndarray:
        return (self.edges[:-1] + self.edges[1:]) / 2

    def overall(self) -> np.ndarray:
        """Hit rate of all stages together per bucket (NaN where no task started)."""
        n = self.tasks.sum(axis=0)
        hits = np.nansum(self.hit_rate * self.tasks, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, hits / np.maximum(n, 1), np.nan)


def classify(events: Sequence[TraceEvent], kinds: Sequence[str] = COMPUTE_KINDS) -> list[tuple[TraceEvent, bool]]:
    """Every compute event of ``kinds`` with ``True`` if a stall was attributed to it (a miss)."""
    tasks: dict[tuple[int, int], list[TraceEvent]] = {}
    for e in events:
        if e.kind in kinds:
            tasks.setdefault((e.stage, e.subnet), []).append(e)
    for lst in tasks.values():
        lst.sort(key=lambda e: e.start)
    missed: set[int] = set()
    for e in events:
        if e.kind != "stall":
            continue
        lst = tasks.get((e.stage, e.subnet))
        if not lst:
            continue
        i = bisect.bisect_left([t.start for t in lst], e.start - 1e-12)
        if i < len(lst):
            missed.add(id(lst[i]))
    return [(e, id(e) in missed) for lst in tasks.values() for e in lst]


def hit_stats(trace: Trace, kinds: Sequence[str] = COMPUTE_KINDS) -> HitStats:
    """Totals per stage over the whole trace."""
    P = trace.stages
    tasks, misses, stall, pre = [0] * P, [0] * P, [0.0] * P, [0] * P
    for e, miss in classify(trace.events, kinds):
        tasks[e.stage] += 1
        misses[e.stage] += miss
    for e in trace.events:
        if e.kind == "stall":
            stall[e.stage] += e.end - e.start
        elif e.kind == "prefetch":
            pre[e.stage] += 1
    return HitStats(tuple(tasks), tuple(misses), tuple(stall), tuple(pre))


def hit_series(trace: Trace, buckets: int = 40, kinds: Sequence[str] = COMPUTE_KINDS) -> HitSeries:
    """Hit rate and stall seconds per stage in ``buckets`` equal time buckets over the run."""
    P = trace.stages
    end = max((e.end for e in trace.events), default=0.0)
    edges = np.linspace(0.0, end if end > 0 else 1.0, buckets + 1)
    n = np.zeros((P, buckets))
    miss = np.zeros((P, buckets))
    stall = np.zeros((P, buckets))
    for e, m in classify(trace.events, kinds):
        k = min(int(np.searchsorted(edges, e.start, side="right")) - 1, buckets - 1)
        n[e.stage, max(k, 0)] += 1
        miss[e.stage, max(k, 0)] += m
    lo, hi = edges[:-1], edges[1:]
    for e in trace.events:
        if e.kind == "stall" and e.end > e.start:
            stall[e.stage] += np.clip(np.minimum(hi, e.end) - np.maximum(lo, e.start), 0.0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n > 0, 1.0 - miss / np.maximum(n, 1), np.nan)
    return HitSeries(edges, rate, stall, n)


def hitrate_figure(trace: Trace, buckets: int = 40, title: str | None = None) -> go.Figure:
    """Two panels sharing time: hit rate per stage (top) and stall time per bucket per stage (bottom)."""
    hs = hit_series(trace, buckets)
    st = hit_stats(trace)
    unit, f = time_unit(float(hs.edges[-1]))
    width = float(hs.edges[1] - hs.edges[0]) * f
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("prediction hit rate", f"stall time per bucket ({unit})"))
    x = hs.centers * f
    for s in range(trace.stages):
        c = STAGE_COLORS[s % len(STAGE_COLORS)]
        hover = [f"stage {s}<br>{a * f:.4g}-{b * f:.4g} {unit}<br>tasks {int(t)}<br>hit rate {r:.3f}"
                 for a, b, t, r in zip(hs.edges[:-1], hs.edges[1:], hs.tasks[s], hs.hit_rate[s], strict=True)]
        fig.add_trace(go.Scatter(x=x, y=hs.hit_rate[s], mode="lines+markers", name=f"stage {s}", legendgroup=str(s),
                                 line={"color": c}, hovertext=hover, hovertemplate="%{hovertext}<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Bar(x=x, y=hs.stall[s] * f, width=width / max(trace.stages, 1), name=f"stage {s}",
                             legendgroup=str(s), showlegend=False, marker={"color": c},
                             hovertemplate=f"stage {s}<br>%{{x:.4g}} {unit}<br>stall %{{y:.4g}} {unit}<extra></extra>"),
                      row=2, col=1)
    fig.update_yaxes(title_text="hit rate", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(title_text=f"stall ({unit})", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=f"time ({unit})", row=2, col=1)
    if title is None:
        title = (f"hit rate {st.hit_rate:.3f} ({sum(st.misses)} misses in {sum(st.tasks)} tasks), "
                 f"stall {sum(st.stall_seconds) * f:.4g} {unit}")
    fig.update_layout(title={"text": title}, template="plotly_white", barmode="group", height=520,
                      legend={"title": {"text": "stage"}})
    return fig
