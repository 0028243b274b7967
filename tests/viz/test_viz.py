"""naspipe.viz: figures from synthetic and simulated traces, the DAG against bound.py, monitor, report."""

from __future__ import annotations

import json
import queue
import threading
import time
import xml.etree.ElementTree as ET

import networkx as nx
import numpy as np
import plotly.graph_objects as go
import pytest

from naspipe import UniformStream, lower_bound, parse_shared, preset, simulate
from naspipe.cli import main as cli_main
from naspipe.experiments import compare_policies, scaling_sweep, summary_rows
from naspipe.runspec.spec import RunSpec
from naspipe.sched.tasks import B, F, Task, W
from naspipe.sched.trace import Trace, TraceEvent
from naspipe.sim import CostModel
from naspipe.spaces.partition import partition
from naspipe.spaces.space import unit_space
from naspipe.viz import (
    LiveMonitor,
    ReportError,
    causal_dag,
    critical_path,
    dag_figure,
    dag_from_trace,
    gantt,
    hit_series,
    hit_stats,
    hitrate_figure,
    scaling_figure,
    schedule_frames,
    schedule_player,
    sharing_figure,
    sharing_rows,
    table_figure,
    utilization_series,
    write_report,
)
from naspipe.viz.player import events_until
from naspipe.viz.svg import dag_svg, gantt_svg
from tests.helpers.fresh_command import run_fresh
from tests.helpers.waiting import wait_until


def synthetic_trace(subnets: int, stages: int = 4, split: bool = False, stalls: bool = False) -> Trace:
    """A pipelined trace by hand: F down, B (and W) up, one time unit each, optional memory events."""
    t = Trace(stages, meta={"driver": "synthetic", "policy": "hand"})
    free = [0.0] * stages
    for j in range(subnets):
        ready = 0.0
        for s in range(stages):
            if stalls and j % 3 == 0:
                t.add(s, "stall", j, max(free[s], ready), max(free[s], ready) + 0.25, bytes=1 << 20)
                free[s] = max(free[s], ready) + 0.25
            if stalls:
                t.add(s, "prefetch", j, max(0.0, ready - 1.0), max(0.0, ready - 1.0) + 0.5, bytes=2 << 20)
            start = max(free[s], ready)
            t.add(s, "F", j, start, start + 1.0)
            free[s] = ready = start + 1.0
        for s in reversed(range(stages)):
            start = max(free[s], ready)
            t.add(s, "B", j, start, start + 1.0, version=j)
            free[s] = ready = start + 1.0
            if split:
                t.add(s, "W", j, free[s], free[s] + 0.5)
                free[s] += 0.5
    return t


def sim(space: str = "naspipe-k48", stages: int = 4, n: int = 40, policy: str = "csp", seed: int = 0):
    sp = preset(space)
    part = partition(sp, stages)
    stream = UniformStream(sp, seed, n)
    return sp, part, stream, simulate(RunSpec.of(sp, part, stream, policy, seed=seed))


# ---- Gantt -------------------------------------------------------------------------------------------------
def test_gantt_rows_in_stage_order_legend_and_hover():
    tr = synthetic_trace(6, stages=4, split=True, stalls=True)
    fig = gantt(tr)
    assert isinstance(fig, go.Figure)
    assert list(fig.layout.yaxis.ticktext) == [f"stage {s}" for s in range(4)]
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2, 3]
    lo, hi = fig.layout.yaxis.range
    assert lo > hi  # reversed: stage 0 at the top
    assert fig.layout.yaxis.title.text == "stage"
    assert fig.layout.xaxis.title.text.startswith("time (")
    names = [b.name for b in fig.data]
    assert names == ["F forward", "B backward", "W weight grad + update", "prefetch", "evict", "stall (miss)"][:3] + [
        "prefetch", "stall (miss)"]
    assert len({b.marker.color for b in fig.data}) == len(fig.data)  # one distinct colour per kind
    assert all(b.orientation == "h" for b in fig.data)
    f_bar = fig.data[0]
    assert len(f_bar.x) == 6 * 4
    assert any("subnet 5" in h and "F(5,3)" in h for h in f_bar.hovertext)
    b_bar = fig.data[1]
    assert any("version 2" in h for h in b_bar.hovertext)
    stall = fig.data[-1]
    assert all("bytes 1,048,576" in h for h in stall.hovertext)
    # bars: base = start, x = duration, y = stage
    e = next(e for e in tr.events if e.kind == "F" and e.subnet == 2 and e.stage == 1)
    i = next(i for i, h in enumerate(f_bar.hovertext) if h.startswith("F(2,1)"))
    unit_factor = 1.0 if fig.layout.xaxis.title.text == "time (s)" else 1e3
    assert f_bar.base[i] == pytest.approx(e.start * unit_factor)
    assert f_bar.x[i] == pytest.approx(e.duration * unit_factor)
    assert f_bar.y[i] == 1


