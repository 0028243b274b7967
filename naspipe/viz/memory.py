"""Context switching in pictures: simulated device budgets, swap modes and the paper's CSP-vs-BSP trend.

Why it exists: the notebook on context switching (and ``benchmarks/paper_trend.py``) need the same
sweeps; they live here so both stay thin. ``memory_sweep`` simulates one space under several budgets,
swap modes and pin modes and returns plain rows plus the traces (prefetch / evict / stall events included);
``memory_figure`` draws throughput against unlimited memory and the hit rate per configuration;
``trend_row`` measures CSP with predictive swapping against BSP with the whole supernet resident under one
fixed budget (the best of several micro-batch counts), the comparison behind the paper's 1.1x-6.8x.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from naspipe.partition import partition
from naspipe.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.sim.memory import MemoryBudgetError, MemoryConfig
from naspipe.space import preset
from naspipe.trace import Trace

SWAP_COLORS = {"predictive": "#4C78A8", "on-demand": "#E45756", "resident": "#9D9D9D"}


def memory_sweep(space: str = "naspipe-k96", stages: int = 4, budgets: Sequence[str] = ("25%", "10%"),
                 swaps: Sequence[str] = ("predictive", "on-demand"), pins: Sequence[str] = ("task",), *,
                 subnets: int = 300, seed: int = 0, policy: str = "csp",
                 bandwidth: float = 25e9) -> tuple[list[dict[str, Any]], dict[str, Trace]]:
    """Rows (one per budget x swap x pin, plus ``unlimited``) and their traces, keyed by the row's label."""
    sp = preset(space)
    part = partition(sp, stages)
    stream = UniformStream(sp, seed, subnets)
    base = simulate(sp, part, stream, policy)
    unlimited = subnets * sp.batch_size / base.makespan
    rows: list[dict[str, Any]] = [{"label": "unlimited", "budget": "-", "swap": "-", "pin": "-",
                                   "batch": sp.batch_size, "samples_per_s": unlimited, "retention": 1.0,
                                   "hit_rate": 1.0, "stall_share": 0.0, "memory_wait_share": 0.0}]
    traces = {"unlimited": base.trace}
    for budget in budgets:
        for swap in swaps:
            for pin in pins:
                cfg = MemoryConfig(device_memory=budget, swap=swap, pin=pin, bandwidth_h2d=bandwidth)
                r = simulate(sp, part, stream, policy, memory=cfg)
                m = r.memory
                assert m is not None
                s = m.summary()
                label = f"{swap} {budget}" + (f" pin={pin}" if len(pins) > 1 else "")
                rate = subnets * m.batch_size / r.makespan
                rows.append({"label": label, "budget": budget, "swap": swap, "pin": pin, "batch": m.batch_size,
                             "samples_per_s": rate, "retention": rate / unlimited, "hit_rate": s["hit_rate"],
                             "stall_share": s["stall_share"], "memory_wait_share": s["memory_wait_share"]})
                traces[label] = r.trace
    return rows, traces


def memory_figure(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> go.Figure:
    """Two panels per configuration: samples/s against unlimited memory, and the hit rate."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("throughput / unlimited memory", "hit rate (tasks with layers resident)"))
    labels = [r["label"] for r in rows]
    colors = [SWAP_COLORS.get(r["swap"], "#54A24B") for r in rows]
    for col, key in enumerate(("retention", "hit_rate"), start=1):
        fig.add_trace(go.Bar(x=labels, y=[r[key] for r in rows], marker={"color": colors}, showlegend=False,
                             text=[f"{r[key]:.3f}" for r in rows], textposition="outside",
                             hovertext=[f"batch {r['batch']}, stall {100 * r['stall_share']:.2f}%, waiting for "
                                        f"memory {100 * r['memory_wait_share']:.1f}%" for r in rows],
                             hovertemplate="%{x}: %{y:.3f}<br>%{hovertext}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(range=[0, 1.12], row=1, col=col)
    fig.add_hline(y=0.9, line={"dash": "dot", "color": "#333333"}, row=1, col=1)
    fig.update_layout(title={"text": title or "context switching: budgets and swap modes"}, height=420,
                      template="plotly_white", margin={"l": 60, "r": 20, "t": 80, "b": 110})
    return fig


def trend_row(k: int, stages: int, budget: str, subnets: int, seed: int = 0, bsp_groups: Sequence[int] = (4, 8, 16),
              bandwidth: float = 25e9) -> dict[str, Any]:
    """CSP (predictive swapping, the batch it can afford) against ``bsp:M`` (resident, the largest batch whose
    M in-flight activations fit next to the stage's whole share; best of ``bsp_groups``) on naspipe-kK.
    ``ratio`` is None when the baseline cannot run at all (the share does not fit the budget)."""
    space = preset(f"naspipe-k{k}")
    part = partition(space, stages)
    stream = UniformStream(space, seed, subnets)
    out: dict[str, Any] = {"k": k, "space": space.name, "bsp": {}}
    r = simulate(space, part, stream, "csp",
                 memory=MemoryConfig(device_memory=budget, swap="predictive", bandwidth_h2d=bandwidth))
    m = r.memory
    assert m is not None
    out["csp"] = {"batch_size": m.batch_size, "samples_per_second": subnets * m.batch_size / r.makespan,
                  "utilization": r.utilization, "hit_rate": m.hit_rate, "stall_share": m.stall_share}
    for g in bsp_groups:
        try:
            rb = simulate(space, part, stream, f"bsp:{g}",
                          memory=MemoryConfig(device_memory=budget, swap="resident", bandwidth_h2d=bandwidth))
        except MemoryBudgetError as e:
            out["bsp"][g] = {"fits": False, "why": str(e)}
            continue
        mb = rb.memory
        assert mb is not None
        out["bsp"][g] = {"fits": True, "batch_size": mb.batch_size, "utilization": rb.utilization,
                         "samples_per_second": subnets * mb.batch_size / rb.makespan}
    fits = {g: v for g, v in out["bsp"].items() if v["fits"]}
    if fits:
        best = max(fits, key=lambda g: fits[g]["samples_per_second"])
        out["bsp_best"] = {"micro_batches": best, **fits[best]}
        out["ratio"] = out["csp"]["samples_per_second"] / fits[best]["samples_per_second"]
    else:
        out["bsp_best"] = None
        out["ratio"] = None
    return out
