"""Context switching in the simulator: hit rate, stalls and throughput of CSP under a device budget.

Why it exists: the issue's acceptance numbers for the memory model, measured side by side in one run.

1. ``naspipe-k48`` / ``naspipe-k96`` on 4 and 8 stages, 1,000 subnets, budget 25% of each stage's
   supernet share: predictive swapping (NASPipe) and on-demand swapping (vPipe-style) beside it, each
   at the batch it can afford; target: predictive hit rate >= 98%, stall time < 2% of the makespan.
2. ``naspipe-k96`` on 4 stages at 10%: CSP's throughput against its unlimited-memory throughput (batch
   32, no memory model); target >= 90%; the default configuration also on three more seeds. Candidates
   are pinned only while a task uses them (``pin="task"``, the default); beside it ``pin="subnet"``
   (pinned from a subnet's forward to its update), no prefetch headroom, fixed batches (the trade-off
   behind the automatic choice) and 12.5%, 15% and 20%.
3. The in-flight curve behind ``naspipe.sim.memory.CSP_SLOTS``: CSP with at most n subnets' activations
   per stage (parameters free), against CSP unlimited.

Run: ``python benchmarks/memory.py [--subnets 1000] [--bandwidth 25e9] [--quick]``. Prints JSON and a
markdown table; writes ``benchmarks/results/memory.json`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from _common import write_result

from naspipe import preset
from naspipe.runspec.spec import RunSpec
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.sim.memory import Footprint, MemoryConfig
from naspipe.spaces.partition import partition
from naspipe.spaces.space import SearchSpace

_UNLIMITED: dict[tuple[str, int, int, int], dict[str, Any]] = {}


def unlimited(space: SearchSpace, stages: int, n: int, seed: int) -> dict[str, Any]:
    """CSP without a memory model (batch 32), simulated once per (space, stages, subnets, seed)."""
    key = (space.name, stages, n, seed)
    if key not in _UNLIMITED:
        _UNLIMITED[key] = _unlimited(space, stages, n, seed)
    return _UNLIMITED[key]


def _unlimited(space: SearchSpace, stages: int, n: int, seed: int) -> dict[str, Any]:
    part = partition(space, stages)
    r = simulate(RunSpec.of(space, part, UniformStream(space, seed, n), "csp"))
    return {"makespan": r.makespan, "samples_per_second": n * space.batch_size / r.makespan,
            "utilization": r.utilization}


def swapped(space: SearchSpace, stages: int, n: int, seed: int, cfg: MemoryConfig) -> dict[str, Any]:
    part = partition(space, stages)
    t0 = time.perf_counter()
    r = simulate(RunSpec.of(space, part, UniformStream(space, seed, n), "csp"), SimOptions(memory=cfg))
    m = r.memory
    assert m is not None
    s = m.summary()
    budgets = [b for b in m.budgets if b is not None]
    return {
        "swap": cfg.swap, "batch_size": m.batch_size, "makespan": r.makespan,
        "samples_per_second": n * m.batch_size / r.makespan, "utilization": r.utilization,
        "hit_rate": s["hit_rate"], "forward_hit_rate": s["forward_hit_rate"], "stall_share": s["stall_share"],
        "memory_wait_share": s["memory_wait_share"], "bytes_moved": s["bytes_moved"],
        "bytes_prefetched_unused": s["bytes_prefetched_unused"],
        "peak_over_budget": max(p / b for p, b in zip(s["peak_device_bytes"], budgets, strict=False)) if budgets
        else None,
        "predictor_accuracy": s["predictor_accuracy"], "budget_bytes": list(m.budgets),
        "sim_seconds": time.perf_counter() - t0,
    }


def in_flight_curve(space: SearchSpace, stages: int, n: int, seed: int, caps: list[int]) -> list[dict[str, Any]]:
    """CSP whose stages hold at most ``cap`` subnets' activations (parameters cost nothing here)."""
    free = dataclasses.replace(space, blocks=tuple(
        dataclasses.replace(b, candidates=tuple(dataclasses.replace(c, param_bytes=0) for c in b.candidates))
        for b in space.blocks))
    part = partition(free, stages)
    fp = Footprint(free, part, free.batch_size)
    base = unlimited(space, stages, n, seed)["samples_per_second"]
    out = []
    for cap in caps:
        budgets = [cap * fp.act_per_sample(s) * free.batch_size for s in range(stages)]
        r = simulate(RunSpec.of(free, part, UniformStream(free, seed, n), "csp"),
                     SimOptions(memory=MemoryConfig(device_memory=budgets, swap="resident",
                                                    batch_size=free.batch_size)))
        out.append({"in_flight": cap, "retention": n * free.batch_size / r.makespan / base})
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subnets", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bandwidth", type=float, default=25e9,
                    help="host<->device bytes/s per stage (default 25e9: PCIe 4.0 x16)")
    ap.add_argument("--depth", type=int, default=4, help="prefetch depth (forecast tasks)")
    ap.add_argument("--quick", action="store_true", help="200 subnets, fewer rows, nothing written (a smoke run)")
    args = ap.parse_args(argv)
    n = 200 if args.quick else args.subnets
    bw = args.bandwidth
    res: dict[str, Any] = {"subnets": n, "seed": args.seed, "bandwidth_h2d": bw, "prefetch_depth": args.depth,
                           "acceptance_25": [], "retention_10": {}, "in_flight_curve": {}}
    for k in (48, 96):
        space = preset(f"naspipe-k{k}")
        for stages in (4, 8):
            base = unlimited(space, stages, n, args.seed)
            row: dict[str, Any] = {"space": space.name, "stages": stages, "budget": "25%", "unlimited": base}
            for mode in ("predictive", "on-demand"):
                cfg = MemoryConfig(device_memory="25%", swap=mode, bandwidth_h2d=bw, prefetch_depth=args.depth)
                r = swapped(space, stages, n, args.seed, cfg)
                r["retention"] = r["samples_per_second"] / base["samples_per_second"]
                row[mode] = r
            res["acceptance_25"].append(row)
            print(f"# {space.name} P={stages}: predictive hit {row['predictive']['hit_rate']:.4f} "
                  f"stall {row['predictive']['stall_share']:.4f}", flush=True)
    k96 = preset("naspipe-k96")
    base = unlimited(k96, 4, n, args.seed)
    rows = []
    variants: list[tuple[str, int | None, int, str]] = [("10%", None, 1, "task")]
    if not args.quick:  # (budget, batch or None = auto, headroom, pin)
        variants += [("10%", None, 1, "subnet"), ("10%", None, 0, "task"), ("10%", 16, 1, "task"),
                     ("10%", 20, 1, "task"), ("10%", 24, 1, "task"), ("10%", 28, 1, "task"), ("10%", 32, 1, "task"),
                     ("12.5%", None, 1, "task"), ("15%", None, 1, "task"), ("20%", None, 1, "task")]
    for budget, batch, headroom, pin in variants:
        cfg = MemoryConfig(device_memory=budget, swap="predictive", bandwidth_h2d=bw, prefetch_depth=args.depth,
                           batch_size=batch, headroom=headroom, pin=pin)
        r = swapped(k96, 4, n, args.seed, cfg)
        r["retention"] = r["samples_per_second"] / base["samples_per_second"]
        r.update(budget=budget, batch_choice="auto" if batch is None else "fixed", headroom=headroom, pin=pin)
        rows.append(r)
    res["retention_10"] = {"space": k96.name, "stages": 4, "budget": "10%", "unlimited": base, "runs": rows}
    seeds = {args.seed: rows[0]["retention"]}
    for seed in ([] if args.quick else [args.seed + 1, args.seed + 2, args.seed + 3]):  # the same run, other streams
        r = swapped(k96, 4, n, seed, MemoryConfig(device_memory="10%", swap="predictive", bandwidth_h2d=bw,
                                                   prefetch_depth=args.depth))
        seeds[seed] = r["samples_per_second"] / unlimited(k96, 4, n, seed)["samples_per_second"]
    res["retention_10_seeds"] = seeds
    print(f"# 10% retention by seed: {seeds}", flush=True)
    caps = [2, 4] if args.quick else [1, 2, 3, 4, 5, 6]
    res["in_flight_curve"] = {f"{k96.name} P=4": in_flight_curve(k96, 4, n, args.seed, caps),
                              "naspipe-k48 P=8": in_flight_curve(preset("naspipe-k48"), 8, n, args.seed, caps)}
    if args.quick:
        print(json.dumps(res))
    else:
        write_result("memory", res)
    print(markdown(res))
    return res


