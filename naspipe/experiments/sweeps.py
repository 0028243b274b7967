"""Sweeps for notebooks and benchmarks: simulate policies, K, stage counts and memory budgets; return rows.

Why it exists: these functions run the simulator (often many times); ``naspipe.viz`` only draws their plain
rows (``table_figure``, ``scaling_figure``, ``memory_figure``). They used to live in ``naspipe.viz``.

* ``compare_policies`` / ``summary_rows``: policies side by side on one stream, against the CSP lower bound;
* ``compare_samplers``: one policy on the sequences of several samplers (uniform, fair, spread), with each
  sequence's conflict structure;
* ``scaling_sweep``: every (K, stages, policy) on one seeded sequence per (K, stages);
* ``memory_sweep`` / ``trend_row``: context switching under device budgets, and CSP with predictive swapping
  against a resident BSP under one budget (the comparison behind the paper's 1.1x-6.8x).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import follows_causal_rule
from naspipe.sched.tasks import BACKWARD, WEIGHT
from naspipe.sched.trace import Trace, check_causal
from naspipe.sequences.sequence import SubnetStream, UniformStream
from naspipe.sim import SimOptions, SimResult, simulate
from naspipe.sim.bound import result_bound
from naspipe.sim.memory import MemoryBudgetError, MemoryConfig
from naspipe.spaces.partition import Partition, partition
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, preset

DEFAULT_POLICIES = ("csp", "csp-bw", "bsp", "asp")


def compare_policies(space: SearchSpace, part: Partition, stream: SubnetStream,
                     policies: Sequence[str] = DEFAULT_POLICIES, *, window: int = 200,
                     shared: SharedLayers | None = None, jitter: float = 0.0, seed: int = 0,
                     options: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, SimResult]:
    """One simulation per policy on the same stream; ``options[policy]`` are its scheduler options."""
    options = options or {}
    return {p: simulate(RunSpec.of(space, part, stream, p, window=window, shared=shared, seed=seed),
                        SimOptions(jitter=jitter, policy_options=dict(options.get(p, {}))))
            for p in policies}


def compare_samplers(space: SearchSpace, part: Partition, seed: int, subnets: int,
                     samplers: Sequence[str] = ("uniform", "fair"), policy: str = "csp",
                     ) -> tuple[dict[str, SimResult], list[dict[str, Any]]]:
    """``policy`` simulated on each sampler's sequence (same seed and length): the results by sampler, and one
    row per sampler with makespan, utilisation, throughput and the sequence's conflicts within the stage count
    and reuse distances (``naspipe.sequences.conflicts``)."""
    from naspipe.sequences.conflicts import conflict_stats
    from naspipe.sequences.samplers import make_stream

    results, rows = {}, []
    for name in samplers:
        stream = make_stream(space, seed, subnets, name)
        r = results[name] = simulate(RunSpec.of(space, part, stream, policy))
        q = conflict_stats(space, list(stream), part.stages)
        rows.append({"sampler": name, "policy": policy, "makespan": r.makespan, "utilization": r.utilization,
                     "throughput": subnets / r.makespan if r.makespan else 0.0, "conflicts": q["conflicts"],
                     "min_reuse_distance": q["min_reuse_distance"], "mean_reuse_distance": q["mean_reuse_distance"]})
    return results, rows


def summary_rows(results: Mapping[str, SimResult], space: SearchSpace, part: Partition, stream: SubnetStream,
                 *, shared: SharedLayers | None = None, reference: str | None = "bsp") -> list[dict[str, Any]]:
    """One row per policy. ``efficiency`` = CSP lower bound (split for ``csp-bw``) / makespan, NaN for
    policies that ignore the causal rule (bsp, asp: the bound does not bind them); ``speedup`` = reference
    makespan / makespan (reference: ``bsp`` if present, else the first policy); ``causal_violations``: forwards
    that read a candidate before an earlier subnet's write of it (0 for CSP: the sequential semantics hold)."""
    subnets = [stream[j] for j in range(len(stream))]
    blocks = [[b for b in part.blocks(s) if not space.blocks[b].fixed] for s in range(part.stages)]
    ref = reference if reference in results else next(iter(results), None)
    rows = []
    for name, r in results.items():
        split = r.schedulers[0].write_kind == WEIGHT
        causal = follows_causal_rule(name)
        b = result_bound(r, space, part, subnets, shared)
        ms = r.makespan
        rows.append({
            "policy": name, "space": space.name, "stages": part.stages, "subnets": len(subnets),
            "makespan": ms, "utilization": r.utilization, "lower_bound": b.lower_bound,
            "critical_path": b.critical_path,
            "efficiency": (b.lower_bound / ms if ms else 0.0) if causal else float("nan"),
            "bound_utilization": sum(b.stage_work) / (part.stages * b.lower_bound) if b.lower_bound else 0.0,
            "speedup": (results[ref].makespan / ms) if ms and ref else 1.0, "speedup_vs": ref,
            "causal_violations": len(check_causal(r.trace, subnets, blocks, WEIGHT if split else BACKWARD)),
        })
    return rows


