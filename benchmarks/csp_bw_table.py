"""Issue 9's simulation table: CSP with a split backward (``csp-bw``) against CSP, on the same sequences.

For ``naspipe-k12/24/48/96`` on 4 and 8 stages, 1,000 subnets (seed 0), window 200, shared layers frozen:
utilisation of ``csp`` and ``csp-bw``, their ratio, and each one's efficiency against its own lower bound
(``csp``: the unsplit bound; ``csp-bw``: ``naspipe.sim.bound.lower_bound(..., split_backward=True)``, where a
later conflicting forward waits on W and the upstream stage only on B), plus the utilisation that split
bound allows. The last row is the unit-cost model ``unit-bw-k48`` (F = 1, B = W = 1 per 8-block stage,
4 stages, TECHNIQUES.md section 8). Prints JSON (also written to ``benchmarks/results/csp_bw_table.json``),
then a markdown table.

Acceptance (issue 9): ``unit-bw-k48``: csp-bw utilisation >= 0.70; ``naspipe-k48`` on 4 stages:
csp-bw / csp utilisation >= 1.25 and efficiency against the split bound >= 0.90.

Run: ``.venv/bin/python benchmarks/csp_bw_table.py``
"""

from __future__ import annotations

import time

from _common import bounded_run, write_result

KS = (12, 24, 48, 96)
STAGES = (4, 8)
SUBNETS = 1000
WINDOW = 200
SEED = 0


def row(space_name: str, stages: int) -> dict:
    _, _, csp = bounded_run(space_name, stages, "csp", subnets=SUBNETS, seed=SEED, window=WINDOW)
    _, b_bw, bw = bounded_run(space_name, stages, "csp-bw", subnets=SUBNETS, seed=SEED, window=WINDOW)
    return {
        "space": space_name, "stages": stages, "subnets": SUBNETS, "window": WINDOW, "seed": SEED,
        "csp_utilization": csp["utilization"], "csp-bw_utilization": bw["utilization"],
        "ratio": bw["utilization"] / csp["utilization"],
        "csp_makespan": csp["makespan"], "csp-bw_makespan": bw["makespan"],
        "csp_efficiency": csp["efficiency"], "csp-bw_efficiency": bw["efficiency"],
        "csp_bound_utilization": csp["bound_utilization"], "split_bound_utilization": bw["bound_utilization"],
        "split_lower_bound": bw["lower_bound"], "split_critical_path": bw["critical_path"],
        "max_stage_work": max(b_bw.stage_work),
    }


def markdown(rows: list[dict]) -> str:
    lines = ["| space | P | csp util | csp-bw util | ratio | csp eff. | csp-bw eff. (split bound) "
             "| split-bound util |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['space']} | {r['stages']} | {r['csp_utilization']:.3f} | "
                     f"{r['csp-bw_utilization']:.3f} | {r['ratio']:.2f}x | {r['csp_efficiency']:.3f} | "
                     f"{r['csp-bw_efficiency']:.3f} | {r['split_bound_utilization']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    t0 = time.perf_counter()
    rows = [row(f"naspipe-k{k}", p) for p in STAGES for k in KS]
    unit = row("unit-bw-k48", 4)
    table = markdown([*rows, unit])
    k48 = next(r for r in rows if r["space"] == "naspipe-k48" and r["stages"] == 4)
    write_result("csp_bw_table", {
        "rows": rows, "unit": unit, "shared_layers": "frozen",
        "acceptance": {
            "unit_bw_k48_utilization_ge_0.70": unit["csp-bw_utilization"] >= 0.70,
            "naspipe_k48_4_ratio_ge_1.25": k48["ratio"] >= 1.25,
            "naspipe_k48_4_efficiency_ge_0.90": k48["csp-bw_efficiency"] >= 0.90,
        },
        "markdown": table, "seconds": time.perf_counter() - t0,
    })
    print()
    print(table)


if __name__ == "__main__":
    main()
