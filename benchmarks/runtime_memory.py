"""Context switching in the runtime: hit rate, stalls and throughput of ``naspipe train --device-memory``.

Why it exists: the issue's runtime acceptance (a budget below the supernet, verify passes, hit rate >= 95%,
prefetch/stall events in the trace) as numbers, and what swapping costs on this machine, measured side by
side in one run. Real processes, real training, the same subnets for every configuration; the runs are
measured in rotating order ``--repeats`` times (best and median subnets/s reported):

* no budget (the plain runtime, the reference for throughput);
* ``--swap resident`` at 300% (everything on the "device" before the clock starts);
* ``--swap predictive`` and ``--swap on-demand`` at each budget in ``--budgets`` (default 80% and 50% of
  each stage's supernet share), candidates pinned per subnet (the default) and per task (``--pin task``).

Every run is checked against the sequential reference (``naspipe.runfolder.results.verify``): ``identical`` must
be true everywhere. On the CPU the "device" is a separate buffer pool, so every load and write-back is a
real copy; the stage loop pays for stalls, the background worker's copies compete for the two cores.

Run: ``python benchmarks/runtime_memory.py [--space tiny-transformer] [--subnets 60] [--repeats 2]``;
writes ``benchmarks/results/runtime_memory.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _common import write_result

from naspipe.cli import main as naspipe
from naspipe.runfolder.results import verify
from naspipe.runtime import TrainConfig, train
from naspipe.sched.trace import Trace


def configurations(budgets: list[str]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("unlimited", {}),
                                             ("resident 300%", {"device_memory": "300%", "swap": "resident"})]
    for b in budgets:
        for swap in ("predictive", "on-demand"):
            for pin in ("subnet", "task"):
                out.append((f"{swap} {b} pin={pin}", {"device_memory": b, "swap": swap, "pin": pin}))
    return out


def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="tiny-transformer")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--subnets", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--budgets", default="80%,50%")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="naspipe-runtime-memory-"))
    # frozen and uniform: the shared-layer semantics and the sampler these numbers were measured with (before the
    # defaults became serial and fair; under fair, neighbours share no candidates and the set in flight is larger)
    base = TrainConfig.create(args.space, root / "base", stages=args.stages, subnets=args.subnets, seed=args.seed,
                              progress=False, shared_layers="frozen", sampler="uniform")
    ref = root / "ref"
    if naspipe(["reference", "--space", args.space, "--subnets", str(args.subnets), "--seed", str(args.seed),
                "--shared-layers", "frozen", "--sampler", "uniform", "--no-progress", "--out", str(ref)]) != 0:
        raise SystemExit("the reference run failed")
    configs = configurations([b.strip() for b in args.budgets.split(",") if b.strip()])
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in configs}
    for r in range(args.repeats):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for name, opts in order:
            out = root / f"{len(runs[name])}-{name.replace(' ', '_').replace('%', 'pc').replace('=', '')}"
            m = train(base.replace(out=out, **opts)).metrics
            mem = m.get("memory") or {}
            runs[name].append({
                "subnets_per_s": m["subnets_per_s"], "identical": verify(out, ref)[0],
                "per_task_overhead_us": m["per_task_overhead_us"],
                "hit_rate": mem.get("hit_rate"), "task_hit_rate": mem.get("task_hit_rate"),
                "stall_share": mem.get("stall_share"), "bytes_moved": mem.get("bytes_moved"),
                "peak_within_budget": all(s["peak_device_bytes"] <= s["budget_bytes"] for s in mem.get("stages", [])),
                "trace_events": sorted({e.kind for e in Trace.load(out / "trace.json").events
                                        if e.kind in ("prefetch", "evict", "stall")}),
            })
            print(f"# {name}: {runs[name][-1]}", flush=True)
    unl = max(x["subnets_per_s"] for x in runs["unlimited"])
    rows = []
    for name, opts in configs:
        v = runs[name]
        best = max(x["subnets_per_s"] for x in v)
        rows.append({"config": name, **opts, "best_subnets_per_s": best,
                     "median_subnets_per_s": statistics.median(x["subnets_per_s"] for x in v),
                     "vs_unlimited": best / unl, "identical": all(x["identical"] for x in v),
                     "hit_rate": statistics.median(x["hit_rate"] for x in v) if v[0]["hit_rate"] is not None else None,
                     "task_hit_rate": statistics.median(x["task_hit_rate"] for x in v)
                     if v[0]["task_hit_rate"] is not None else None,
                     "stall_share": statistics.median(x["stall_share"] for x in v)
                     if v[0]["stall_share"] is not None else None,
                     "per_task_overhead_us": statistics.median(x["per_task_overhead_us"] for x in v),
                     "peak_within_budget": all(x["peak_within_budget"] for x in v), "runs": v})
    res = {"space": args.space, "stages": args.stages, "subnets": args.subnets, "repeats": args.repeats,
           "seed": args.seed, "rows": rows}
    write_result("runtime_memory", res)
    print(markdown(res))
    return res


def markdown(res: dict[str, Any]) -> str:
    lines = [f"\n### naspipe train, {res['space']}, {res['stages']} stages, {res['subnets']} subnets "
             f"(best of {res['repeats']})\n",
             "| configuration | subnets/s | vs no budget | forward hit rate | task hit rate | stall share "
             "| overhead per task | identical |", "|---|---|---|---|---|---|---|---|"]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    for r in res["rows"]:
        lines.append(f"| {r['config']} | {r['best_subnets_per_s']:.1f} | {r['vs_unlimited']:.2f} "
                     f"| {pct(r['hit_rate'])} | {pct(r['task_hit_rate'])} | {pct(r['stall_share'])} "
                     f"| {r['per_task_overhead_us']:.0f} µs | {r['identical']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