def test_gantt_several_traces_share_one_time_axis():
    _, _, _, csp = sim(n=20)
    _, _, _, bsp = sim(n=20, policy="bsp")
    fig = gantt({"simulated csp": csp.trace, "simulated bsp": bsp.trace})
    assert fig.layout.xaxis.matches == "x2" or fig.layout.xaxis2.matches == "x"
    assert [a.text for a in fig.layout.annotations] == ["simulated csp", "simulated bsp"]
    assert list(fig.layout.yaxis2.ticktext) == [f"stage {s}" for s in range(4)]
    shown = [b.name for b in fig.data if b.showlegend is not False]
    assert sorted(shown) == sorted(set(shown))  # each kind once in the legend
    assert fig.layout.xaxis2.title.text == "time (s)"  # runs of about 2 s: seconds, on the bottom axis only
    assert fig.layout.xaxis.title.text is None


def test_gantt_accepts_lists_and_rejects_garbage():
    tr = synthetic_trace(2, 2)
    assert len(gantt([tr, tr.shifted(1.0)]).layout.annotations) == 2
    assert len(gantt([("a", tr)]).data) == 2
    with pytest.raises(ValueError):
        gantt([])
    with pytest.raises(TypeError):
        gantt({"x": [1, 2]})
    with pytest.raises(ValueError):
        gantt(tr, unit="hours")


def test_gantt_max_events_draws_the_earliest():
    tr = synthetic_trace(30, 2)
    fig = gantt([("run", tr), ("again", tr)], max_events=10)
    assert sum(len(b.x) for b in fig.data) == 20
    assert "first 10 of 120 events" in fig.layout.annotations[0].text


def test_gantt_of_10000_events_is_fast():
    _, _, _, r = sim(n=1250)
    assert len(r.trace.events) == 10_000
    t0 = time.perf_counter()
    fig = gantt(r.trace, max_events=None)
    dt = time.perf_counter() - t0
    print(f"\nGantt of 10,000 events: {dt:.3f} s")
    assert sum(len(b.x) for b in fig.data) == 10_000
    assert dt < 30  # target 3 s; a generous 10x margin for slow machines


# ---- DAG -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("space,stages,n,split,shared,hop", [
    ("naspipe-k48", 4, 60, False, "frozen", 0.0),
    ("naspipe-k12", 4, 60, True, "frozen", 0.0),
    ("unit-k12", 4, 80, False, "frozen", 0.05),
    ("tiny-transformer", 2, 40, False, "delayed:3", 0.001),
    ("tiny-transformer", 3, 40, True, "serial", 0.0),
    ("digits-cnn", 2, 50, False, "delayed:0", 0.0),
])
def test_dag_critical_path_equals_bound(space, stages, n, split, shared, hop):
    sp = preset(space)
    part = partition(sp, stages)
    subs = list(UniformStream(sp, 3, n))
    cm = CostModel(sp, part, subs, split_backward=split, jitter=0.2, seed=5)
    sh = parse_shared(shared)
    g = causal_dag(sp, part, subs, cm.duration, shared=sh, split_backward=split, hop=hop)
    assert nx.is_directed_acyclic_graph(g)
    assert g.number_of_nodes() == n * stages * (3 if split else 2)
    cp = critical_path(g)
    b = lower_bound(sp, part, subs, cm.duration, shared=sh, split_backward=split, hop=hop)
    assert cp.length == pytest.approx(b.critical_path, rel=1e-12, abs=1e-12)
    # the path is a chain of edges and its durations (plus hops) add up to its length
    assert all(g.has_edge(u, v) for u, v in zip(cp.tasks, cp.tasks[1:], strict=False))
    total = sum(g.nodes[t]["duration"] for t in cp.tasks) + sum(
        g.edges[u, v]["delay"] for u, v in zip(cp.tasks, cp.tasks[1:], strict=False))
    assert total == pytest.approx(cp.length)