def scaling_sweep(ks: Sequence[int] = (12, 24, 48, 96), stages: Sequence[int] = (4, 8),
                  policies: Sequence[str] = ("csp", "csp-bw", "bsp"), *, subnets: int = 200,
                  space: str = "naspipe-k{k}", seed: int = 0, window: int = 200) -> list[dict[str, Any]]:
    """Rows of ``summary_rows`` for every (K, stages, policy), with ``k`` added; speed-up is against bsp."""
    rows = []
    for k in ks:
        sp = preset(space.format(k=k))
        for p in stages:
            part = partition(sp, p)
            stream = UniformStream(sp, seed, subnets)
            res = compare_policies(sp, part, stream, policies, window=window, seed=seed)
            for r in summary_rows(res, sp, part, stream, reference="bsp"):
                rows.append({"k": k, **r})
    return rows


def memory_sweep(space: str = "naspipe-k96", stages: int = 4, budgets: Sequence[str] = ("25%", "10%"),
                 swaps: Sequence[str] = ("predictive", "on-demand"), pins: Sequence[str] = ("task",), *,
                 subnets: int = 300, seed: int = 0, policy: str = "csp",
                 bandwidth: float = 25e9) -> tuple[list[dict[str, Any]], dict[str, Trace]]:
    """Rows (one per budget x swap x pin, plus ``unlimited``) and their traces, keyed by the row's label."""
    sp = preset(space)
    part = partition(sp, stages)
    stream = UniformStream(sp, seed, subnets)
    base = simulate(RunSpec.of(sp, part, stream, policy))
    unlimited = subnets * sp.batch_size / base.makespan
    rows: list[dict[str, Any]] = [{"label": "unlimited", "budget": "-", "swap": "-", "pin": "-",
                                   "batch": sp.batch_size, "samples_per_s": unlimited, "retention": 1.0,
                                   "hit_rate": 1.0, "stall_share": 0.0, "memory_wait_share": 0.0}]
    traces = {"unlimited": base.trace}
    for budget in budgets:
        for swap in swaps:
            for pin in pins:
                cfg = MemoryConfig(device_memory=budget, swap=swap, pin=pin, bandwidth_h2d=bandwidth)
                r = simulate(RunSpec.of(sp, part, stream, policy), SimOptions(memory=cfg))
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


def trend_row(k: int, stages: int, budget: str, subnets: int, seed: int = 0, bsp_groups: Sequence[int] = (4, 8, 16),
              bandwidth: float = 25e9) -> dict[str, Any]:
    """CSP (predictive swapping, the batch it can afford) against ``bsp:M`` (resident, the largest batch whose
    M in-flight activations fit next to the stage's whole share; best of ``bsp_groups``) on naspipe-kK.
    ``ratio`` is None when the baseline cannot run at all (the share does not fit the budget)."""
    space = preset(f"naspipe-k{k}")
    part = partition(space, stages)
    stream = UniformStream(space, seed, subnets)
    out: dict[str, Any] = {"k": k, "space": space.name, "bsp": {}}
    r = simulate(RunSpec.of(space, part, stream, "csp"),
                 SimOptions(memory=MemoryConfig(device_memory=budget, swap="predictive", bandwidth_h2d=bandwidth)))
    m = r.memory
    assert m is not None
    out["csp"] = {"batch_size": m.batch_size, "samples_per_second": subnets * m.batch_size / r.makespan,
                  "utilization": r.utilization, "hit_rate": m.hit_rate, "stall_share": m.stall_share}
    for g in bsp_groups:
        try:
            rb = simulate(RunSpec.of(space, part, stream, f"bsp:{g}"),
                          SimOptions(memory=MemoryConfig(device_memory=budget, swap="resident",
                                                         bandwidth_h2d=bandwidth)))
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


__all__ = ["DEFAULT_POLICIES", "compare_policies", "memory_sweep", "scaling_sweep", "summary_rows", "trend_row"]
