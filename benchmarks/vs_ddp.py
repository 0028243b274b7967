"""CSP beside the peer researchers use today: plain data parallelism (DDP) over the whole supernet.

Same supernet, same subnet sequence, same batches (``make_batch(space, seed, j)``, each rank or replica
computing its fixed shard) for every configuration; measured in rotating order ``--repeats`` times so machine
load hits them alike; headline ratios compare the best run of each (timeit's convention), with the median of
the ratios within each repeat beside them. Configurations (``naspipe.peers.ddp``, ``naspipe.runtime``):

* ``one``: one process, the whole supernet, the whole batch (the baseline of every ratio);
* ``ddp_used@R``: R ranks, one bucketed all-reduce of the used parameters' gradients per subnet;
* ``ddp_wrapper@R``: R ranks under torch's ``DistributedDataParallel(find_unused_parameters=True)``,
  which all-reduces the whole supernet every step (as users run a supernet under DDP);
* ``csp@P``: the CSP pipeline on P stages (``naspipe train``);
* ``csp@PxR``: P stages x R data-parallel replicas (``naspipe train --replicas R``), P*R processes.

Rates are subnets/s of the training loop (start-up excluded on every side: DDP from its first barrier,
CSP from its start barrier). Timing ratios are meaningless on a loaded machine: run it where the load
average is below 1 and the machine has at least P*R free cores.

Run: ``.venv/bin/python benchmarks/vs_ddp.py [--space sparse-mlp] [--subnets 200] [--repeats 3] [--ranks 2]
[--stages 2] [--replicas 2]``; prints the JSON and writes ``benchmarks/results/vs_ddp.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import write_result

from naspipe.peers.ddp import run_ddp
from naspipe.runtime import TrainConfig, train
from naspipe.sequences.sequence import UniformStream
from naspipe.spaces.space import resolve_space


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="sparse-mlp")
    ap.add_argument("--subnets", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=2, help="DDP ranks R")
    ap.add_argument("--stages", type=int, default=2, help="CSP stages P")
    ap.add_argument("--replicas", type=int, default=2, help="CSP replicas for the P x R row (1: leave it out)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()

    space = resolve_space(args.space)
    stream = UniformStream(space, args.seed, args.subnets)
    subnets = [stream[j] for j in range(args.subnets)]
    root = Path(tempfile.mkdtemp(prefix="naspipe-vs-ddp-"))
    csp = TrainConfig.create(space, root / "csp", stages=args.stages, subnets=args.subnets, seed=args.seed,
                             policy="csp", progress=False, threads=args.threads, timeout=args.timeout,
                             shared_layers="frozen")  # as measured (the old default)
    devices = {"one": 1, f"ddp_used@{args.ranks}": args.ranks, f"ddp_wrapper@{args.ranks}": args.ranks,
               f"csp@{args.stages}": args.stages}
    if args.replicas > 1:
        devices[f"csp@{args.stages}x{args.replicas}"] = args.stages * args.replicas

    def measure(name: str, r: int) -> dict[str, Any]:
        if name == "one":
            return run_ddp(space, subnets, ranks=1, seed=args.seed, threads=args.threads, timeout=args.timeout,
                           workdir=root)
        if name.startswith("ddp_"):
            mode = name[4:].split("@")[0]
            return run_ddp(space, subnets, ranks=args.ranks, mode=mode, seed=args.seed, threads=args.threads,
                           timeout=args.timeout, workdir=root)
        reps = args.replicas if "x" in name else 1
        m = train(csp.replace(out=root / f"{name}-{r}", replicas=reps, overwrite=True)).metrics
        return {k: m[k] for k in ("subnets_per_s", "makespan_s", "utilization", "wall_s", "startup_s")}

    # warm-up: the fork server (the stages' and the DDP ranks') imports torch once before anything is timed
    train(csp.replace(out=root / "warm", sequence=csp.sequence[:4], overwrite=True))
    run_ddp(space, subnets[:2], ranks=1, seed=args.seed, workdir=root, timeout=args.timeout)
    names = list(devices)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in names}
    t0 = time.perf_counter()
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate: no config always first
            runs[name].append(measure(name, r))
    best = {k: max(x["subnets_per_s"] for x in v) for k, v in runs.items()}
    paired = {k: statistics.median(x["subnets_per_s"] / y["subnets_per_s"]
                                   for x, y in zip(runs[k], runs["one"], strict=True)) for k in names}
    write_result("vs_ddp", {
        "space": space.name, "subnets": args.subnets, "repeats": args.repeats, "seed": args.seed,
        "threads": args.threads, "devices": devices,
        "best_subnets_per_s": best,
        "ratio_vs_one": {k: best[k] / best["one"] for k in names},  # the README table
        "ratio_vs_one_paired_median": paired,
        "runs": runs, "bench_seconds": time.perf_counter() - t0,
    })


if __name__ == "__main__":
    main()