def test_dag_edges_literal():
    # 2 choice blocks, K=2, 2 stages (one block each); subnets: (0,0), (1,0), (0,1)
    sp = unit_space(2, choice_blocks=2)
    part = partition(sp, 2)
    g = causal_dag(sp, part, [(0, 0), (1, 0), (0, 1)], split_backward=True)
    data = {(str(u), str(v)) for u, v, k in g.edges(data="kind") if k == "data"}
    causal = {(str(u), str(v)) for u, v, k in g.edges(data="kind") if k == "causal"}
    assert ("F(0,0)", "F(0,1)") in data and ("F(0,1)", "B(0,1)") in data and ("B(0,1)", "B(0,0)") in data
    assert ("B(0,0)", "W(0,0)") in data
    # block 0 (stage 0): 0 and 2 share c0; block 1 (stage 1): 0 and 1 share c0. The write is W.
    assert causal == {("W(0,0)", "F(2,0)"), ("W(0,1)", "F(1,1)")}
    gens = list(nx.topological_generations(g))
    assert set(gens[0]) == {F(0, 0), F(1, 0)}


def test_dag_figure_highlights_the_critical_path_and_is_fast():
    sp = preset("naspipe-k48")
    part = partition(sp, 4)
    subs = list(UniformStream(sp, 0, 250))
    cm = CostModel(sp, part, subs)
    t0 = time.perf_counter()
    g = causal_dag(sp, part, subs, cm.duration)
    fig = dag_figure(g)
    dt = time.perf_counter() - t0
    print(f"\nDAG of {len(g)} tasks, {g.number_of_edges()} edges: build + draw {dt:.3f} s")
    assert len(g) == 2000
    assert dt < 20  # target 2 s, generous margin
    names = [t.name for t in fig.data]
    assert names[0].startswith("data edge") and names[1].startswith("causal edge")
    assert names[2].startswith("critical path")
    assert "F forward" in names and "B backward" in names
    assert len(fig.data) == 5  # edges (2), path, node kinds (2): no trace per node or edge
    cp = critical_path(g)
    path_trace = fig.data[2]
    assert np.count_nonzero(~np.isnan(np.asarray(path_trace.x, dtype=float))) == 2 * (len(cp.tasks) - 1)
    f_nodes = fig.data[3]
    assert any("F(0,0)" in h for h in f_nodes.hovertext)


def test_dag_from_trace_uses_trace_durations():
    sp, part, stream, r = sim(n=12, policy="csp-bw")
    g = dag_from_trace(r.trace, sp, part, list(stream), max_subnets=12)
    assert g.graph["split_backward"]
    assert any(t.kind == "W" for t in g)
    e = next(e for e in r.trace.events if e.kind == "W" and e.subnet == 3 and e.stage == 2)
    assert g.nodes[W(3, 2)]["duration"] == pytest.approx(e.duration)
    # a simulated CSP schedule never beats its own critical path
    assert critical_path(g).length <= r.makespan + 1e-12


# ---- hit rate -------------------------------------------------------------------------------------------------
def test_hit_stats_from_stall_events():
    tr = synthetic_trace(9, stages=2, stalls=True)
    st = hit_stats(tr)
    # subnets 0, 3, 6 stall before their F on both stages: 3 misses out of 18 compute tasks per stage
    assert st.tasks == (18, 18)
    assert st.misses == (3, 3)
    assert st.hit_rate == pytest.approx(1 - 6 / 36)
    assert st.stall_seconds == pytest.approx((0.75, 0.75))
    assert st.prefetches == (9, 9)
    hs = hit_series(tr, buckets=5)
    assert hs.hit_rate.shape == (2, 5) and hs.stall.shape == (2, 5)
    assert hs.tasks.sum() == 36
    assert hs.stall.sum() == pytest.approx(1.5)
    assert np.nanmin(hs.hit_rate) < 1.0
    overall = hs.overall()
    assert overall.shape == (5,)
    fig = hitrate_figure(tr, buckets=5)
    assert "hit rate 0.833" in fig.layout.title.text
    assert [d.name for d in fig.data if d.type == "scatter"] == ["stage 0", "stage 1"]


def test_stall_is_attributed_to_the_next_task_of_its_subnet():
    tr = Trace(1)
    tr.add(0, "F", 0, 0.0, 1.0)
    tr.add(0, "stall", 1, 1.0, 1.5)
    tr.add(0, "F", 1, 1.5, 2.5)
    tr.add(0, "B", 1, 3.0, 4.0)
    tr.add(0, "B", 0, 4.0, 5.0)
    st = hit_stats(tr)
    assert st.misses == (1,) and st.tasks == (4,)
    assert hit_stats(Trace(2)).hit_rate != hit_stats(Trace(2)).hit_rate  # NaN without tasks


