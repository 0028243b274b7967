"""A self-contained HTML report of one run directory that leads with the answer.

First the headline: the verdict against the sequential reference (``--reference`` or a ``reference/`` run
beside the run directory), subnets/s, utilisation against the schedule the policy makes of the same sequence
with the run's own task times (``naspipe.sim.twin.replayed_schedule``) and against the causal lower bound of
those times (so the bound is never above the schedule), and each stage's idle time split by cause
(``naspipe.viz.idle``). Then the Gantt chart, a
DAG excerpt of about a dozen subnets laid out in time, the hit rate when memory was budgeted, and the
configuration last, folded.

A run directory holds at least ``trace.json`` (``naspipe.sched.trace`` format); optional files it uses:
``metrics.json`` (any JSON object), ``space.json`` (a custom search space) and ``sequence.json`` (the subnet
sequence, ``naspipe.sequences.sequence.save_sequence`` format). The DAG, the simulation, the bound and the idle causes
need the space and the subnets: ``space.json`` or the trace's ``meta["space"]`` (a preset or a path), and
``sequence.json`` or a uniform stream rebuilt from ``meta["seed"]``; the report says so when it cannot.
plotly.js is inlined once (first figure), so the file opens offline.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from naspipe.errors import UserError
from naspipe.fileio import jsonfile
from naspipe.runfolder import runs
from naspipe.runfolder.results import ResultsError, verify
from naspipe.sched.trace import Trace, check_causal
from naspipe.sequences.sequence import ReplayStream
from naspipe.sim.bound import lower_bound
from naspipe.spaces.partition import Partition, partition
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import load_space, resolve_space
from naspipe.supernet.load import recorded_space
from naspipe.viz.dag import critical_path, dag_figure, dag_from_trace, time_layout, trace_durations
from naspipe.viz.gantt import DEFAULT_MAX_EVENTS, gantt
from naspipe.viz.hitrate import hit_stats, hitrate_figure
from naspipe.viz.idle import CAUSES, idle_breakdown

DAG_SUBNETS = 12
IDLE_HEADERS = {"causal": "idle: causal dependency", "message": "idle: message", "memory": "idle: memory stall",
                "other": "idle: other (policy, start-up, drain)"}


class ReportError(UserError):
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
    trace_file = p if p.is_file() else p / runs.TRACE
    if not trace_file.is_file():
        raise ReportError(f"{str(p)!r} holds no trace.json (write one with `naspipe simulate --trace` or a run)")
    try:
        trace = Trace.load(trace_file)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise ReportError(f"cannot read trace {str(trace_file)!r}: {e}") from None
    metrics: dict[str, Any] = {}
    mfile = trace_file.parent / runs.METRICS
    if mfile.is_file():
        try:
            data = jsonfile.loads(mfile.read_text())
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


@dataclass
class RunContext:
    """What the run's trace needs beside it to be analysed: space, partition, subnets, shared-layer policy."""
    space: Any
    part: Partition
    subnets: list[tuple[int, ...]]
    shared: Any


def run_context(run: Run) -> RunContext | str:
    """The run's space, partition and subnet sequence (as many subnets as the trace holds), or why not."""
    meta = run.trace.meta
    try:
        sfile = run.path / runs.SPACE
        space = load_space(sfile) if sfile.is_file() else resolve_space(recorded_space(run.path, str(meta["space"])))
        bounds = meta.get("partition")
        part = Partition(tuple(tuple(b) for b in bounds)) if bounds else partition(space, run.trace.stages)
        if part.stages != run.trace.stages:
            return f"the partition has {part.stages} stages, the trace {run.trace.stages}"
        qfile = run.path / runs.SEQUENCE
        n = run.trace.subnets()
        if qfile.is_file():
            stream = ReplayStream.from_file(space, qfile)
        elif "seed" in meta:  # a seeded sampler's sequence (uniform, fair, spread) follows from the seed
            from naspipe.sequences.samplers import RECORDED_BEFORE, make_stream, parse_sampler

            sampler = parse_sampler(str(meta.get("sampler") or RECORDED_BEFORE))  # (a trace naming none: uniform)
            stream = make_stream(space, int(meta["seed"]), n, "uniform" if sampler.online else sampler)
        else:
            return "no sequence.json and no seed in the trace metadata"
        subs = [stream[j] for j in range(min(n, len(stream)))]
        shared = parse_shared(str(meta.get("shared_layers", "frozen")))
    except KeyError:
        return "the trace metadata names no search space"
    except Exception as e:  # noqa: BLE001 - a report shows what it can
        return f"unavailable: {e}"
    return RunContext(space, part, subs, shared)


