"""A live monitor for a running job: Gantt, utilisation / hit-rate lines and a progress bar.

``LiveMonitor(stages, total_subnets)`` is shown in a notebook as an ipywidgets ``VBox`` holding two plotly
``FigureWidget`` s and an ``IntProgress``. ``update(events)`` appends trace events; ``follow(source)`` reads
them from a JSON-lines file (one ``TraceEvent.to_dict()`` per line, as the runtime writes
``RUN_DIR/events.jsonl``) or from a queue, blocking or in a background thread. Where widgets cannot be
built (no ipywidgets / anywidget, or ``widgets=False``) it falls back to a plain ``go.Figure`` shown through
an updatable display handle, or to nothing at all outside IPython: it never needs a display to run.

A subnet counts as done when its last write finished: ``B`` on stage 0, or ``W`` on every stage once the
trace holds ``W`` tasks. ``follow`` also ends on a line ``{"done": true}`` in the file, on ``None`` from a
queue, and when the runtime's ``status.json`` appears next to the events file (written when a run completes
or fails, no older than the events file); ``status`` then holds its content (``{"complete": true}`` or the
error and the rank).
"""

from __future__ import annotations

import dataclasses
import numbers
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from naspipe.fileio import jsonfile
from naspipe.inputs.wholes import whole
from naspipe.runfolder import runs
from naspipe.sched.trace import Trace, TraceEvent
from naspipe.viz.busy import announce_busy
from naspipe.viz.gantt import gantt, gantt_bars
from naspipe.viz.hitrate import hit_series
from naspipe.viz.style import KINDS
from naspipe.viz.timeline import utilization_series
from naspipe.viz.widget_views import sync_new_views, with_text

SYNC_EVERY_S = 2.0  # while a run goes on, how often a view drawn later is given the figures so far

Until = Any  # None, a callable returning True when done, a threading.Event, or a process / thread


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


_FIELDS = tuple(f.name for f in dataclasses.fields(TraceEvent))
_REQUIRED = {"stage", "kind", "subnet", "start", "end"}


def to_event(item: TraceEvent | dict[str, Any]) -> TraceEvent:
    """A TraceEvent from a TraceEvent or its ``to_dict()`` form (keys TraceEvent does not know are ignored)."""
    if isinstance(item, TraceEvent):
        return item
    return TraceEvent(**{k: item[k] for k in _FIELDS if k in item})