def test_utilization_series_literal():
    ev = [TraceEvent(0, "F", 0, 0, 1), TraceEvent(1, "F", 0, 1, 2), TraceEvent(0, "B", 0, 2.5, 3),
          TraceEvent(0, "stall", 0, 0, 3)]
    edges, util = utilization_series(ev, 2, 6)
    assert list(edges) == [0, 0.5, 1, 1.5, 2, 2.5, 3]
    assert util.tolist() == [[1, 1, 0, 0, 0, 1], [0, 0, 1, 1, 0, 0]]


# ---- live monitor ------------------------------------------------------------------------------------------
def _write_events(path, events, chunks: int = 5, pause: float = 0.02):
    with open(path, "w") as f:
        for i, e in enumerate(events):
            line = json.dumps(e.to_dict()) + "\n"
            if i % 7 == 0:  # a line written in two pieces: the reader must wait for its end
                f.write(line[:9])
                f.flush()
                time.sleep(pause / 4)
                f.write(line[9:])
            else:
                f.write(line)
            f.flush()
            if i % max(len(events) // chunks, 1) == 0:
                time.sleep(pause)


@pytest.mark.parametrize("widgets", [True, False])
def test_monitor_follows_a_growing_events_file(tmp_path, widgets):
    _, _, _, r = sim(n=24, policy="csp-bw")
    events = sorted(r.trace.events, key=lambda e: e.end)
    path = tmp_path / "events.jsonl"
    mon = LiveMonitor(4, 24, widgets=widgets, refresh=0.05)
    assert (mon.widget is not None) == widgets
    writer = threading.Thread(target=_write_events, args=(path, events))
    writer.start()  # the file appears after follow() started polling
    mon.follow(path, timeout=30, poll=0.02)
    writer.join()
    assert mon.done and mon.done_subnets == 24
    assert len(mon.events) == len(events)
    assert mon.trace().utilization() == pytest.approx(r.trace.utilization())
    if widgets:
        assert mon._progress.value == 24
        assert sum(len(d.x) for d in mon._gantt.data) == len(events)
        assert "24/24 subnets" in mon._label.value
        assert len(mon._lines.data[0].y) == mon.buckets
    assert isinstance(mon.figure(), go.Figure)


def test_monitor_background_thread_queue_and_until(tmp_path):
    _, _, _, r = sim(n=10)
    q: queue.Queue = queue.Queue()
    mon = LiveMonitor(4, 10, widgets=True)
    assert mon.follow(q, block=False, poll=0.02) is mon
    for e in r.trace.events[:30]:
        q.put(e.to_dict())
    q.put(r.trace.events[30:])
    q.put(None)  # done
    assert mon.wait(10)
    assert len(mon.events) == len(r.trace.events) and mon.done
    # until: a threading.Event; the file never ends by itself
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e.to_dict()) for e in r.trace.events[:5]) + "\n")
    stop = threading.Event()
    mon2 = LiveMonitor(4, 10, widgets=False)
    mon2.follow(path, until=stop, block=False, poll=0.02)
    time.sleep(0.2)
    assert not mon2.wait(0.01)
    stop.set()
    assert mon2.wait(5) and len(mon2.events) == 5
    # a {"done": true} line ends following; garbage lines and unknown keys do not stop a live view
    with path.open("a") as f:
        f.write('not json\n[1, 2]\n{"kind": "F"}\n')
        f.write('{"stage": 0, "kind": "F", "subnet": 9, "start": 0, "end": 1, "rank": 0}\n{"done": true}\n')
    mon3 = LiveMonitor(4, 10, widgets=False)
    mon3.follow(path, timeout=5)
    assert mon3.done and len(mon3.events) == 6


def test_monitor_stops_when_the_runtime_writes_status(tmp_path):
    _, _, _, r = sim(n=10)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in r.trace.events[:12]))
    mon = LiveMonitor(4, 10, widgets=True)
    mon.follow(path, block=False, poll=0.02)
    time.sleep(0.1)
    assert not mon.wait(0.01)  # 10 subnets never finish: still following
    (tmp_path / "status.json").write_text(json.dumps({"complete": False, "error": "stage 2 died", "rank": 2}))
    assert mon.wait(5)
    assert mon.status == {"complete": False, "error": "stage 2 died", "rank": 2}
    assert len(mon.events) == 12 and "run failed: stage 2 died" in mon._label.value
    assert mon._progress.bar_style == "danger"