def markdown(res: dict[str, Any]) -> str:
    gb = res["bandwidth_h2d"] / 1e9
    lines = [f"\n### Budget 25% of each stage's share ({res['subnets']} subnets, {gb:g} GB/s per stage)\n",
             "| space | P | swap | batch | hit rate | F hit rate | stall share | memory wait | moved (GB) "
             "| samples/s | vs unlimited | predictor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in res["acceptance_25"]:
        for mode in ("predictive", "on-demand"):
            r = row[mode]
            acc = f"{r['predictor_accuracy']:.3f}" if r["predictor_accuracy"] is not None else "-"
            lines.append(f"| {row['space']} | {row['stages']} | {mode} | {r['batch_size']} | {r['hit_rate']:.4f} "
                         f"| {r['forward_hit_rate']:.4f} | {r['stall_share']:.4f} | {r['memory_wait_share']:.3f} "
                         f"| {r['bytes_moved'] / 1e9:.0f} | {r['samples_per_second']:.0f} | {r['retention']:.3f} "
                         f"| {acc} |")
    ret = res["retention_10"]
    lines += [f"\n### {ret['space']}, {ret['stages']} stages, small budgets: throughput against unlimited memory "
              f"({ret['unlimited']['samples_per_second']:.0f} samples/s at batch 32)\n",
              "| budget | pin | batch | headroom | samples/s | retention | hit rate | stall share | memory wait |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in ret["runs"]:
        lines.append(f"| {r['budget']} | {r['pin']} | {r['batch_size']} ({r['batch_choice']}) | {r['headroom']} "
                     f"| {r['samples_per_second']:.0f} | {r['retention']:.3f} | {r['hit_rate']:.4f} "
                     f"| {r['stall_share']:.4f} | {r['memory_wait_share']:.3f} |")
    lines += ["\n### CSP throughput with at most n subnets in flight per stage (activations only)\n",
              "| run | " + " | ".join(f"n={c['in_flight']}" for c in next(iter(res["in_flight_curve"].values())))
              + " |", "|---|" + "---|" * len(next(iter(res["in_flight_curve"].values())))]
    for name, curve in res["in_flight_curve"].items():
        lines.append(f"| {name} | " + " | ".join(f"{c['retention']:.3f}" for c in curve) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