def dag_excerpt(run: Run, subnets: int = DAG_SUBNETS, ctx: RunContext | str | None = None,
                ) -> tuple[go.Figure | None, str]:
    """The DAG of the first ``subnets`` subnets laid out on the trace's time axis, or (None, why not)."""
    ctx = run_context(run) if ctx is None else ctx
    if isinstance(ctx, str):
        return None, ctx if ctx.startswith("the ") or ctx.startswith("no ") else f"DAG excerpt {ctx}"
    meta = run.trace.meta
    subs = ctx.subnets[:subnets]
    try:
        g = dag_from_trace(run.trace, ctx.space, ctx.part, subs, shared=ctx.shared)
    except Exception as e:  # noqa: BLE001
        return None, f"DAG excerpt unavailable: {e}"
    cp = critical_path(g)
    title = (f"causal DAG of the first {len(subs)} subnets, each task where the run started it: "
             f"critical path {cp.length:.4g} s, {len(cp.tasks)} tasks")
    note = ""
    if _follows_causal_rule(str(meta.get("policy", ""))):
        part, space = ctx.part, ctx.space
        blocks = [[b for b in part.blocks(s) if not space.blocks[b].fixed] for s in range(part.stages)]
        bad = check_causal(run.trace, subs, blocks, "W" if g.graph["split_backward"] else "B")
        if bad:
            note = (f"Warning: the trace breaks {len(bad)} causal edges of this DAG (first: {bad[0]}); the subnet "
                    "sequence used here is probably not the run's (add sequence.json to the run directory).")
    return dag_figure(g, title=title, pos=time_layout(g, run.trace), x_title="time (s)"), note


def find_reference(run: Run) -> Path | None:
    """A ``reference`` run directory beside the run (``naspipe demo``'s layout), if there is one."""
    cand = run.path.parent / "reference"
    return cand if cand.resolve() != run.path.resolve() and (cand / runs.PARAMS).is_file() else None


