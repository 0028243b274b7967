"""Figures of a ranking against a stand-alone ground truth (``naspipe rank``): the scatter and tau beside its floors.

Why it exists: a Kendall tau is read against the noise floors (truth seed vs seed, supernet seed vs seed) and
next to the picture it summarises (supernet accuracy against stand-alone accuracy, one point an
architecture); how many subnets a supernet needs before its ranking stops moving is the length curve. Plain data in,
plotly figures out: the notebook ``09_trust_your_search``, ``benchmarks/trust.py`` and ``benchmarks/trust_curve.py``
draw these.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

TEMPLATE = "plotly_white"
Interval = Mapping[str, float]  # {"value", "low", "high"}, as ``naspipe.ranking.stats.Estimate.to_dict``


def rank_scatter(truth_accuracy: Sequence[float], supernet_accuracy: Sequence[float], names: Sequence[str],
                 pick: int | None = None, title: str | None = None) -> go.Figure:
    """Supernet accuracy (y) against stand-alone accuracy (x), one point per architecture; ``pick`` (an index)
    is the search's pick, marked. ValueError for columns of different lengths, a value that is not a finite number
    (NaN: a point plotly leaves out without a word) or a ``pick`` out of range."""
    n = len(truth_accuracy)
    if not n or len(supernet_accuracy) != n or len(names) != n:
        raise ValueError(f"rank_scatter needs one stand-alone accuracy, supernet accuracy and name per architecture; "
                         f"got {n}, {len(supernet_accuracy)} and {len(names)}")
    for label, column in (("stand-alone", truth_accuracy), ("supernet", supernet_accuracy)):
        for i, v in enumerate(column):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"rank_scatter: the {label} accuracy of architecture {i} ({names[i]!r}) is {v!r}, "
                                 "not a finite number (a diverged run's NaN ranks nothing: leave it out, or say it)")
    if pick is not None:  # (any whole number: numpy's int64 too, as an argmax gives it; not a bool)
        if isinstance(pick, bool) or not isinstance(pick, numbers.Integral) or not 0 <= pick < n:
            raise ValueError(f"pick must be the index of an architecture, 0..{n - 1}, got {pick!r}")
        pick = int(pick)
    fig = go.Figure(go.Scatter(x=list(truth_accuracy), y=list(supernet_accuracy), mode="markers", text=list(names),
                               name="architecture", marker={"size": 6, "opacity": 0.7},
                               hovertemplate="%{text}<br>stand-alone %{x:.4f}<br>supernet %{y:.4f}<extra></extra>"))
    if pick is not None:
        fig.add_trace(go.Scatter(x=[truth_accuracy[pick]], y=[supernet_accuracy[pick]], mode="markers",
                                 name=f"the search's pick ({names[pick]})",
                                 marker={"size": 14, "symbol": "star", "color": "crimson"}))
    best = max(range(len(truth_accuracy)), key=lambda i: truth_accuracy[i])
    fig.add_vline(x=truth_accuracy[best], line_dash="dot", line_color="green",
                  annotation_text=f"best stand-alone ({names[best]})", annotation_position="bottom left")
    fig.update_layout(template=TEMPLATE, height=460,
                      title=title or "supernet vs stand-alone accuracy, one point per architecture",
                      xaxis_title="stand-alone accuracy (ground truth, mean of its seeds)",
                      yaxis_title="supernet accuracy (held-out)")
    return fig


def _interval(label: str, e: Any) -> Interval | None:
    """``e`` as ``{"value", "low", "high"}`` of finite numbers: a mapping, or an ``Estimate`` (its ``to_dict``);
    None for one that is n/a (every bound None: a column that ties every architecture ranks nothing)."""
    d = e.to_dict() if hasattr(e, "to_dict") else e
    if isinstance(d, Mapping) and all(d.get(k, 0) is None for k in ("value", "low", "high")):
        return None
    if not isinstance(d, Mapping) or not all(isinstance(d.get(k), int | float) and math.isfinite(d[k])
                                             for k in ("value", "low", "high")):
        raise ValueError(f"{label!r}: expected an Estimate or a mapping of finite value, low and high, got {e!r}")
    return d


def tau_figure(taus: Mapping[str, Interval | Any], floors: Mapping[str, Interval | Any | None],
               title: str | None = None) -> go.Figure:
    """Kendall tau against the truth per run (a point and its 95% interval) over the noise-floor bands
    (each floor's interval, shaded). Each is an ``Estimate`` or its ``to_dict``; a floor may be None. An n/a
    estimate (a column that ties every architecture) draws no point but a note, an n/a floor no band."""
    for name, given in (("taus", taus), ("floors", floors)):
        if not isinstance(given, Mapping):
            raise ValueError(f"{name}: expected a mapping of label -> Estimate, got {type(given).__name__}")
    taus = {k: _interval(k, v) for k, v in taus.items()}
    floors = {k: None if v is None else _interval(k, v) for k, v in floors.items()}
    fig = go.Figure()
    colours = ("rgba(44,160,44,0.18)", "rgba(255,127,14,0.18)", "rgba(148,103,189,0.18)")
    for (label, e), colour in zip(floors.items(), colours, strict=False):
        if e is not None:
            fig.add_hrect(y0=e["low"], y1=e["high"], fillcolor=colour, line_width=0,
                          annotation_text=f"{label}: {e['value']:.2f}", annotation_position="top left")
    names = list(taus)
    drawn = {n: t for n, t in taus.items() if t is not None}
    fig.add_trace(go.Scatter(
        x=list(drawn), y=[t["value"] for t in drawn.values()], mode="markers", name="Kendall tau vs truth",
        marker={"size": 10},
        error_y={"type": "data", "symmetric": False, "array": [t["high"] - t["value"] for t in drawn.values()],
                 "arrayminus": [t["value"] - t["low"] for t in drawn.values()]}))
    for n in names:
        if taus[n] is None:  # (a run that scores every architecture the same: no tau to draw)
            fig.add_annotation(x=n, y=0, text="n/a: ranks nothing", showarrow=False)
    fig.update_xaxes(categoryorder="array", categoryarray=names)
    fig.update_layout(template=TEMPLATE, height=380, yaxis_title="Kendall tau", yaxis_range=[-0.1, 1.0],
                      title=title or "Kendall tau vs the truth (95% interval) over the noise floors")
    return fig


def length_curve_figure(data: Mapping[str, Any], title: str | None = None) -> go.Figure:
    """The length curve of ``benchmarks/trust_curve.py`` (its JSON, ``benchmarks/results/trust_curve*.json``): per
    sampler, Kendall tau against the truth (left) and supernet seed vs seed (right) against subnets trained, each
    with its 95% interval, over floor (a); a dotted line at each sampler's powered length."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "tau vs the truth (mean of seeds, 95%)", "supernet seed vs seed tau (mean of pairs, 95%)"))
    colours = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
    fa = data["floors"]["truth_seed_vs_seed"]
    if fa:
        for col in (1, 2):
            fig.add_hrect(y0=fa["low"], y1=fa["high"], fillcolor="rgba(44,160,44,0.12)", line_width=0, row=1,
                          col=col, annotation_text="(a) truth seed vs seed", annotation_position="top left")

    def bars(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
        es = [r[key] or {"value": None, "low": None, "high": None} for r in rows]
        return {"type": "data", "symmetric": False,
                "array": [(e["high"] - e["value"]) if e["high"] is not None else 0 for e in es],
                "arrayminus": [(e["value"] - e["low"]) if e["low"] is not None else 0 for e in es]}

    for k, (sampler, s) in enumerate(data["samplers"].items()):
        rows, colour = s["rows"], colours[k % len(colours)]
        x = [r["subnets"] for r in rows]
        for col, key in ((1, "kendall_tau"), (2, "supernet_seed_vs_seed")):
            fig.add_trace(go.Scatter(
                x=x, y=[(r[key] or {}).get("value") for r in rows], mode="lines+markers", name=sampler,
                legendgroup=sampler, showlegend=col == 1, line={"color": colour}, error_y=bars(rows, key)),
                row=1, col=col)
        if s["powered_length"]:
            fig.add_vline(x=s["powered_length"], line_dash="dot", line_color=colour, row=1, col=2)
    for col in (1, 2):
        fig.update_xaxes(type="log", title_text="subnets trained", tickvals=data["config"]["lengths"], row=1, col=col)
        fig.update_yaxes(title_text="Kendall tau", row=1, col=col)
    fig.update_layout(template=TEMPLATE, height=520, title=title or (
        f"The length curve on {data['config']['space']} (benchmarks/trust_curve.py); dotted: the powered length of "
        "each sampler"))
    return fig


__all__ = ["length_curve_figure", "rank_scatter", "tau_figure"]
