"""A self-contained HTML report of one run directory: Gantt, DAG excerpt, hit rate, metrics.

A run directory holds at least ``trace.json`` (``naspipe.trace`` format); optional files it uses:
``metrics.json`` (any JSON object, shown as a table), ``space.json`` (a custom search space) and
``sequence.json`` (the subnet sequence, ``naspipe.sequence.save_sequence`` format). The DAG excerpt needs
the space and the subnets: ``space.json`` or the trace's ``meta["space"]`` (a preset or a path), and
``sequence.json`` or a uniform stream rebuilt from ``meta["seed"]``; the report says so when it cannot.
plotly.js is inlined once (first figure), so the file opens offline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from naspipe.partition import Partition, partition
from naspipe.sequence import ReplayStream, UniformStream
from naspipe.shared import parse_shared
from naspipe.space import load_space, resolve_space
from naspipe.trace import Trace, check_causal
from naspipe.viz.dag import critical_path, dag_figure, dag_from_trace
from naspipe.viz.gantt import DEFAULT_MAX_EVENTS, gantt
from naspipe.viz.hitrate import hit_stats, hitrate_figure


class ReportError(ValueError):
    """The run directory or its trace is missing or unreadable (one clear line)."""


@dataclass
class Run:
    path: Path
    trace: Trace
    metrics: dict[str, Any] = field(default_factory=dict)


def load_run(run_dir: str | Path) -> Run:
    """Read ``RUN_DIR/trace.json`` (or a trace file given directly) and ``metrics.json`` if present."""
    p = Path(run_dir)
    if not p.exists():
        raise ReportError(f"run directory {str(p)!r} does not exist")
    trace_file = p if p.is_file() else p / "trace.json"
    if not trace_file.is_file():
        raise ReportError(f"{str(p)!r} holds no trace.json (write one with `naspipe simulate --trace` or a run)")
    try:
        trace = Trace.load(trace_file)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ReportError(f"cannot read trace {str(trace_file)!r}: {e}") from None
    metrics: dict[str, Any] = {}
    mfile = trace_file.parent / "metrics.json"
    if mfile.is_file():
        try:
            data = json.loads(mfile.read_text())
        except (OSError, ValueError) as e:
            raise ReportError(f"cannot read {str(mfile)!r}: {e}") from None
        metrics = data if isinstance(data, dict) else {"metrics": data}
    return Run(trace_file.parent, trace, metrics)


def trace_metrics(trace: Trace) -> dict[str, Any]:
    """What the trace itself says: makespan, utilisation (total and per stage), hit rate when it has stalls."""
    out: dict[str, Any] = {"stages": trace.stages, "events": len(trace.events), "subnets": trace.subnets(),
                           "makespan_s": trace.makespan, "utilization": trace.utilization(),
                           "stage_utilization": [round(u, 4) for u in trace.stage_utilization()]}
    if any(e.kind in ("stall", "prefetch") for e in trace.events):
        st = hit_stats(trace)
        out.update(hit_rate=st.hit_rate, misses=sum(st.misses), stall_s=sum(st.stall_seconds))
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return json.dumps(v) if len(v) <= 16 else json.dumps(list(v[:16]))[:-1] + ", ...]"
    return str(v)


def _table(d: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
                   for k, v in _flatten(d).items())
    return f"<table>{rows}</table>"


def dag_excerpt(run: Run, subnets: int = 40) -> tuple[go.Figure | None, str]:
    """The DAG of the first ``subnets`` subnets with the trace's durations, or (None, why not)."""
    meta = run.trace.meta
    try:
        sfile = run.path / "space.json"
        space = load_space(sfile) if sfile.is_file() else resolve_space(str(meta["space"]))
        bounds = meta.get("partition")
        part = Partition(tuple(tuple(b) for b in bounds)) if bounds else partition(space, run.trace.stages)
        if part.stages != run.trace.stages:
            return None, f"the partition has {part.stages} stages, the trace {run.trace.stages}"
        qfile = run.path / "sequence.json"
        n = min(subnets, run.trace.subnets())
        if qfile.is_file():
            stream = ReplayStream.from_file(space, qfile)
        elif "seed" in meta:
            stream = UniformStream(space, int(meta["seed"]), n)
        else:
            return None, "no sequence.json and no seed in the trace metadata"
        subs = [stream[j] for j in range(min(n, len(stream)))]
        g = dag_from_trace(run.trace, space, part, subs, shared=parse_shared(str(meta.get("shared_layers", "frozen"))))
    except KeyError:
        return None, "the trace metadata names no search space"
    except Exception as e:  # noqa: BLE001 - a report shows what it can
        return None, f"DAG excerpt unavailable: {e}"
    cp = critical_path(g)
    title = (f"causal DAG of the first {len(subs)} subnets (trace durations): critical path {cp.length:.4g} s, "
             f"{len(cp.tasks)} tasks")
    note = ""
    if _follows_causal_rule(str(meta.get("policy", ""))):
        blocks = [[b for b in part.blocks(s) if not space.blocks[b].fixed] for s in range(part.stages)]
        bad = check_causal(run.trace, subs, blocks, "W" if g.graph["split_backward"] else "B")
        if bad:
            note = (f"Warning: the trace breaks {len(bad)} causal edges of this DAG (first: {bad[0]}); the subnet "
                    "sequence used here is probably not the run's (add sequence.json to the run directory).")
    return dag_figure(g, title=title), note


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f5f8;font-weight:600}h2{margin-top:1.6em}.note{color:#666}"""


def report_html(run: Run, *, extra: Mapping[str, Trace] | None = None, max_events: int | None = DEFAULT_MAX_EVENTS,
                dag_subnets: int = 40) -> str:
    """The report as one HTML string."""
    traces: dict[str, Trace] = {"this run": run.trace, **(extra or {})}
    parts: list[tuple[str, go.Figure | None, str]] = [("Gantt chart", gantt(traces if len(traces) > 1 else run.trace,
                                                                            max_events=max_events), "")]
    if dag_subnets > 0:
        fig, why = dag_excerpt(run, dag_subnets)
        parts.append(("Causal dependency DAG (excerpt)", fig, why))
    if any(e.kind == "stall" for e in run.trace.events):
        parts.append(("Prediction hit rate and stalls", hitrate_figure(run.trace), ""))
    title = f"naspipe run report: {run.path.name or run.path}"
    body = [f"<h1>{html.escape(title)}</h1>", "<h2>Run</h2>", _table(run.trace.meta or {"meta": "none"}),
            "<h2>Metrics from the trace</h2>", _table(trace_metrics(run.trace))]
    if run.metrics:
        body += ["<h2>metrics.json</h2>", _table(run.metrics)]
    first = True
    for heading, fig, why in parts:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if why:
            body.append(f'<p class="note">{html.escape(why)}</p>')
        if fig is None:
            continue
        body.append(fig.to_html(full_html=False, include_plotlyjs=first, config={"responsive": True}))
        first = False
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(run_dir: str | Path, out: str | Path | None = None, *, extra: Mapping[str, str | Path] | None = None,
                 max_events: int | None = DEFAULT_MAX_EVENTS, dag_subnets: int = 40) -> Path:
    """Write the report of ``run_dir`` to ``out`` (default ``RUN_DIR/report.html``) and return its path.

    ``extra``: other traces drawn in the Gantt under the run (e.g. ``{"simulated": "sim/trace.json"}``).
    """
    run = load_run(run_dir)
    others = {name: load_run(path).trace for name, path in (extra or {}).items()}
    target = Path(out) if out is not None else run.path / "report.html"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(report_html(run, extra=others, max_events=max_events, dag_subnets=dag_subnets))
    except OSError as e:
        raise ReportError(f"cannot write report {str(target)!r}: {e.strerror}") from None
    return target


def _follows_causal_rule(policy: str) -> bool:
    from naspipe.sched.policies import PolicyError, follows_causal_rule

    try:
        return follows_causal_rule(policy)
    except PolicyError:  # a run of a policy this version does not know: no check
        return False
