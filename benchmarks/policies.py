"""Issue 2's table: CSP against its causal lower bound, with sequential, BSP and ASP beside it.

For naspipe-k12/24/48/96 on 4 and 8 stages, 1,000 subnets (seed 0), window 200, shared layers frozen:
CSP utilisation, the lower bound max(per-stage work, causal critical path), efficiency = bound / makespan,
and the efficiency against the tight bound (``Bound.tight_bound``); then the utilisation of sequential,
csp-bw, bsp (GPipe groups of ``micro_batches``) and asp (PipeDream 1F1B) on the very same sequence and
cost model. All policies here have the same memory, so bsp is not penalised by smaller batches as in the
paper (its large speedups over GPipe come mostly from memory). Prints JSON, then a markdown table.

Run: ``.venv/bin/python benchmarks/policies.py``
"""

from __future__ import annotations

import time

from _common import bounded_run, write_result

from naspipe.runspec.spec import RunSpec
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset

KS = (12, 24, 48, 96)
STAGES = (4, 8)
SUBNETS = 1000
WINDOW = 200
SEED = 0
OTHERS = ("sequential", "csp-chain", "csp-bw", "bsp", "asp")
MICRO_BATCHES = 4  # bsp group size M


def row(k: int, stages: int) -> dict:
    name = f"naspipe-k{k}"
    r, _, csp = bounded_run(name, stages, "csp", subnets=SUBNETS, seed=SEED, window=WINDOW)
    out = {
        "space": name, "k": k, "stages": stages, "subnets": SUBNETS, "window": WINDOW, "seed": SEED,
        "csp_makespan": csp["makespan"], "csp_utilization": csp["utilization"],
        **{key: csp[key] for key in ("lower_bound", "critical_path", "max_stage_work", "efficiency", "tight_bound",
                                     "tight_efficiency", "bound_utilization")},
    }
    for policy in OTHERS:
        if policy in ("csp-chain", "csp-bw"):  # causal policies: against their own bound (split for csp-bw)
            _, _, o = bounded_run(name, stages, policy, subnets=SUBNETS, seed=SEED, window=WINDOW)
            out[f"{policy}_efficiency"] = o["efficiency"]
        else:
            o = _plain(name, stages, policy, {"micro_batches": MICRO_BATCHES} if policy == "bsp" else None)
        out[f"{policy}_utilization"] = o["utilization"]
        out[f"{policy}_makespan"] = o["makespan"]
    out["csp_speedup_vs_bsp"] = out["bsp_makespan"] / r.makespan
    out["csp_speedup_vs_sequential"] = out["sequential_makespan"] / r.makespan
    return out


def _plain(name: str, stages: int, policy: str, opts: dict[str, int] | None) -> dict:
    sp = preset(name)
    r = simulate(RunSpec.of(sp, partition(sp, stages), UniformStream(sp, SEED, SUBNETS), policy, window=WINDOW),
                 SimOptions(policy_options=opts))
    return {"utilization": r.utilization, "makespan": r.makespan}


def markdown(rows: list[dict]) -> str:
    head = ("| space | P | CSP util | bound | efficiency | tight eff. | csp-chain eff. | sequential | csp-bw | bsp "
            "| asp |\n|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['space']} | {r['stages']} | {r['csp_utilization']:.3f} | {r['lower_bound']:.2f} s | "
            f"{r['efficiency']:.3f} | {r['tight_efficiency']:.3f} | {r['csp-chain_efficiency']:.3f} | "
            f"{r['sequential_utilization']:.3f} | "
            f"{r['csp-bw_utilization']:.3f} | {r['bsp_utilization']:.3f} | {r['asp_utilization']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    t0 = time.perf_counter()
    rows = [row(k, p) for p in STAGES for k in KS]
    table = markdown(rows)
    write_result("policies", {
        "rows": rows, "bsp_micro_batches": MICRO_BATCHES, "shared_layers": "frozen",
        "acceptance": {
            "efficiency_k_le_48_ge_0.95": all(r["efficiency"] >= 0.95 for r in rows if r["k"] <= 48),
            "efficiency_k96_ge_0.90": all(r["efficiency"] >= 0.90 for r in rows if r["k"] == 96),
            "utilization_rises_with_k": all(
                [r["csp_utilization"] for r in rows if r["stages"] == p]
                == sorted(r["csp_utilization"] for r in rows if r["stages"] == p) for p in STAGES),
        },
        "markdown": table, "seconds": time.perf_counter() - t0,
    })
    print()
    print(table)


if __name__ == "__main__":
    main()
