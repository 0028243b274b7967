"""Issue 3's speedup: CSP against the ``sequential`` policy through the same runtime, side by side.

Real processes, real training (``naspipe.runtime.train``), the same subnet sequence for every run. The
configurations are measured in rotating order, ``--repeats`` times, so machine load hits them alike.
Headline ratios compare the best run of each configuration (timeit's convention: on a shared machine the
best run is the one least disturbed by other load); ``*_paired_median`` is the median of the ratios taken
within each repeat. Reported:

* ``speedup_2``: CSP on 2 stages / sequential on 2 stages (same processes, same messages; the acceptance
  figure, target >= 1.6 on a conflict-sparse preset), and against sequential on 1 stage (no messages);
* ``speedup_4``: the same for 4 stages;
* ``split_cost_ms_per_subnet``: sequential on 2 stages against 1 stage, per subnet: the price of the
  messages and the extra tasks when nothing overlaps;
* per run: subnets/s (subnets / makespan, start-up excluded), utilisation, ``overhead_share``
  (scheduling + message handling per stage, outside compute and blocked waits, over compute),
  ``per_task_overhead_us`` and ``wall_overhead_share`` ((wall per stage - compute) / compute, bubbles too);
* the simulator's utilisation for the same sequence and cost model, for comparison.

Default space: ``sparse-mlp`` when the preset exists, else ``tiny-transformer-k32`` (tiny-transformer with
32 candidates per choice block, copies of its six ops, built here), since tiny-transformer's K = 6 is
conflict-dense. ``--balance measured`` (default) partitions by costs measured on this machine.

Run: ``.venv/bin/python benchmarks/runtime_speedup.py [--space NAME] [--subnets 200] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import write_result

from naspipe.runspec.spec import RunSpec
from naspipe.runtime import TrainConfig, train
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import Block, SearchSpace, preset, preset_names, resolve_space


def wide_tiny_transformer(k: int = 32) -> SearchSpace:
    """tiny-transformer with ``k`` candidates per choice block (its six ops, repeated with new names)."""
    sp = preset("tiny-transformer")
    blocks = []
    for b in sp.blocks:
        if b.fixed:
            blocks.append(b)
            continue
        cands = tuple(dataclasses.replace(b.candidates[i % b.k], name=f"{b.candidates[i % b.k].name}_{i}")
                      for i in range(k))
        blocks.append(Block(b.name, cands, False, b.role))
    return dataclasses.replace(sp, name=f"tiny-transformer-k{k}", blocks=tuple(blocks))


def default_space() -> SearchSpace:
    return preset("sparse-mlp") if "sparse-mlp" in preset_names() else wide_tiny_transformer(32)


def space_of(name: str | None) -> SearchSpace:
    if name is None:
        return default_space()
    if name.startswith("tiny-transformer-k") and name[18:].isdigit():
        return wide_tiny_transformer(int(name[18:]))
    return resolve_space(name)


def measure(cfg: TrainConfig) -> dict[str, Any]:
    m = train(cfg).metrics
    keys = ("subnets_per_s", "samples_per_s", "makespan_s", "utilization", "stage_utilization", "overhead_share",
            "per_task_overhead_us", "wall_overhead_share", "compute_s", "tasks", "startup_s", "wall_s")
    return {k: m[k] for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default=None, help="preset, JSON file, or tiny-transformer-kK")
    ap.add_argument("--subnets", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shared-layers", default="frozen")
    ap.add_argument("--balance", choices=("cost", "measured"), default="measured")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    space = space_of(args.space)
    configs = [("sequential", 1), ("sequential", 2), ("csp", 2), ("sequential", 4), ("csp", 4)]
    root = Path(tempfile.mkdtemp(prefix="naspipe-speedup-"))
    base: dict[int, TrainConfig] = {}
    for _, stages in configs:
        if stages not in base:
            base[stages] = TrainConfig.create(space, root / "warm", stages=stages, subnets=args.subnets,
                                              seed=args.seed, shared_layers=args.shared_layers, progress=False,
                                              balance=args.balance, threads=args.threads)
    # warm-up: starts the fork server (torch imported once) so no measured run pays for it
    train(base[2].replace(out=root / "warm", sequence=base[2].sequence[:8], overwrite=True))
    runs: dict[str, list[dict[str, Any]]] = {f"{p}@{s}": [] for p, s in configs}
    t0 = time.perf_counter()
    for r in range(args.repeats):
        order = configs[r % len(configs):] + configs[:r % len(configs)]  # rotate: no config always first
        for policy, stages in order:
            cfg = base[stages].replace(out=root / f"{policy}{stages}-{r}", policy=policy)
            runs[f"{policy}@{stages}"].append(measure(cfg))
    median = {k: statistics.median(x["subnets_per_s"] for x in v) for k, v in runs.items()}
    best = {k: max(x["subnets_per_s"] for x in v) for k, v in runs.items()}

    def paired(a: str, b: str) -> float:
        """Median over repeats of the ratio measured within one repeat (runs close in time, similar load)."""
        return statistics.median(x["subnets_per_s"] / y["subnets_per_s"] for x, y in zip(runs[a], runs[b], strict=True))

    def sim_util(policy: str, stages: int) -> float:
        part = partition(space, stages)
        return simulate(RunSpec.of(space, part, UniformStream(space, args.seed, args.subnets), policy)).utilization

    result = {
        "space": space.name, "subnets": args.subnets, "repeats": args.repeats, "seed": args.seed,
        "shared_layers": args.shared_layers, "balance": args.balance, "threads": args.threads,
        "k": sorted({b.k for b in space.blocks if not b.fixed}),
        "partitions": {s: base[s].partition.to_list() for s in sorted(base)},
        "best_subnets_per_s": best,
        "median_subnets_per_s": median,
        # headline: best of the repeats (timeit's convention: the run least disturbed by other load)
        "speedup_2": best["csp@2"] / best["sequential@2"],
        "speedup_2_paired_median": paired("csp@2", "sequential@2"),
        "speedup_2_vs_1_stage": best["csp@2"] / best["sequential@1"],
        "speedup_4": best["csp@4"] / best["sequential@4"],
        "speedup_4_paired_median": paired("csp@4", "sequential@4"),
        "speedup_4_vs_1_stage": best["csp@4"] / best["sequential@1"],
        # what splitting one subnet over 2 processes costs (2 more tasks, 2 messages on its critical path)
        "split_cost_ms_per_subnet": 1000 * (1 / best["sequential@2"] - 1 / best["sequential@1"]),
        "overhead_share_median": {k: statistics.median(x["overhead_share"] for x in v) for k, v in runs.items()},
        "per_task_overhead_us_median": {k: statistics.median(x["per_task_overhead_us"] for x in v)
                                        for k, v in runs.items()},
        "utilization_median": {k: statistics.median(x["utilization"] for x in v) for k, v in runs.items()},
        "simulated_utilization": {f"{p}@{s}": sim_util(p, s) for p, s in configs},
        "target_speedup_2": 1.6,
        "runs": runs,
        "bench_seconds": time.perf_counter() - t0,
    }
    write_result("runtime_speedup", result)


if __name__ == "__main__":
    main()