def test_monitor_is_headless_safe():
    mon = LiveMonitor(2, 3)  # no kernel here: the fallback, no widgets
    assert mon.widget is None
    mon.update([TraceEvent(0, "F", 0, 0.0, 1.0), {"stage": 1, "kind": "F", "subnet": 0, "start": 1.0, "end": 2.0}],
               force=True)
    mon.display()  # no IPython shell: shows nothing, raises nothing
    assert mon.done_subnets == 0 and len(mon.events) == 2
    with pytest.raises(TypeError):
        mon.follow([], until=42)
    with pytest.raises(ValueError):
        LiveMonitor(0, 1)
    for stages in (2.5, "2"):  # (2.5 was taken, "2" a TypeError)
        with pytest.raises(ValueError, match="LiveMonitor's stages must be a whole number >= 1"):
            LiveMonitor(stages, 1)
    mon.update([{"stage": 7, "kind": "F", "subnet": 1, "start": 2.0, "end": 3.0}], force=True)  # not one of its 2
    assert mon.skipped == 1 and len(mon.events) == 2 and isinstance(mon.figure(), go.Figure)  # (an IndexError)


# ---- player, sharing, comparison, sweep -----------------------------------------------------------------
def test_the_widgets_start_with_their_whole_layout():
    """A FigureWidget shown inside a box is drawn from the state it was made with; a layout set afterwards reaches
    the browser only as a message, which a view made later can miss (a monitor drawn without title or axes)."""
    mon = LiveMonitor(3, 10, widgets=True, title="live")
    gantt_layout = mon._gantt.get_state()["_widget_layout"]
    assert gantt_layout["title"]["text"] == "live" and gantt_layout["height"] == 120 + 45 * 3
    assert gantt_layout["yaxis"]["ticktext"] == ["stage 0", "stage 1", "stage 2"]
    lines_layout = mon._lines.get_state()["_widget_layout"]
    assert lines_layout["yaxis"]["range"] == [0, 1.05] and lines_layout["xaxis"]["title"]["text"] == "time (s)"
    box = schedule_player(synthetic_trace(3, 2), steps=10)
    player_layout = box.children[1].get_state()["_widget_layout"]
    assert player_layout["xaxis"]["range"][1] > 0 and player_layout["shapes"][0]["type"] == "line"


def _drawn_by_a_new_view(fig: go.FigureWidget) -> list[int]:
    """Bars per trace in the state a view drawn now starts from (the widget's synced ``_widget_data``)."""
    return [x["shape"][0] if isinstance(x := d.get("x", []), dict) else len(x) for d in fig.get_state()["_widget_data"]]


def test_a_view_drawn_later_starts_from_the_figures_so_far(tmp_path):
    """The browser's copy of a widget's state misses the change messages that come while plotly's front-end module
    loads: a monitor drawn after a short run on a busy machine showed empty figures (notebook 08). When following
    ends (done, failed or stopped), and every 2 s before, the monitor's state is its current figures; the player's
    is the step its slider is at."""
    _, _, _, r = sim(n=10)
    events = sorted(r.trace.events, key=lambda e: e.end)
    mon = LiveMonitor(4, 10, widgets=True, refresh=0)
    mon.update(events[:3], force=True)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in events[3:40]))
    stop = threading.Event()
    mon.follow(path, until=stop, block=False, poll=0.02)
    while len(mon.events) < 40:
        time.sleep(0.01)
    stop.set()  # stopped, not done: 10 subnets never finish here
    assert mon.wait(5) and not mon.done
    assert _drawn_by_a_new_view(mon._gantt) == [len(tr.x) for tr in mon._gantt.data] and sum(
        _drawn_by_a_new_view(mon._gantt)) == 40
    assert _drawn_by_a_new_view(mon._lines)[0] == mon.buckets
    box = schedule_player(synthetic_trace(3, 2), steps=10)
    slider, widget = box.children[0].children[1], box.children[1]
    slider.value = 4
    assert _drawn_by_a_new_view(widget) == [len(tr.x) for tr in widget.data] != [
        len(tr.x) for tr in schedule_player(synthetic_trace(3, 2), steps=10).children[1].data]


def test_the_widgets_read_as_a_line_where_widgets_do_not_draw():
    """A notebook opened executed or untrusted shows a widget output's text: it was the box's repr."""
    mon = LiveMonitor(2, 4, widgets=True, title="live")
    player = schedule_player(synthetic_trace(3, 2), steps=10, title="steps")
    for box, start in ((mon.widget, "live (naspipe LiveMonitor, widgets: "),
                       (player, "steps (naspipe schedule_player")):
        bundle = box._repr_mimebundle_(include=None, exclude=None)  # (as IPython's formatter calls it)
        assert bundle["text/plain"].startswith(start) and "VBox" not in bundle["text/plain"]
        assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == box.model_id


