"""How much a different priority rule could still gain: csp-cp and randomly perturbed csp-cp against the optimum.

Every ranking a list scheduler like ``csp-cp`` could use is, on a given instance, one of its perturbations. This
benchmark runs ``csp-cp`` with each priority multiplied by an independent uniform factor in ``[1, 1 + eps]``
(seeded per stage; the order stays exact: the causal rule still decides what is ready) ``--tries`` times per
instance and reports, against the best schedule known for that instance (``benchmarks/results/optimality.json``;
only instances the solver brackets within 2%): ``csp-cp``, the mean perturbed run, the best of the first 10 and
the best of all. The best of N is what an oracle choosing among N rules per instance would reach, so it bounds
what re-tuning the priority rule can buy (no single rule wins on every instance), and a default order that
must come within a few percent of the optimum needs more than a priority rule if even that falls short.
Simulation only, no solver: seconds. Prints JSON (``benchmarks/results/priority_headroom.json``), then a table.

Run: ``.venv/bin/python benchmarks/priority_headroom.py`` (``--tries N``, ``--eps E``)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from _common import RESULTS, write_result

from naspipe.partition import partition
from naspipe.sched.policies import CriticalPathCSPScheduler
from naspipe.sched.registry import Policy, register_policy
from naspipe.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.space import preset

SPACES = ("naspipe-k96", "naspipe-k48")


class PerturbedCriticalPath(CriticalPathCSPScheduler):
    """csp-cp with every priority scaled by a seeded random factor in ``[1, 1 + EPS]``."""

    name = "csp-cp-perturbed"
    EPS = 0.2
    SEED = 0

    def __init__(self, spec, stream, window: int = 200, **base):  # noqa: ANN001, ANN003
        self._rng = random.Random(1000 * self.SEED + spec.stage)
        super().__init__(spec, stream, window, **base)

    def _forward_priority(self, j: int) -> float:
        return super()._forward_priority(j) * (1.0 + self.EPS * self._rng.random())

    def _backward_priority(self, j: int) -> float:
        return super()._backward_priority(j) * (1.0 + self.EPS * self._rng.random())


def perturbed(seed: int, eps: float) -> str:
    """Register perturbation ``seed`` (a policy of this process only) and return its name."""
    name = f"csp-cp-perturbed-{seed}"
    cls = type(f"Perturbed{seed}", (PerturbedCriticalPath,), {"name": name, "SEED": seed, "EPS": eps})
    register_policy(Policy(name, cls, causal=True, doc="benchmark only: perturbed csp-cp"))
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=40, help="perturbed runs per instance (default 40)")
    ap.add_argument("--eps", type=float, default=0.2, help="largest relative perturbation (default 0.2)")
    args = ap.parse_args()
    if args.tries < 10 or not 0 < args.eps < 10:
        ap.error("--tries must be >= 10 and --eps in (0, 10)")
    stored = json.loads((RESULTS / "optimality.json").read_text())
    policies = [perturbed(i, args.eps) for i in range(args.tries)]
    rows = []
    for r in stored["rows"]:
        if r["space"] not in SPACES or r["gap"] > 0.02:
            continue
        sp = preset(r["space"])
        part = partition(sp, r["stages"])
        stream = UniformStream(sp, r["seed"], r["subnets"])
        best = r["optimum"]
        runs = [simulate(sp, part, stream, p).makespan / best for p in policies]
        rows.append({"space": r["space"], "seed": r["seed"], "proven": r["proven"], "gap": r["gap"],
                     "csp-cp": simulate(sp, part, stream, "csp-cp").makespan / best,
                     "perturbed_mean": statistics.fmean(runs), "best_of_10": min(runs[:10]), "best_of_all": min(runs)})
    groups = []
    for space in SPACES:
        rs = [r for r in rows if r["space"] == space]
        if rs:
            keys = ("csp-cp", "perturbed_mean", "best_of_10", "best_of_all")
            means = {k: statistics.fmean(r[k] for r in rs) for k in keys}
            groups.append({"space": space, "instances": len(rs), **means})
    write_result("priority_headroom", {"tries": args.tries, "eps": args.eps, "groups": groups, "rows": rows})
    print("\n| instances | n | csp-cp | perturbed (mean) | best of 10 | best of "
          f"{args.tries} |\n|---|---|---|---|---|---|")
    for g in groups:
        print(f"| {g['space']} | {g['instances']} | {g['csp-cp']:.3f} | {g['perturbed_mean']:.3f} | "
              f"{g['best_of_10']:.3f} | {g['best_of_all']:.3f} |")


if __name__ == "__main__":
    main()
