"""Every exact order against the optimal schedule (OR-Tools CP-SAT) and against the causal lower bound.

For each instance (a space, a partition, a subnet sequence, the simulator's cost model) the exact problem of
``naspipe.sim.optimum`` is solved by CP-SAT, warm-started from naspipe's own schedules, within a time limit; the
solver's proven bound brackets the optimum (``gap`` = best schedule / proven bound - 1; 0 = proven optimal).
Every order (``sequential``, ``csp``, ``csp-chain``, ``csp-cp`` = the default, and ``csp-bw`` on its own
split problem, B and W separate) is simulated on the same durations and reported as makespan / best
schedule; every simulated schedule is checked feasible, and ``bound.py``'s bounds are checked never above
the solver's proven bound. Instances: the presets at 30 subnets on 4 stages (naspipe-k12, -k48, -k96,
unit-k96; seeds 0-5) and a grid of small unit instances (K in {4, 6}, 4 or 6 blocks, 2-3 stages, 6-10
subnets, B = 2F), which CP-SAT proves at once. Then, where the optimum is out of reach, every exact
order's efficiency against the lower bound at 1,000 subnets (naspipe-k96 and -k48, 4 stages, seeds 0-3).
Prints JSON, then a markdown table.

Run: ``.venv/bin/python benchmarks/optimality.py --workers 2 --time-limit 60 --split-time-limit 20`` (the
recorded run: 6 minutes on 2 cores; ``--time-limit S`` per solve, ``--split-time-limit S`` for csp-bw's
split problem, ``--workers N`` CP-SAT workers, ``--gap G`` to stop at a proven gap, ``--seeds N``, ``--quick``
for the small grid only).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import write_result

from naspipe.runspec.spec import RunSpec
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import CostModel, simulate
from naspipe.sim.bound import lower_bound
from naspipe.sim.optimum import build_problem, feasibility_violations, solve
from naspipe.spaces.partition import partition
from naspipe.spaces.space import SearchSpace, preset, unit_space

ORDERS = ("sequential", "csp", "csp-chain", "csp-cp")  # on the unsplit problem; csp-bw on its split one
PRESETS = (("naspipe-k12", 4), ("naspipe-k48", 4), ("naspipe-k96", 4), ("unit-k96", 4))
SUBNETS = 30


def instance(space: SearchSpace, stages: int, subnets: int, seed: int, time_limit: float,
             split: bool = True, workers: int = 1, gap: float = 0.0, split_time_limit: float | None = None) -> dict:
    part = partition(space, stages)
    stream = UniformStream(space, seed, subnets)
    subs = [stream[j] for j in range(subnets)]
    row: dict = {"space": space.name, "stages": stages, "subnets": subnets, "seed": seed}
    runs = {p: simulate(RunSpec.of(space, part, stream, p)) for p in ORDERS}
    costs = runs["csp"].costs
    pb = build_problem(space, part, subs, costs.duration, hop=costs.transfer())
    bad = {p: feasibility_violations(pb, r.trace) for p, r in runs.items()}
    sol = solve(pb, hints=[r.trace for r in runs.values()], time_limit=time_limit, workers=workers, gap=gap)
    b = lower_bound(space, part, subs, costs.duration, hop=costs.transfer())
    row.update({"optimum": sol.makespan, "solver_bound": sol.bound, "gap": _gap(sol, b.tight_bound),
                "proven": sol.optimal, "solve_seconds": round(sol.seconds, 2), "lower_bound": b.lower_bound,
                "tight_bound": b.tight_bound, "bound_ok": _bound_ok(sol, b.tight_bound),
                "tight_over_solver_bound": b.tight_bound / sol.bound,  # <= 1 + 1e-4 (rounding) where proven
                "feasible": all(not v for v in bad.values())})
    for p, r in runs.items():
        row[p] = {"makespan": r.makespan, "vs_optimum": r.makespan / sol.makespan,
                  "vs_lower_bound": b.lower_bound / r.makespan}
    if split:  # csp-bw against the optimum of its own (split) problem
        r = simulate(RunSpec.of(space, part, stream, "csp-bw"))
        sc = CostModel(space, part, subs, split_backward=True)
        spb = build_problem(space, part, subs, sc.duration, split_backward=True, hop=sc.transfer())
        ssol = solve(spb, hints=[r.trace], time_limit=split_time_limit or time_limit, workers=workers, gap=gap)
        sb = lower_bound(space, part, subs, sc.duration, split_backward=True, hop=sc.transfer())
        row["csp-bw"] = {"makespan": r.makespan, "vs_optimum": r.makespan / ssol.makespan,
                         "vs_lower_bound": sb.lower_bound / r.makespan, "optimum": ssol.makespan,
                         "gap": _gap(ssol, sb.tight_bound), "proven": ssol.optimal,
                         "feasible": not feasibility_violations(spb, r.trace),
                         "bound_ok": _bound_ok(ssol, sb.tight_bound)}
        row["feasible"] = row["feasible"] and row["csp-bw"]["feasible"]
        row["bound_ok"] = row["bound_ok"] and row["csp-bw"]["bound_ok"]
    return row


def at_scale(subnets: int = 1000) -> list[dict]:
    """Efficiency (lower bound / makespan) of every exact order at ``subnets`` on 4 stages, naspipe-k96
    and naspipe-k48, seeds 0-3: where the optimum is out of the solver's reach, the bound is the yardstick."""
    out = []
    for name in ("naspipe-k96", "naspipe-k48"):
        sp = preset(name)
        part = partition(sp, 4)
        for seed in range(4):
            stream = UniformStream(sp, seed, subnets)
            subs = [stream[j] for j in range(subnets)]
            row: dict = {"space": name, "stages": 4, "subnets": subnets, "seed": seed}
            for p in ORDERS[1:]:
                r = simulate(RunSpec.of(sp, part, stream, p))
                b = lower_bound(sp, part, subs, r.costs.duration, hop=r.costs.transfer())
                row[p] = b.lower_bound / r.makespan
            out.append(row)
    return out