def test_schedule_player_and_frames():
    tr = synthetic_trace(3, 2)
    cut = events_until(tr, 2.5)
    assert all(e.start < 2.5 and e.end <= 2.5 for e in cut)
    assert len(cut) == sum(1 for e in tr.events if e.start < 2.5)
    fig = schedule_frames(tr, steps=10)
    assert len(fig.frames) == 11 and fig.layout.sliders
    box = schedule_player(tr, steps=10)
    play, slider, label = box.children[0].children
    widget = box.children[1]
    assert sum(len(d.x) for d in widget.data) == len(tr.events)
    slider.value = 0
    assert sum(sum(d.x) for d in widget.data) == 0  # nothing drawn: only zero-length legend placeholders
    assert all(len(d.x) == 1 for d in widget.data)  # every kind keeps its legend entry at step 0
    slider.value = 5
    assert 0 < sum(len(d.x) for d in widget.data) < len(tr.events)
    assert "tasks finished" in label.value
    assert widget.layout.xaxis.range[1] > 0 and widget.layout.yaxis.range is not None  # axes stay put


def test_gantt_legend_entries_ride_on_traces_that_have_bars():
    plain = synthetic_trace(3, 2)
    split = synthetic_trace(3, 2, split=True)
    fig = gantt({"csp": plain, "csp-bw": split})
    shown = {d.legendgroup for d in fig.data if d.showlegend and len(d.x)}
    assert shown == {"F", "B", "W"}  # W's entry is on the second panel's trace, not on the first's empty one


def test_sharing_rows_literal():
    sp = unit_space(3, choice_blocks=4)
    part = partition(sp, 2)
    subs = [(0, 1, 2, 0), (0, 2, 2, 1), (1, 1, 0, 1)]
    rows = sharing_rows(sp, part, subs)
    assert rows[0].previous == (None, None, None, None) and rows[0].waits_for == ((), ())
    assert rows[1].previous == (0, None, 0, None) and rows[1].waits_for == ((0,), (0,))
    assert rows[2].previous == (None, 0, None, 1) and rows[2].waits_for == ((0,), (1,))
    assert rows[1].choices == ("c0", "c2", "c2", "c1")
    fig = sharing_figure(sp, part, subs)
    assert "c2 ←0" in fig.data[0].text[1]
    assert any("s0: 0; s1: 0" == a.text for a in fig.layout.annotations)


def test_compare_policies_summary():
    sp = unit_space(3, choice_blocks=4, fwd=0.5, bwd=1.0)
    part = partition(sp, 2)
    stream = UniformStream(sp, 1, 12)
    res = compare_policies(sp, part, stream, ("csp", "csp-bw", "bsp", "asp", "csp-chain"))
    rows = {r["policy"]: r for r in summary_rows(res, sp, part, stream)}
    assert rows["bsp"]["speedup"] == 1.0
    assert rows["csp"]["causal_violations"] == 0 and rows["csp-bw"]["causal_violations"] == 0
    assert 0 < rows.pop("csp-chain")["efficiency"] <= 1 + 1e-9  # the CSP family, whatever the name
    assert rows["asp"]["causal_violations"] > 0
    assert 0 < rows["csp"]["efficiency"] <= 1 + 1e-9
    assert rows["asp"]["efficiency"] != rows["asp"]["efficiency"]  # NaN: the bound does not bind asp
    fig = table_figure(list(rows.values()), ["policy", "utilization", "efficiency"])
    assert list(fig.data[0].cells.values[0]) == ["csp", "csp-bw", "bsp", "asp"]
    assert fig.data[0].cells.values[2][3] == "-"


def test_scaling_sweep_reproduces_the_unit_model_trend():
    rows = scaling_sweep((12, 96), (4,), ("csp", "bsp"), subnets=150, space="unit-k{k}")
    util = {(r["k"], r["policy"]): r["utilization"] for r in rows}
    assert util[(12, "csp")] == pytest.approx(0.32, abs=0.05)
    assert util[(96, "csp")] > util[(12, "csp")] + 0.3
    fig = scaling_figure(rows, reference={12: 0.32, 96: 0.81})
    assert fig.data[-1].name.startswith("paper")


# ---- report and figures ------------------------------------------------------------------------------------
def _run_dir(tmp_path, policy="csp", n=30, seed=0, sampler="fair"):
    run = tmp_path / f"run-{policy}"
    run.mkdir()
    assert cli_main(["simulate", "--space", "naspipe-k48", "--subnets", str(n), "--policy", policy,
                     "--seed", str(seed), "--sampler", sampler, "--trace", str(run / "trace.json")]) == 0
    return run


