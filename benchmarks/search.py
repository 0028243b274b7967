"""Issue 8's acceptance: evolution on a trained digits-cnn supernet against random subnets of the same cost class.

1. Train ``SUBNETS`` uniformly sampled subnets of ``digits-cnn`` with the sequential reference (adam, its
   default learning rate, shared layers frozen, seed 0).
2. Random baseline: ``RANDOM`` uniformly drawn distinct subnets, each scored on the whole held-out split with
   the inherited weights. Cost classes are the terciles of their parameter counts (small / medium / large).
3. For each class and each search seed, regularized evolution with ``BUDGET`` evaluations under
   ``params<=`` the class's upper edge (no constraint for the largest class); the subnet it returns is put
   in its own cost class and compared with the median (and the best) random accuracy of that class. A random
   search with the same budget and constraint is reported beside it.
4. Reproducibility: the first search is run again with the same seed; subnet and table must be identical.

Prints JSON, then a markdown table; writes ``benchmarks/results/search.json``.
Run: ``.venv/bin/python benchmarks/search.py`` (about 1.5 minutes on one core).
"""

from __future__ import annotations

import statistics
import time

from _common import write_result

from naspipe.models import heldout_batches
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.search import SearchResult, cost_model, format_cost, parse_constraints, search_model, subnet_names
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import preset

SPACE = "digits-cnn"
SUBNETS = 1200
OPTIMIZER = "adam"
TRAIN_SEED = 0
RANDOM = 300
BUDGET = 100
SEEDS = (0, 1, 2)
CLASSES = ("small", "medium", "large")


def _drop_wall(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "wall_s"}


def main() -> None:
    t0 = time.perf_counter()
    space = preset(SPACE)
    trained = train_reference(space, UniformStream(space, TRAIN_SEED, SUBNETS), TRAIN_SEED, SharedLayers(),
                              optimizer=OPTIMIZER)
    train_s = time.perf_counter() - t0
    model, batches = trained.model, heldout_batches(space)
    costs = cost_model(space, model)

    def search(strategy: str, seed: int, constraint: str | None, budget: int) -> SearchResult:
        return search_model(model, strategy=strategy, budget=budget, seed=seed, costs=costs, batches=batches,
                            constraints=parse_constraints(constraint))

    rnd = search("random", 1000, None, RANDOM)
    params = sorted(e.params for e in rnd.evaluated)
    edges = (params[len(params) // 3 - 1], params[2 * len(params) // 3 - 1])  # upper edges of small, medium

    def klass(p: float) -> int:
        return 0 if p <= edges[0] else 1 if p <= edges[1] else 2

    per_class = []
    for c, name in enumerate(CLASSES):
        accs = [e.accuracy for e in rnd.evaluated if klass(e.params) == c]
        per_class.append({"class": name, "params_max": edges[c] if c < 2 else max(params), "random_subnets": len(accs),
                          "random_median_accuracy": statistics.median(accs), "random_best_accuracy": max(accs)})

    rows, first = [], None
    for c, name in enumerate(CLASSES):
        constraint = f"params<={int(edges[c])}" if c < 2 else None
        for seed in SEEDS:
            ev = search("evolution", seed, constraint, BUDGET)
            rs = search("random", seed, constraint, BUDGET)
            first = first or (ev, constraint, seed)
            best, got = ev.best, klass(ev.best.params)
            ref = per_class[got]
            rows.append({
                "target_class": name, "constraint": constraint or "none", "seed": seed,
                "subnet": list(best.subnet), "names": subnet_names(space, best.subnet),
                "params": best.params, "latency_s": best.latency, "class": CLASSES[got],
                "evolution_accuracy": best.accuracy, "evolution_loss": best.loss,
                "random_median_accuracy_in_class": ref["random_median_accuracy"],
                "random_best_accuracy_in_class": ref["random_best_accuracy"],
                "random_search_same_budget_accuracy": rs.best.accuracy,
                "beats_median": best.accuracy > ref["random_median_accuracy"],
                "evaluations": len(ev.evaluated), "search_s": ev.wall_s,
            })
    ev, constraint, seed = first
    again = search("evolution", seed, constraint, BUDGET)
    repro = {"seed": seed, "constraint": constraint, "subnet": list(ev.best.subnet),
             "same_subnet": again.best.subnet == ev.best.subnet,
             "same_table": _drop_wall(again.to_dict(10)) == _drop_wall(ev.to_dict(10))}
    table = markdown(rows, per_class)
    write_result("search", {
        "space": SPACE, "train": {"subnets": SUBNETS, "optimizer": OPTIMIZER, "lr": trained.config["lr"],
                                  "seed": TRAIN_SEED, "shared_layers": "frozen", "seconds": train_s,
                                  "final_loss": trained.losses[SUBNETS - 1]},
        "heldout_samples": sum(len(b.target) for b in batches), "budget": BUDGET,
        "params_source": costs.params_source, "cost_classes": per_class, "rows": rows,
        "all_beat_median": all(r["beats_median"] for r in rows), "reproducible": repro,
        "markdown": table, "seconds": time.perf_counter() - t0,
    })
    print()
    print(table)


def markdown(rows: list[dict], classes: list[dict]) -> str:
    out = ["| cost class | params <= | random subnets | median acc | best acc |", "|---|---:|---:|---:|---:|"]
    for c in classes:
        out.append(f"| {c['class']} | {format_cost('params', c['params_max'])} | {c['random_subnets']} | "
                   f"{c['random_median_accuracy']:.3f} | {c['random_best_accuracy']:.3f} |")
    out += ["", "| constraint | seed | evolution subnet | params | class | evolution acc | random median (class) "
                "| random search, same budget |", "|---|---:|---|---:|---|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['constraint']} | {r['seed']} | {' '.join(r['names'])} | {format_cost('params', r['params'])} "
                   f"| {r['class']} | {r['evolution_accuracy']:.3f} | {r['random_median_accuracy_in_class']:.3f} "
                   f"| {r['random_search_same_budget_accuracy']:.3f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
