"""Unit-cost check against the NASPipe authors' bubble model.

Presets ``unit-k12 .. unit-k96``: 32 choice blocks, F = B = 1 time unit per 8-block stage, 4 stages,
window 200, 1,000 uniformly sampled subnets (seed 0). The authors' model gives CSP utilisation
0.32 / 0.42 / 0.56 / 0.81 for K = 12 / 24 / 48 / 96; we report our CSP utilisation beside theirs, with
the causal lower bound and the utilisation it allows. A second part runs the split-backward model
(``unit-bw-k48``: F = 1, B = W = 1 per stage) with csp and csp-bw: TECHNIQUES.md section 8 expects the
bound's utilisation to rise from about 0.58 to about 0.75 when the causal rule waits on W only.

Run: ``.venv/bin/python benchmarks/unit_model.py``
"""

from __future__ import annotations

from _common import bounded_run, write_result

from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset

AUTHORS = {12: 0.32, 24: 0.42, 48: 0.56, 96: 0.81}
STAGES = 4
WINDOW = 200
SUBNETS = 1000
SEED = 0


def run(space_name: str, policy: str) -> dict:
    _, _, row = bounded_run(space_name, STAGES, policy, subnets=SUBNETS, seed=SEED, window=WINDOW)
    part = partition(preset(space_name), STAGES)
    return {"space": space_name, "policy": policy, **row, "stage_blocks": [len(part.blocks(s)) for s in range(STAGES)]}


def main() -> None:
    rows = []
    for k, theirs in AUTHORS.items():
        row = run(f"unit-k{k}", "csp")
        row.update(k=k, authors_utilization=theirs, ratio_to_authors=row["utilization"] / theirs)
        rows.append(row)
    split = [run("unit-bw-k48", "csp"), run("unit-bw-k48", "csp-bw")]
    table = ["| K | authors | our CSP utilisation | bound utilisation | efficiency | tight eff. |",
             "|---|---|---|---|---|---|"]
    table += [f"| {r['k']} | {r['authors_utilization']:.2f} | {r['utilization']:.3f} | {r['bound_utilization']:.3f} "
              f"| {r['efficiency']:.3f} | {r['tight_efficiency']:.3f} |" for r in rows]
    table += ["", "| unit-bw-k48 | utilisation | bound utilisation | efficiency |", "|---|---|---|---|"]
    table += [f"| {r['policy']} | {r['utilization']:.3f} | {r['bound_utilization']:.3f} | {r['efficiency']:.3f} |"
              for r in split]
    md = "\n".join(table)
    write_result("unit_model", {"stages": STAGES, "window": WINDOW, "subnets": SUBNETS, "seed": SEED,
                                "rows": rows, "split_backward": split, "markdown": md})
    print()
    print(md)


if __name__ == "__main__":
    main()
