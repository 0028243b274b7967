"""Figures of traces and schedules (plotly, networkx, ipywidgets); they read traces and plain data only.

* ``gantt``: Gantt chart of one or several traces (simulated and measured side by side);
* ``causal_dag`` / ``dag_figure`` / ``critical_path``: the causal dependency DAG and its critical path;
* ``hitrate_figure`` / ``hit_stats``: prediction hit rate and stall time per stage over time;
* ``LiveMonitor``: a live widget following a running job's ``events.jsonl``;
* ``write_report``: a self-contained HTML report of a run directory;
* ``memory_figure``, ``scaling_figure``, ``table_figure``: rows of the sweeps in ``naspipe.experiments``;
* ``sharing_figure``, ``schedule_player``: the notebooks' pieces.

Nothing here runs training or a sweep (``naspipe.experiments`` does; import-linter checks that viz imports
neither it nor the runtime).
"""

from naspipe.viz.budgets import memory_figure
from naspipe.viz.dag import CriticalPath, causal_dag, critical_path, dag_figure, dag_from_trace, trace_durations
from naspipe.viz.gantt import gantt, gantt_bars
from naspipe.viz.hitrate import HitSeries, HitStats, hit_series, hit_stats, hitrate_figure
from naspipe.viz.monitor import LiveMonitor
from naspipe.viz.player import schedule_frames, schedule_player
from naspipe.viz.report import ReportError, load_run, write_report
from naspipe.viz.scaling import PAPER_UNIT_UTILIZATION, scaling_figure
from naspipe.viz.sharing import sharing_figure, sharing_rows
from naspipe.viz.table import table_figure
from naspipe.viz.timeline import utilization_series

__all__ = [
    "CriticalPath", "HitSeries", "HitStats", "LiveMonitor", "PAPER_UNIT_UTILIZATION", "ReportError", "causal_dag",
    "critical_path", "dag_figure", "dag_from_trace", "gantt", "gantt_bars", "hit_series",
    "hit_stats", "hitrate_figure", "load_run", "memory_figure", "scaling_figure",
    "schedule_frames", "schedule_player", "sharing_figure", "sharing_rows", "table_figure",
    "trace_durations", "utilization_series", "write_report",
]