class LiveMonitor:
    """Live view of a pipeline job; see the module docstring. ``widgets=None`` = widgets inside a kernel."""

    def __init__(self, stages: int, total_subnets: int, *, title: str = "naspipe live monitor",
                 max_events: int = 3000, buckets: int = 40, refresh: float = 0.5, widgets: bool | None = None):
        whole("LiveMonitor's stages", stages, 1)  # (whole numbers: 2.5 was taken, "2" a TypeError)
        whole("LiveMonitor's total_subnets", total_subnets, 0)
        self.stages, self.total, self.title = stages, total_subnets, title
        self.max_events, self.buckets, self.refresh_every = max_events, buckets, refresh
        self.events: list[TraceEvent] = []
        self.skipped = 0  # events whose stage is not one of this monitor's (not drawn)
        self._lock = threading.RLock()
        self._b0: set[int] = set()
        self._w: dict[int, int] = {}
        self._seen_w = False
        self._memory = False
        self._last_refresh = 0.0
        self._last_sync = 0.0  # when the widgets' state for views drawn later was last brought up to date
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ended = False
        self._started: float | None = None  # when follow() began (the start-up message counts from it)
        self._shown = False
        self._handle: Any = None
        self.status: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.widget: Any = None
        if widgets or (widgets is None and _in_kernel()):
            try:
                self.widget = self._build_widgets()
            except Exception:  # noqa: BLE001 - any failure means: no widgets here, use the fallback
                self.widget = None

    # ---- state -------------------------------------------------------------------------------------------
    @property
    def done_subnets(self) -> int:
        with self._lock:
            if self._seen_w:
                return sum(1 for c in self._w.values() if c >= self.stages)
            return len(self._b0)

    @property
    def done(self) -> bool:
        return self._ended or (self.total > 0 and self.done_subnets >= self.total)

    def trace(self) -> Trace:
        with self._lock:
            return Trace(self.stages, list(self.events), {"driver": "live"})

    def update(self, events: Iterable[TraceEvent | dict[str, Any]], force: bool = False) -> int:
        """Append events (TraceEvents or their dicts); redraw at most every ``refresh`` seconds. Returns count."""
        n = 0
        with self._lock:
            for item in events:
                e = to_event(item)
                ours = isinstance(e.stage, numbers.Integral) and not isinstance(e.stage, bool)
                if not (ours and 0 <= e.stage < self.stages):
                    self.skipped += 1  # (another run's events, or a garbled line: its stage is not one of ours)
                    continue
                self.events.append(e)
                n += 1
                if e.kind == "B" and e.stage == 0:
                    self._b0.add(e.subnet)
                elif e.kind == "W":
                    self._seen_w = True
                    self._w[e.subnet] = self._w.get(e.subnet, 0) + 1
                elif e.kind in ("stall", "prefetch"):
                    self._memory = True
        if force or time.monotonic() - self._last_refresh >= self.refresh_every:
            self.refresh()
        return n

    # ---- drawing -----------------------------------------------------------------------------------------
    def _status(self) -> str:
        t = self.trace()
        if not t.events and not self._ended:
            since = f" ({time.monotonic() - self._started:.0f} s)" if self._started is not None else ""
            return (f"starting {self.stages} stage process{'es' if self.stages > 1 else ''}: building their "
                    f"layers and connecting{since}; the first tasks appear here when training begins")
        txt = f"{self.done_subnets}/{self.total} subnets, {len(t.events)} events"
        if t.events:
            txt += f", t = {max(e.end for e in t.events):.3f} s, utilisation {t.utilization():.3f}"
        if self.status is not None and not self.status.get("complete"):
            txt += f"; run failed: {self.status.get('error', 'unknown error')}"
        return txt

    def _build_widgets(self) -> Any:
        import ipywidgets as widgets

        # each figure is complete before it becomes a widget: a widget shown inside a box starts from the state
        # it was made with (a layout set afterwards travels only as a message, and a view made later can miss it)
        gantt_fig = go.Figure(gantt_bars([], kinds=list(KINDS)))
        gantt_fig.update_layout(
            title={"text": self.title}, barmode="overlay", template="plotly_white", height=120 + 45 * self.stages,
            xaxis={"title": {"text": "time (s)"}},
            yaxis={"title": {"text": "stage"}, "tickmode": "array", "tickvals": list(range(self.stages)),
                   "ticktext": [f"stage {s}" for s in range(self.stages)], "range": [self.stages - 0.5, -0.5]},
            margin={"l": 80, "r": 20, "t": 50, "b": 40})
        self._gantt = go.FigureWidget(gantt_fig)
        self._lines = go.FigureWidget(go.Figure([
            go.Scatter(x=[], y=[], mode="lines", name="utilisation (all stages)"),
            go.Scatter(x=[], y=[], mode="lines", name="prediction hit rate", line={"dash": "dot"}),
        ], layout={
            "title": {"text": "utilisation over time (all stages)"}, "template": "plotly_white",
            "height": 280, "yaxis": {"range": [0, 1.05], "title": {"text": "share"}},
            "xaxis": {"title": {"text": "time (s)"}}, "margin": {"l": 80, "r": 20, "t": 50, "b": 40}}))
        self._progress = widgets.IntProgress(value=0, min=0, max=max(self.total, 1), description="subnets",
                                             bar_style="info")
        self._label = widgets.HTML(value=self._status())
        box = widgets.VBox([widgets.HBox([self._progress, self._label]), self._gantt, self._lines])
        return with_text(box, f"{self.title} (naspipe LiveMonitor, widgets: drawn only while the kernel that ran this "
                              "cell is connected; LiveMonitor.figure() draws its Gantt as a plain figure)")

    def figure(self) -> go.Figure:
        """A static Gantt of everything received so far (the fallback view; also handy after the run)."""
        return gantt(self.trace(), title=f"{self.title}: {self._status()}", max_events=self.max_events)

    def refresh(self, *, final: bool = False) -> None:
        """Redraw now (widgets, or the fallback display handle); ``final``: nothing more is coming (the widgets'
        state for views drawn later is brought up to date at once, as it is when the run is done)."""
        self._last_refresh = time.monotonic()
        if self.widget is None:
            if self._handle is not None:
                self._handle.update(self.figure())
                self._last_refresh += max(0.0, 2.0 - self.refresh_every)  # a whole figure per redraw: less often
            return
        with self._lock:  # (one drawing at a time: a user's refresh beside a following thread's)
            self._draw(final)

    def _draw(self, final: bool) -> None:
        evs = self.events[-self.max_events:]
        trace = self.trace()
        bars = {b.legendgroup: b for b in gantt_bars(evs, kinds=list(KINDS))}
        end = max((e.end for e in trace.events), default=0.0)
        edges, util = utilization_series(trace.events, self.stages, self.buckets, end=end)
        x = (edges[:-1] + edges[1:]) / 2
        with self._gantt.batch_update():
            for tr in self._gantt.data:
                b = bars[tr.legendgroup]
                tr.base, tr.x, tr.y, tr.hovertext = b.base, b.x, b.y, b.hovertext
        with self._lines.batch_update():
            self._lines.data[0].x, self._lines.data[0].y = x, util.mean(axis=0)
            if self._memory:
                self._lines.data[1].x, self._lines.data[1].y = x, hit_series(trace, self.buckets).overall()
                self._lines.layout.title.text = "utilisation over time (all stages) and prediction hit rate"
        self._progress.value = min(self.done_subnets, self._progress.max)
        failed = self.status is not None and not self.status.get("complete")
        self._progress.bar_style = "danger" if failed else "success" if self.done else "info"
        self._label.value = self._status()
        if final or self.done or self._last_refresh - self._last_sync >= SYNC_EVERY_S:
            # a view drawn from now on (the figures' front-end module still loading when the messages above came,
            # a page reload) starts from these figures, not the empty ones (naspipe.viz.widget_views)
            self._last_sync = self._last_refresh
            sync_new_views(self._gantt)
            sync_new_views(self._lines)

    def display(self) -> None:
        """Show the monitor in the current notebook cell (widgets, or an updatable static figure)."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:
            return
        self._shown = True
        if self.widget is not None:
            display(self.widget)
        else:
            self._handle = display(self.figure(), display_id=True)

    def _ipython_display_(self) -> None:
        # a cell ending in ``monitor.follow(...)`` returns the monitor: once shown, do not draw it twice
        if not self._shown:
            self.display()

    # ---- following a running job -------------------------------------------------------------------------
    def follow(self, source: str | Path | Any, until: Until = None, *, block: bool = True, poll: float = 0.2,
               timeout: float | None = None) -> LiveMonitor:
        """Read events from ``source`` until the job is done.

        ``source``: a JSON-lines file (it may not exist yet), or a queue (``get(timeout=...)``) of events,
        dicts, lists of them, or ``None`` meaning done. ``until``: a callable returning True, a
        ``threading.Event``, or a process / thread (stops when it is no longer alive); by default all
        ``total_subnets`` done. ``block=False`` returns at once and follows in a background thread
        (``wait()`` joins it, ``stop()`` ends it).
        """
        self._stop.clear()
        self._started = time.monotonic()
        if block:
            try:
                self._follow(source, until, poll, timeout, busy=True)
            except KeyboardInterrupt:  # (the kernel interrupted: what came so far is drawn, for views drawn later too)
                self.refresh(final=True)
            return self
        self._thread = threading.Thread(target=self._follow_safe, args=(source, until, poll, timeout),
                                        name="naspipe-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Join the background thread; True when it has ended. Re-raises an error it hit."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        if self.error is not None:
            raise self.error
        return True

    def _follow_safe(self, *args: Any) -> None:
        try:
            self._follow(*args)
        except BaseException as e:  # noqa: BLE001 - reported through wait()
            self.error = e

    def _follow(self, source: Any, until: Until, poll: float, timeout: float | None, busy: bool = False) -> None:
        """The follow loop; ``busy``: the cell blocks on it, so JupyterLab keeps showing the kernel busy
        (``naspipe.viz.busy``)."""
        reader = _FileReader(Path(source)) if isinstance(source, (str, Path)) else _QueueReader(source, poll)
        stop_when = _stopper(until)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stop.is_set():
            if busy and self._shown:
                announce_busy()
            finished = stop_when()  # checked before draining, so the last events are never lost
            items, ended = reader.read()
            if items:
                self.update(items)
            if ended:
                self._ended = True
                if isinstance(reader, _FileReader) and reader.status is not None:
                    self.status = reader.status
            if ended or finished or self.done or (deadline is not None and time.monotonic() > deadline):
                break
            if not items and isinstance(reader, _FileReader):
                if not self.events and self.widget is not None:
                    self._label.value = self._status()  # say what is happening while the processes start
                self._stop.wait(poll)
        self.refresh(final=True)


def _stopper(until: Until) -> Callable[[], bool]:
    if until is None:
        return lambda: False
    if isinstance(until, threading.Event):
        return until.is_set
    if hasattr(until, "is_alive"):
        return lambda: not until.is_alive()
    if hasattr(until, "poll") and not callable(getattr(until, "get", None)):
        return lambda: until.poll() is not None  # subprocess.Popen
    if callable(until):
        return lambda: bool(until())
    raise TypeError("until must be None, a callable, a threading.Event or a process/thread")


class _FileReader:
    """Incremental reader of a JSON-lines file being appended to; a partial last line waits for its end."""

    def __init__(self, path: Path):
        self.path, self.pos, self.buf = path, 0, b""
        self.status: dict[str, Any] | None = None
        self.bad_lines = 0  # lines that are not JSON objects: skipped (a live view must not die on one)

    def _run_ended(self) -> bool:
        """The runtime wrote ``status.json`` beside the events file, after the events file's last write."""
        st = self.path.parent / runs.STATUS
        try:
            if st.stat().st_mtime < self.path.stat().st_mtime:
                return False
            data = jsonfile.loads(st.read_text())
        except (OSError, ValueError):
            return False
        self.status = data if isinstance(data, dict) else {"complete": bool(data)}
        return True

    def read(self) -> tuple[list[dict[str, Any]], bool]:
        ended = self._run_ended()  # checked first: every event written before status.json is read below
        try:
            with self.path.open("rb") as f:
                f.seek(self.pos)
                chunk = f.read()
                self.pos += len(chunk)
        except FileNotFoundError:
            return [], False
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for ln in lines:
            if not ln.strip():
                continue
            try:
                d = jsonfile.loads(ln)
            except ValueError:
                d = None
            if not isinstance(d, dict):
                self.bad_lines += 1
                continue
            if d.get("done") or d.get("event") == "done":
                ended = True
            elif _REQUIRED <= d.keys():
                out.append(d)
            else:
                self.bad_lines += 1
        return out, ended


class _QueueReader:
    def __init__(self, q: Any, poll: float):
        self.q, self.poll = q, poll

    def read(self) -> tuple[list[Any], bool]:
        import queue

        out: list[Any] = []
        try:
            item = self.q.get(timeout=self.poll)
            while True:
                if item is None:
                    return out, True
                out.extend(item if isinstance(item, (list, tuple)) else [item])
                item = self.q.get_nowait()
        except queue.Empty:
            return out, False