def test_report_is_self_contained(tmp_path, capsys):
    run = _run_dir(tmp_path)
    (run / "metrics.json").write_text(json.dumps({"loss": 1.25, "throughput": {"subnets_per_s": 3.5}}))
    out = write_report(run)
    assert out == run / "report.html"
    text = out.read_text()
    assert "<script src" not in text.lower()  # plotly.js inlined, nothing fetched
    assert text.count("plotly.js v") <= 2  # the library once (its banner may name itself twice)
    assert text.count('class="plotly-graph-div"') == 2  # Gantt and DAG
    assert "subnets_per_s" in text and "1.25" in text
    assert "causal DAG of the first 12 subnets" in text  # a readable excerpt by default
    assert "Warning: the trace breaks" not in text  # the DAG's sequence matches the trace
    # the answer first, the configuration last and folded
    assert text.index('class="headline"') < text.index("Gantt chart") < text.index("<details>")
    assert text.index("<details>") < text.index("subnets_per_s")
    assert "Not verified" in text and "idle: causal dependency" in text
    # the CLI
    assert cli_main(["report", str(run), "--out", str(tmp_path / "r.html"), "--dag-subnets", "5"]) == 0
    assert (tmp_path / "r.html").is_file()
    assert capsys.readouterr().out.strip().endswith("r.html")


def test_report_needs_no_torch(tmp_path):
    """A report reads a run's files and draws them: ``naspipe report`` takes under a second, not the seconds of a
    torch import."""
    run = _run_dir(tmp_path)
    r = run_fresh(["report", str(run)], tmp_path)
    assert (run / "report.html").is_file() and r.code == 0 and not r.imported_torch, r.stderr[-2000:]


def test_report_warns_when_the_sequence_does_not_match(tmp_path):
    run = _run_dir(tmp_path, n=60, sampler="uniform")  # (many shared candidates: another seed breaks the order)
    data = json.loads((run / "trace.json").read_text())
    data["meta"]["seed"] = 12345  # rebuilt stream differs from the run's
    (run / "trace.json").write_text(json.dumps(data))
    assert "Warning: the trace breaks" in write_report(run).read_text()


def test_report_rebuilds_a_fair_sequence_from_the_seed_and_the_sampler(tmp_path):
    run = tmp_path / "fair"
    run.mkdir()
    assert cli_main(["simulate", "--space", "naspipe-k48", "--subnets", "60", "--sampler", "fair",
                     "--trace", str(run / "trace.json")]) == 0
    assert json.loads((run / "trace.json").read_text())["meta"]["sampler"] == "fair"
    assert "Warning: the trace breaks" not in write_report(run).read_text()


def test_sampler_figure_shows_a_uniform_and_a_fair_schedule(tmp_path):
    from naspipe.experiments.figures import sampler_figures

    paths = sampler_figures(tmp_path, space="naspipe-k12", stages=4, subnets=12)
    svg = (tmp_path / "gantt_samplers.svg").read_text()
    assert tmp_path / "gantt_samplers.html" in paths and "a uniform and a fair sequence" in svg
    assert "uniform sequence: utilisation" in svg and "fair sequence: utilisation" in svg


def test_report_with_a_second_trace_and_stalls(tmp_path):
    run = tmp_path / "measured"
    run.mkdir()
    tr = synthetic_trace(8, 2, stalls=True)
    tr.save(run / "trace.json")
    other = _run_dir(tmp_path)
    out = write_report(run, tmp_path / "x" / "report.html", extra={"simulated": other / "trace.json"})
    text = out.read_text()
    assert "Prediction hit rate" in text
    assert "the trace metadata names no search space" in text


def test_report_errors_are_usage_errors(tmp_path, capsys):
    with pytest.raises(ReportError):
        write_report(tmp_path / "missing")
    assert cli_main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path)]) == 2
    assert "no trace.json" in capsys.readouterr().err
    (tmp_path / "trace.json").write_text("{}")
    assert cli_main(["report", str(tmp_path)]) == 2
    assert "cannot read trace" in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path), "--compare", "nonsense"]) == 2


def test_figures_export(tmp_path):
    from naspipe.experiments.figures import main

    assert main([str(tmp_path)]) == 0
    for stem in ("gantt_csp", "gantt_csp_bw", "dag"):
        ET.fromstring((tmp_path / f"{stem}.svg").read_text())  # well-formed SVG
        assert (tmp_path / f"{stem}.html").stat().st_size > 1000
    assert main([]) == 2