def _gap(sol, tight: float) -> float:  # noqa: ANN001
    """Proven relative gap of the best schedule: against the best lower bound known (solver or bound.py)."""
    return sol.makespan / max(sol.bound, tight) - 1.0


def _bound_ok(sol, tight: float) -> bool:  # noqa: ANN001
    """bound.py's bound is not above the optimum as far as the solver can tell: not above the best schedule
    (where CP-SAT proved it optimal, on durations rounded down to 1e-4 of the shortest, the optimum lies
    between its proven bound and that schedule, a relative 1e-4 apart at most)."""
    return tight <= sol.makespan * (1 + 1e-9)


def small_grid() -> list[tuple[SearchSpace, int, int, int]]:
    out = []
    for k in (4, 6):
        for blocks in (4, 6):
            sp = unit_space(k, choice_blocks=blocks, fwd=1.0 / blocks, bwd=2.0 / blocks, name=f"unit-k{k}-b{blocks}")
            for stages in (2, 3):
                for n in (6, 10):
                    out.extend((sp, stages, n, seed) for seed in range(2))
    return out


def summary(rows: list[dict], orders: tuple[str, ...]) -> list[dict]:
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["space"] if not r["space"].startswith("unit-k") or r["subnets"] > 10 else "small grid",
                           r["stages"]), []).append(r)
    out = []
    for (space, stages), rs in groups.items():
        g = {"space": space, "stages": stages, "instances": len(rs), "proven": sum(r["proven"] for r in rs),
             "bracketed_2pct": sum(r["gap"] <= 0.02 for r in rs), "max_gap": max(r["gap"] for r in rs),
             "max_gap_split": max((r["csp-bw"]["gap"] for r in rs if "csp-bw" in r), default=0.0)}
        for p in orders:
            vals = [r[p]["vs_optimum"] for r in rs if p in r]
            if vals:
                g[p] = {"mean": statistics.fmean(vals), "max": max(vals)}
        out.append(g)
    return out


def markdown(groups: list[dict], orders: tuple[str, ...]) -> str:
    head = ("| instances | P | n | proven | gap (split) | " + " | ".join(orders) + " |\n|---|---|---|---|---|"
            + "---|" * len(orders))
    lines = [head]
    for g in groups:
        cells = " | ".join(f"{g[p]['mean']:.3f} ({g[p]['max']:.3f})" if p in g else "-" for p in orders)
        lines.append(f"| {g['space']} | {g['stages']} | {g['instances']} | {g['proven']} | "
                     f"{g['max_gap']:.3f} ({g['max_gap_split']:.3f}) | {cells} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0, help="CP-SAT seconds per solve (default 20)")
    ap.add_argument("--seeds", type=int, default=6, help="seeds per preset (default 6)")
    ap.add_argument("--quick", action="store_true", help="the small grid only")
    ap.add_argument("--workers", type=int, default=1, help="CP-SAT search workers (default 1)")
    ap.add_argument("--split-time-limit", type=float, default=None,
                    help="CP-SAT seconds per solve of csp-bw's split problem (default: --time-limit)")
    ap.add_argument("--gap", type=float, default=0.0,
                    help="stop a solve once proven within this relative gap (default 0: prove optimality)")
    args = ap.parse_args()
    if (args.time_limit <= 0 or (args.split_time_limit is not None and args.split_time_limit <= 0)
            or args.workers < 1 or not 0 <= args.gap < 1 or args.seeds < 1):
        ap.error("--time-limit and --split-time-limit must be > 0, --workers and --seeds >= 1, --gap in [0, 1)")
    t0 = time.perf_counter()
    rows = []
    for sp, stages, n, seed in small_grid():
        rows.append(instance(sp, stages, n, seed, args.time_limit, workers=args.workers, gap=args.gap,
                             split_time_limit=args.split_time_limit))
    if not args.quick:
        for name, stages in PRESETS:
            for seed in range(args.seeds):
                rows.append(instance(preset(name), stages, SUBNETS, seed, args.time_limit, workers=args.workers,
                                     gap=args.gap, split_time_limit=args.split_time_limit))
    scale = [] if args.quick else at_scale()
    orders = (*ORDERS, "csp-bw")
    groups = summary(rows, orders)
    table = markdown(groups, orders)
    write_result("optimality", {
        "time_limit": args.time_limit, "split_time_limit": args.split_time_limit or args.time_limit,
        "workers": args.workers, "gap_limit": args.gap, "subnets": SUBNETS,
        "orders": list(orders),
        "all_feasible": all(r["feasible"] for r in rows), "bound_never_above": all(r["bound_ok"] for r in rows),
        "max_tight_over_proven_bound": max(r["tight_over_solver_bound"] for r in rows if r["proven"]),
        "groups": groups, "rows": rows, "markdown": table, "at_1000_subnets": scale,
        "seconds": round(time.perf_counter() - t0, 1)})
    print()
    print("makespan / best schedule known (the optimum where proven), mean (worst); gap: the largest proven gap "
          "of that schedule (split problem); csp-bw against the split problem")
    print(table)
    for r in scale:
        print(f"{r['space']} seed {r['seed']}, 1,000 subnets, efficiency: "
              + ", ".join(f"{p} {r[p]:.3f}" for p in ORDERS[1:]))


if __name__ == "__main__":
    main()