def headline(run: Run, reference: str | Path | None = None, ctx: RunContext | str | None = None) -> dict[str, Any]:
    """The answer a user came for, as data: verdict, subnets/s, utilisations, bound, idle time by cause."""
    tr = run.trace
    ctx = run_context(run) if ctx is None else ctx
    policy = str(tr.meta.get("policy", "?"))
    ref = Path(reference) if reference is not None else find_reference(run)
    h: dict[str, Any] = {"policy": policy, "stages": tr.stages, "subnets": tr.subnets(), "makespan_s": tr.makespan,
                         "reference": str(ref) if ref is not None else None}
    if ref is None:
        h["identical"], h["verdict"] = None, "no reference to compare with (naspipe report RUN --reference REF)"
    else:
        try:
            ok, msg = verify(run.path, ref)
            h["identical"], h["verdict"] = ok, msg
        except (ResultsError, OSError, ValueError) as e:
            h["identical"], h["verdict"] = None, f"cannot compare with {ref}: {e}"
    rate = run.metrics.get("subnets_per_s")
    h["subnets_per_s"] = float(rate) if isinstance(rate, (int, float)) else (
        tr.subnets() / tr.makespan if tr.makespan > 0 else 0.0)
    h["utilization"] = tr.utilization()
    busy = sum(tr.busy())
    h["simulated_utilization"] = h["bound_utilization"] = h["lower_bound_s"] = None
    graph = None
    if isinstance(ctx, RunContext):
        h["context"] = ""
        try:
            from naspipe.sim.twin import replayed_schedule  # the simulator, with this run's own task times

            if tr.meta.get("driver") != "sim":
                stream = ReplayStream(ctx.space, ctx.subnets)
                h["simulated_utilization"] = replayed_schedule(ctx.space, ctx.part, stream, tr, policy).utilization()
        except Exception as e:  # noqa: BLE001 - a policy the simulator does not take: no twin
            h["context"] = f"no simulated schedule: {e}"
        try:
            durs = trace_durations(tr)
            split = any(t.kind == "W" for t in durs)
            lb = lower_bound(ctx.space, ctx.part, ctx.subnets, lambda t: durs.get(t, 0.0), shared=ctx.shared,
                             split_backward=split, causal=_follows_causal_rule(policy)).lower_bound
            h["lower_bound_s"] = lb
            h["bound_utilization"] = busy / (tr.stages * lb) if lb > 0 else None
            graph = dag_from_trace(tr, ctx.space, ctx.part, ctx.subnets, shared=ctx.shared)
        except Exception as e:  # noqa: BLE001
            h["context"] = f"no lower bound: {e}"
    else:
        h["context"] = ctx
    h["idle"] = [{"stage": st.stage, "busy": st.busy / st.makespan if st.makespan > 0 else 0.0,
                  **{c: st.share(c) for c in CAUSES}} for st in idle_breakdown(tr, graph)]
    h["idle_attributed"] = graph is not None
    return h


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def headline_html(h: Mapping[str, Any]) -> str:
    """The headline block: verdict, numbers, and the idle table."""
    ok = h["identical"]
    cls, word = ("ok", "Identical to the reference") if ok else ("bad", "DIFFERS from the reference") if ok is False \
        else ("unknown", "Not verified")
    where = f" <code>{html.escape(h['reference'])}</code>" if h.get("reference") else ""
    verdict = str(h["verdict"]).removeprefix("identical: ")
    out = [f'<div class="headline"><p class="verdict {cls}">{word}{where}: {html.escape(verdict)}</p>',
           '<table class="numbers">',
           f"<tr><th>policy, stages, subnets</th><td>{html.escape(h['policy'])}, {h['stages']}, "
           f"{h['subnets']}</td></tr>",
           f"<tr><th>subnets/s</th><td><b>{h['subnets_per_s']:.4g}</b> (makespan {h['makespan_s']:.4g} s)</td></tr>",
           f"<tr><th>utilisation (busy / stages x makespan)</th><td><b>{_pct(h['utilization'])}</b></td></tr>",
           "<tr><th>simulated schedule of the same sequence and task times</th>"
           f"<td>{_pct(h['simulated_utilization'])}</td></tr>",
           f"<tr><th>at the lower bound (no schedule can beat it)</th><td>{_pct(h['bound_utilization'])}"
           + (f" (bound {h['lower_bound_s']:.4g} s)" if h["lower_bound_s"] else "") + "</td></tr>", "</table>"]
    if h.get("context"):
        out.append(f'<p class="note">{html.escape(str(h["context"]))}</p>')
    cols = ["busy", *CAUSES]
    head = "".join(f"<th>{html.escape('busy' if c == 'busy' else IDLE_HEADERS[c])}</th>" for c in cols)
    rows = "".join(f"<tr><th>stage {r['stage']}</th>" + "".join(f"<td>{_pct(r[c])}</td>" for c in cols) + "</tr>"
                   for r in h["idle"])
    out.append("<p>Where each stage's time went (share of the makespan). Idle time is split by what the stage "
               "waited for: an earlier subnet's write of a layer it uses (causal dependency), activations or "
               "gradients from a neighbour (message), a layer being copied in (memory stall), or nothing it could "
               "run (other: the policy's order, start-up, drain, overhead).</p>"
               f'<table class="idle"><tr><th></th>{head}</tr>{rows}</table>')
    if not h["idle_attributed"]:
        out.append('<p class="note">Without the space and sequence, idle time is not split by dependency.</p>')
    out.append("</div>")
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f5f8;font-weight:600}h2{margin-top:1.6em}.note{color:#666}
.headline{border:1px solid #ccd;border-radius:6px;padding:0.6em 1.2em;background:#fbfcfe}
.verdict{font-size:1.3em;font-weight:600}.verdict.ok{color:#1a7f37}.verdict.bad{color:#c62828}
.verdict.unknown{color:#8a6d00}details{margin:1.5em 0}summary{font-size:1.2em;font-weight:600;cursor:pointer}"""


def report_html(run: Run, *, extra: Mapping[str, Trace] | None = None, max_events: int | None = DEFAULT_MAX_EVENTS,
                dag_subnets: int = DAG_SUBNETS, reference: str | Path | None = None) -> str:
    """The report as one HTML string: headline, Gantt, DAG excerpt, hit rate, configuration (folded)."""
    ctx = run_context(run)
    traces: dict[str, Trace] = {"this run": run.trace, **(extra or {})}
    parts: list[tuple[str, go.Figure | None, str]] = [("Gantt chart", gantt(traces if len(traces) > 1 else run.trace,
                                                                            max_events=max_events), "")]
    if dag_subnets > 0:
        fig, why = dag_excerpt(run, dag_subnets, ctx)
        parts.append(("Causal dependency DAG (excerpt)", fig, why))
    if any(e.kind == "stall" for e in run.trace.events):
        parts.append(("Prediction hit rate and stalls", hitrate_figure(run.trace), ""))
    title = f"naspipe run report: {run.path.name or run.path}"
    body = [f"<h1>{html.escape(title)}</h1>", headline_html(headline(run, reference, ctx))]
    first = True
    for heading, fig, why in parts:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if why:
            body.append(f'<p class="note">{html.escape(why)}</p>')
        if fig is None:
            continue
        body.append(fig.to_html(full_html=False, include_plotlyjs=first, config={"responsive": True}))
        first = False
    body += ["<details><summary>Configuration and all metrics</summary>", "<h3>Run</h3>",
             _table(run.trace.meta or {"meta": "none"}), "<h3>Metrics from the trace</h3>",
             _table(trace_metrics(run.trace))]
    if run.metrics:
        body += ["<h3>metrics.json</h3>", _table(run.metrics)]
    body.append("</details>")
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(run_dir: str | Path, out: str | Path | None = None, *, extra: Mapping[str, str | Path] | None = None,
                 max_events: int | None = DEFAULT_MAX_EVENTS, dag_subnets: int = DAG_SUBNETS,
                 reference: str | Path | None = None) -> Path:
    """Write the report of ``run_dir`` to ``out`` (default ``RUN_DIR/report.html``) and return its path.

    ``extra``: other traces drawn in the Gantt under the run (e.g. ``{"simulated": "sim/trace.json"}``);
    ``reference``: the sequential reference to verify against (default: ``reference/`` beside the run).
    """
    if reference is not None and not (Path(reference) / runs.PARAMS).is_file():
        raise ReportError(f"reference {str(reference)!r} holds no params.json (make one with `naspipe reference`)")
    run = load_run(run_dir)
    others = {name: load_run(path).trace for name, path in (extra or {}).items()}
    target = Path(out) if out is not None else run.path / "report.html"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(report_html(run, extra=others, max_events=max_events, dag_subnets=dag_subnets,
                                       reference=reference))
    except OSError as e:
        raise ReportError(f"cannot write report {str(target)!r}: {e.strerror}") from None
    return target


def _follows_causal_rule(policy: str) -> bool:
    from naspipe.sched.policies import PolicyError, follows_causal_rule

    try:
        return follows_causal_rule(policy)
    except PolicyError:  # a run of a policy this version does not know: no check
        return False


def report_link(path: str | Path, text: str | None = None) -> str:
    """HTML for a notebook output: a link that opens the report in a new browser tab with its figures drawn.

    A relative link would open in JupyterLab's sandboxed HTML viewer, where the inlined plotly.js does not run
    until "Trust HTML" is clicked. Here the link starts as ``file://`` (which JupyterLab leaves alone) and a
    small script rewrites it to the Jupyter server's ``/files/`` URL when the report lies under the server's
    root (read from the page's ``jupyter-config-data``): the server sends it as a plain page whose scripts run.
    """
    p = Path(path).resolve()
    ident = "naspipe-report-" + hashlib.sha1(str(p).encode()).hexdigest()[:12]
    label = html.escape(text or f"open the report: {p.name}")
    js_path = json.dumps(p.as_posix()).replace("</", "<\\/")  # never closes the script element
    return (f'<a id="{ident}" href="{html.escape(p.as_uri())}" target="_blank" rel="noopener">{label}</a> '
            f'<span class="naspipe-report-path">({html.escape(str(p))})</span>'
            "<script>(() => {"
            f"const a = document.getElementById({json.dumps(ident)});"
            "const el = document.getElementById('jupyter-config-data'); if (!a || !el) return;"
            "const c = JSON.parse(el.textContent); const root = (c.serverRoot || '').replace(/\\/+$/, '');"
            f"const p = {js_path};"
            "if (root && p.startsWith(root + '/')) {"
            "a.href = (c.baseUrl || '/') + 'files/' + p.slice(root.length + 1).split('/').map(encodeURIComponent)"
            ".join('/'); }})();</script>")
