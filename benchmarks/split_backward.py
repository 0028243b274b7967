"""Issue 9's runtime measurement: ``csp-bw`` (split backward) against ``csp`` through the same runtime.

Real processes, real training (``naspipe.runtime.train``), the same subnet sequence for both policies, on
this machine. For each space (default: ``sparse-mlp`` and ``tiny-transformer``), 2 stages, the two policies
run in alternating order ``--repeats`` times (so machine load hits them alike); reported per space:
median subnets/s of each policy, ``ratio`` = median csp-bw / median csp, the median of the ratios taken
within each repeat (``ratio_paired_median``), utilisation, per-task overhead, and the simulator's
utilisation for both policies on the same sequence and cost model. Both runs must pass ``verify`` against
each other's losses (same bits), which the script checks.

What to expect on a CPU box: the split gains where a stage would otherwise idle waiting for a whole
downstream backward (the simulator's utilisation rises), but it costs one extra task per subnet and stage
(scheduling, one more event line) and, off stage 0, one ``autograd.grad`` call per weight-owning layer call
in ``W`` instead of one backward. Each such call walks the whole autograd graph reachable from the layer's
output (back to the stage input) before running the few kernels it needs: measured with
``time.process_time`` on tiny-transformer (2 stages, 43 layer calls on the second stage) a call costs
about 45 us for the first layer and about 215 us for the last, so W costs more CPU than the kernels of a
whole backward of these tiny models (B about 6 ms and W about 10 ms of CPU, against about 6.5 ms for one
full backward). The presets here are overhead-bound; models with larger layers amortise the per-call cost.

Run: ``.venv/bin/python benchmarks/split_backward.py [--spaces sparse-mlp,tiny-transformer] [--subnets 150]
[--repeats 2]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import write_result

from naspipe.partition import partition
from naspipe.results import verify
from naspipe.runtime import TrainConfig, train
from naspipe.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.space import resolve_space

POLICIES = ("csp", "csp-bw")


def measure(cfg: TrainConfig) -> dict[str, Any]:
    m = train(cfg).metrics
    keys = ("subnets_per_s", "makespan_s", "utilization", "overhead_share", "per_task_overhead_us", "tasks",
            "wall_s")
    return {k: m[k] for k in keys if k in m}


def bench_space(name: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    space = resolve_space(name)
    base = TrainConfig.create(space, root / f"{name}-warm", stages=args.stages, subnets=args.subnets,
                              seed=args.seed, shared_layers=args.shared_layers, progress=False,
                              threads=args.threads)
    # warm-up: starts the fork server (torch imported once) so no measured run pays for it
    train(base.replace(out=root / f"{name}-warm", sequence=base.sequence[:8], overwrite=True))
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in POLICIES}
    same_bits = True
    for r in range(args.repeats):
        order = POLICIES if r % 2 == 0 else POLICIES[::-1]
        outs = {}
        for policy in order:
            cfg = base.replace(out=root / f"{name}-{policy}-{r}", policy=policy)
            runs[policy].append(measure(cfg))
            outs[policy] = cfg.out
        same_bits &= verify(outs["csp-bw"], outs["csp"])[0]
    med = {p: statistics.median(x["subnets_per_s"] for x in v) for p, v in runs.items()}
    part = partition(space, args.stages)
    sim = {p: simulate(space, part, UniformStream(space, args.seed, args.subnets), p).utilization for p in POLICIES}
    return {
        "space": name, "stages": args.stages, "subnets": args.subnets, "repeats": args.repeats,
        "partition": base.partition.to_list(),
        "median_subnets_per_s": med,
        "ratio": med["csp-bw"] / med["csp"],
        "ratio_paired_median": statistics.median(
            b["subnets_per_s"] / c["subnets_per_s"] for b, c in zip(runs["csp-bw"], runs["csp"], strict=True)),
        "median_utilization": {p: statistics.median(x["utilization"] for x in v) for p, v in runs.items()},
        "median_per_task_overhead_us": {p: statistics.median(x["per_task_overhead_us"] for x in v)
                                        for p, v in runs.items() if all("per_task_overhead_us" in x for x in v)},
        "simulated_utilization": sim,
        "simulated_ratio": sim["csp-bw"] / sim["csp"],
        "same_bits_as_csp": same_bits,
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spaces", default="sparse-mlp,tiny-transformer")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--subnets", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shared-layers", default="frozen")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="naspipe-splitbw-"))
    t0 = time.perf_counter()
    rows = [bench_space(s.strip(), args, root) for s in args.spaces.split(",") if s.strip()]
    write_result("split_backward", {
        "rows": rows, "shared_layers": args.shared_layers, "threads": args.threads,
        "ratios": {r["space"]: r["ratio"] for r in rows},
        "bench_seconds": time.perf_counter() - t0,
    })


if __name__ == "__main__":
    main()