def test_svg_writers():
    tr = synthetic_trace(4, 2, split=True, stalls=True)
    root = ET.fromstring(gantt_svg(tr, "t"))
    rects = [el for el in root.iter() if el.tag.endswith("rect")]
    assert len(rects) >= len(tr.events)
    g = causal_dag(unit_space(2, 2), partition(unit_space(2, 2), 2), [(0, 0), (0, 1)])
    root = ET.fromstring(dag_svg(g, "d"))
    assert sum(el.tag.endswith("circle") for el in root.iter()) == len(g)
    assert Task("B", 0, 0) in g and B(1, 0) in g


def test_monitor_says_what_happens_while_the_stage_processes_start(tmp_path):
    path = tmp_path / "events.jsonl"  # not written yet: the stage processes are still starting
    mon = LiveMonitor(2, 3, widgets=True)
    mon.follow(path, block=False, poll=0.02)
    time.sleep(0.15)
    assert "starting 2 stage processes" in mon._label.value
    path.write_text(json.dumps(TraceEvent(0, "F", 0, 0.0, 1.0).to_dict()) + "\n")
    wait_until(lambda: mon.events, 30, every_s=0.02)  # (not a fixed sleep: a stop before the next read ends it unread)
    mon.stop()
    assert mon.wait(5)
    assert "0/3 subnets, 1 events" in mon._label.value


def test_table_figures_are_tall_enough_for_every_row():
    short = table_figure([{"a": 1, "b": 2.0}] * 9)
    long = table_figure([{"label": "predictive 10% pin task " * 6, "other": "on-demand 25% " * 8}] * 9, title="t")
    assert short.layout.height == 10 + 30 + 9 * 20 + 10  # nine one-line rows, the header: no blank space
    assert long.layout.height >= 60 + 30 + 9 * (20 + 2 * 26)  # wrapped cells: three lines a row at 800 px
    # a column is as wide as its text: a long label does not wrap beside short numbers
    assert table_figure([{"run": "reference (conflict-dense)", "x": 1.0}] * 3).layout.height == 10 + 30 + 60 + 10


def test_scaling_legend_has_room_for_every_entry():
    rows = [{"k": k, "stages": p, "policy": pol, "space": f"unit-k{k}", "subnets": 10, "utilization": 0.5,
             "efficiency": 0.9, "speedup": 1.0}
            for k in (12, 24) for p in (4, 8) for pol in ("csp", "csp-bw", "bsp", "asp")]
    fig = scaling_figure(rows, reference={12: 0.32, 24: 0.42})
    entries = sum(1 for t in fig.data if t.showlegend is not False)
    assert entries == 9 and fig.layout.height >= 240 + 32 * entries


def test_memory_figure_names_its_colours_and_draws_no_line_over_its_labels():
    from naspipe.viz import memory_figure

    rows = [{"label": f"{swap} {b} pin task", "swap": swap, "retention": v, "hit_rate": v, "batch": 8,
             "stall_share": 0.0, "memory_wait_share": 0.0}
            for swap, v in (("predictive", 0.841), ("on-demand", 0.5)) for b in ("25%", "10%")]
    rows.insert(0, {**rows[0], "label": "unlimited", "swap": "-"})  # the baseline row of memory_sweep
    fig = memory_figure(rows)
    assert not fig.layout.shapes  # the unexplained dotted line at 0.9 struck through a 0.841 label
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend == ["unlimited memory (no swapping)", "predictive swapping", "on-demand swapping"]  # per colour
    assert sorted(x for t in fig.data[:3] for x in t.x) == sorted(r["label"] for r in rows)  # each bar once a panel


def test_dag_numbers_sit_inside_their_nodes_and_gantt_labels_fit_one_unit_bars():
    from naspipe.viz import gantt
    from naspipe.viz.gantt import LABEL_PX

    space = unit_space(3, choice_blocks=4, fwd=0.5, bwd=1.0)
    part = partition(space, 2)
    subs = list(UniformStream(space, 1, 12))
    nodes = [t for t in dag_figure(causal_dag(space, part, subs, CostModel(space, part, subs).duration)).data
             if t.mode == "markers+text"]
    assert nodes and all(t.textposition == "middle center" for t in nodes)  # not above, over the critical path
    # csp-bw's B and W of one time unit at 12 subnets: every id, two-digit ones too, at LABEL_PX (plotly's own
    # fitting hid 10 and 11 there; tests/viz/test_gantt_labels.py looks at the drawing in chromium)
    fig = gantt(simulate(RunSpec.of(space, part, UniformStream(space, 1, 12), "csp-bw")).trace, unit="units")
    assert all(bar.textfont.size == LABEL_PX >= 8 and all(bar.text) for bar in fig.data)
