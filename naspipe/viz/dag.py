"""The causal dependency DAG of a subnet sequence (networkx), its critical path, and a fast plotly drawing.

Nodes are tasks ``F(j,s)``, ``B(j,s)`` and, with a split backward, ``W(j,s)`` (``naspipe.sched.Task``), with
attributes ``kind``, ``subnet``, ``stage``, ``duration``. Edges carry ``kind``:

* ``data``: ``F(j,s-1) -> F(j,s)``, ``F(j,P-1) -> B(j,P-1)``, ``B(j,s+1) -> B(j,s)``, ``B(j,s) -> W(j,s)``;
* ``causal`` (write -> read): the previous writer of a candidate ``j`` selects on stage ``s`` -> ``F(j,s)``,
  and for trained shared layers (``serial`` / ``delayed:D``) the writes ``F(j,s)`` must wait for.

Cross-stage data edges carry ``delay`` = the message time ``hop``. The same edges define
``naspipe.sim.bound.lower_bound``'s critical path: both take the causal edges from ``naspipe.sim.bound.causal_writers``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np
import plotly.graph_objects as go

from naspipe.sched.tasks import BACKWARD, FORWARD, WEIGHT, Task
from naspipe.sched.trace import Trace
from naspipe.sim.bound import causal_writers
from naspipe.spaces.partition import Partition
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, Subnet
from naspipe.viz.style import NAMES, color


def causal_dag(space: SearchSpace, part: Partition, subnets: Sequence[Subnet],
               duration: Callable[[Task], float] | None = None, *, shared: SharedLayers | None = None,
               split_backward: bool = False, hop: float = 0.0) -> nx.DiGraph:
    """The task graph of ``subnets`` on ``part``: data and causal edges, node durations (default 1)."""
    shared = shared or SharedLayers()
    dur = duration or (lambda t: 1.0)
    P = part.stages
    write = WEIGHT if split_backward else BACKWARD
    g = nx.DiGraph(stages=P, split_backward=split_backward, subnets=len(subnets), hop=hop, shared=str(shared))
    kinds = (FORWARD, BACKWARD, WEIGHT) if split_backward else (FORWARD, BACKWARD)
    for j in range(len(subnets)):
        for s in range(P):
            for k in kinds:
                t = Task(k, j, s)
                g.add_node(t, kind=k, subnet=j, stage=s, duration=float(dur(t)))
    for j, s, writers in causal_writers(space, part, subnets, shared):  # the edges bound.py uses too
        if s > 0:
            g.add_edge(Task(FORWARD, j, s - 1), Task(FORWARD, j, s), kind="data", delay=hop)
            g.add_edge(Task(BACKWARD, j, s), Task(BACKWARD, j, s - 1), kind="data", delay=hop)
        if split_backward:
            g.add_edge(Task(BACKWARD, j, s), Task(WEIGHT, j, s), kind="data", delay=0.0)
        for i in writers:
            g.add_edge(Task(write, i, s), Task(FORWARD, j, s), kind="causal", delay=0.0)
        if s == P - 1:
            g.add_edge(Task(FORWARD, j, P - 1), Task(BACKWARD, j, P - 1), kind="data", delay=0.0)
    return g


@dataclass(frozen=True)
class CriticalPath:
    length: float
    tasks: tuple[Task, ...]
    earliest_start: Mapping[Task, float]


def critical_path(g: nx.DiGraph) -> CriticalPath:
    """Longest path by node durations (plus edge ``delay``): the earliest finish of a schedule with ∞ stages."""
    start: dict[Task, float] = {}
    best_pred: dict[Task, Task | None] = {}
    finish: dict[Task, float] = {}
    for v in nx.topological_sort(g):
        t0, arg = 0.0, None
        for u, _, delay in g.in_edges(v, data="delay", default=0.0):
            f = finish[u] + delay
            if arg is None or f > t0:
                t0, arg = f, u
        start[v], best_pred[v] = t0, arg
        finish[v] = t0 + g.nodes[v]["duration"]
    if not finish:
        return CriticalPath(0.0, (), {})
    end = max(finish, key=finish.__getitem__)
    path = [end]
    while best_pred[path[-1]] is not None:
        path.append(best_pred[path[-1]])
    return CriticalPath(finish[end], tuple(reversed(path)), start)


def trace_durations(trace: Trace) -> dict[Task, float]:
    """Measured (or simulated) durations of the compute tasks of a trace (``Trace.task_durations``)."""
    return trace.task_durations()


def dag_from_trace(trace: Trace, space: SearchSpace, part: Partition, subnets: Sequence[Subnet], *,
                   shared: SharedLayers | None = None, max_subnets: int | None = None) -> nx.DiGraph:
    """The DAG of the subnets of a run, with the durations the trace recorded (W present = split backward)."""
    durs = trace_durations(trace)
    split = any(t.kind == WEIGHT for t in durs)
    subs = list(subnets[:max_subnets] if max_subnets is not None else subnets)
    return causal_dag(space, part, subs, lambda t: durs.get(t, 0.0), shared=shared, split_backward=split)


# ---- drawing --------------------------------------------------------------------------------------------
def lanes(stages: int, split_backward: bool) -> list[tuple[str, int]]:
    """Rows of the drawing, top to bottom: per stage its F, B (and W) rows, so causal edges stay in a band."""
    kinds = (FORWARD, BACKWARD, WEIGHT) if split_backward else (FORWARD, BACKWARD)
    return [(k, s) for s in range(stages) for k in kinds]


def layout(g: nx.DiGraph) -> dict[Task, tuple[float, float]]:
    """x = topological generation, y = lane (kind, stage); tasks sharing a cell are spread within it."""
    lane_of = {ln: i for i, ln in enumerate(lanes(g.graph.get("stages", 1), g.graph.get("split_backward", False)))}
    pos: dict[Task, tuple[float, float]] = {}
    for x, gen in enumerate(nx.topological_generations(g)):
        cells: dict[int, list[Task]] = {}
        for t in gen:
            cells.setdefault(lane_of.get((t.kind, t.stage), len(lane_of)), []).append(t)
        for y, ts in cells.items():
            ts.sort(key=lambda t: t.subnet)
            n = len(ts)
            for i, t in enumerate(ts):
                pos[t] = (float(x), y + (0.0 if n == 1 else 0.7 * (i / (n - 1) - 0.5)))
    return pos


def time_layout(g: nx.DiGraph, trace: Trace) -> dict[Task, tuple[float, float]]:
    """x = the task's start time in ``trace`` (seconds), y = its lane: the DAG laid out as the run went.

    Tasks the trace does not hold keep their topological layout's x scaled onto the trace's time span."""
    lane_of = {ln: i for i, ln in enumerate(lanes(g.graph.get("stages", 1), g.graph.get("split_backward", False)))}
    start = {Task(e.kind, e.subnet, e.stage): e.start for e in trace.compute_events()}
    topo = layout(g)
    span = max(start.values(), default=1.0) / max(1.0, max((x for x, _ in topo.values()), default=1.0))
    return {t: (start.get(t, topo[t][0] * span), float(lane_of.get((t.kind, t.stage), len(lane_of))))
            for t in g.nodes}


def _segments(pos: Mapping[Task, tuple[float, float]], edges: Sequence[tuple[Task, Task]]) -> tuple:
    n = len(edges)
    xs = np.full(3 * n, np.nan)
    ys = np.full(3 * n, np.nan)
    if n:
        a = np.array([pos[u] for u, _ in edges])
        b = np.array([pos[v] for _, v in edges])
        xs[0::3], ys[0::3], xs[1::3], ys[1::3] = a[:, 0], a[:, 1], b[:, 0], b[:, 1]
    return xs, ys


EDGE_STYLE = {"data": {"color": "#8a8a8a", "width": 1}, "causal": {"color": "#d62728", "width": 1, "dash": "dot"}}


def dag_figure(g: nx.DiGraph, title: str | None = None, highlight: bool = True,
               pos: Mapping[Task, tuple[float, float]] | None = None, x_title: str = "topological generation",
               ) -> go.Figure:
    """Draw the DAG: one scatter per edge kind (None-separated segments), one per task kind, critical path.

    ``pos``: node positions (default ``layout(g)``; ``time_layout`` draws it along a trace's time axis)."""
    pos = pos if pos is not None else layout(g)
    cp = critical_path(g) if highlight else None
    fig = go.Figure()
    for kind, style in EDGE_STYLE.items():
        edges = [(u, v) for u, v, k in g.edges(data="kind") if k == kind]
        xs, ys = _segments(pos, edges)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=style, hoverinfo="skip",
                                 name=f"{kind} edge ({len(edges)})", legendgroup="edges"))
    if cp is not None and len(cp.tasks) > 1:
        xs, ys = _segments(pos, list(zip(cp.tasks[:-1], cp.tasks[1:], strict=True)))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": "#FFB000", "width": 5},
                                 hoverinfo="skip", name=f"critical path ({cp.length:.4g})", opacity=0.8))
    on_path = set(cp.tasks) if cp is not None else set()
    for kind in (FORWARD, BACKWARD, WEIGHT):
        nodes = [t for t in g.nodes if t.kind == kind]
        if not nodes:
            continue
        xy = np.array([pos[t] for t in nodes])
        hover = [f"{t}<br>subnet {t.subnet}, stage {t.stage}<br>duration {g.nodes[t]['duration']:.4g}"
                 + (f"<br>earliest start {cp.earliest_start[t]:.4g}" if cp is not None else "")
                 + ("<br><b>on the critical path</b>" if t in on_path else "") for t in nodes]
        fig.add_trace(go.Scatter(
            x=xy[:, 0], y=xy[:, 1], mode="markers+text" if len(g) <= 300 else "markers",
            # the subnet number inside its node: above it, numbers crowded the critical path's line
            text=[str(t.subnet) for t in nodes], textposition="middle center",
            textfont={"size": 8, "color": "white"},
            marker={"color": color(kind), "size": 17 if len(g) <= 300 else 5,
                    "line": {"color": ["#FFB000" if t in on_path else "white" for t in nodes], "width": 2}},
            name=NAMES.get(kind, kind), hovertext=hover, hovertemplate="%{hovertext}<extra></extra>"))
    ln = lanes(g.graph.get("stages", 1), g.graph.get("split_backward", False))
    if title is None:
        title = (f"causal DAG: {g.graph.get('subnets', '?')} subnets, {g.number_of_nodes()} tasks, "
                 f"{g.number_of_edges()} edges" + (f"; critical path {cp.length:.4g}" if cp is not None else ""))
    fig.update_layout(
        title={"text": title}, template="plotly_white", hovermode="closest", height=160 + 45 * len(ln),
        xaxis={"title": {"text": x_title}, "zeroline": False},
        yaxis={"title": {"text": "task (kind, stage)"}, "tickmode": "array", "tickvals": list(range(len(ln))),
               "ticktext": [f"{k} stage {s}" for k, s in ln], "autorange": "reversed", "zeroline": False},
        margin={"l": 100, "r": 20, "t": 60, "b": 50},
    )
    return fig
