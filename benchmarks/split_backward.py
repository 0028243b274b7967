"""Issue 9's runtime measurement: ``csp-bw`` (split backward) against ``csp`` through the same runtime.

Real processes, real training (``naspipe.runtime.train``), the same subnet sequence for both policies, on
this machine. For each space (default: ``sparse-mlp`` and ``tiny-transformer``), 2 stages, and each partition
(``--balance``: the cost model's and one balanced on block costs measured here), the two policies run in
alternating order ``--repeats`` times (so machine load hits them alike); reported per space and partition:
median subnets/s of each policy, ``ratio`` = median csp-bw / median csp, the median and quartiles of the
ratios taken within each repeat (``ratio_paired_median``, ``ratio_paired_quartiles``: on a shared machine
the spread between repeats can exceed the effect), utilisation, per-task overhead, and the simulator's
utilisation for both policies on the same sequence and cost model. Both runs must pass ``verify`` against
each other's losses (same bits), which the script checks.

What to expect on a CPU box: the split gains where a stage would otherwise idle waiting for a whole downstream
backward (the simulator's utilisation rises), but it costs one extra task per subnet and stage. ``B`` is one
``autograd.grad`` for the stage input that runs no weight-gradient kernel and ``W`` computes the weight gradients of
Linear, LayerNorm and Conv explicitly (``naspipe.runtime.split_backward.splitgrad``,
``naspipe.runtime.split_backward.wgrad``), so B + W cost one backward's kernels plus Python dispatch per layer call
in ``W`` (a full backward dispatches in C++); how the backward divides between them depends on the model: on
tiny-transformer's second stage most of it is input gradient (attention, softmax, norms), so ``B`` stays most of a
backward and the critical path shortens little; on sparse-mlp the weight half is the larger.
``measured_stage_costs_s`` holds the per-stage CPU medians (F, full backward, F with the layer capture, B, W). The
row also carries the simulator's prediction from these measured costs (``simulated_ratio_measured_costs``, csp-bw
speed / csp speed) beside the cost model's (``simulated_ratio``, utilisation ratio), so prediction and measurement
can be compared, and the
most any split could buy here: the simulator on the same costs with W exactly the weight-gradient share of a
full backward (full - B) and F without the capture (``simulated_ratio_perfect_split``).

Run: ``.venv/bin/python benchmarks/split_backward.py [--spaces sparse-mlp,tiny-transformer] [--subnets 150]
[--repeats 4] [--balance cost,measured]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import write_result

from naspipe.models import build_stage, input_of, make_batch, target_of
from naspipe.runfolder.results import verify
from naspipe.runspec.spec import RunSpec
from naspipe.runtime import TrainConfig, train
from naspipe.runtime.split_backward.splitgrad import BlockTargets, LayerCapture, input_grad, weight_grads
from naspipe.sched.tasks import BACKWARD, FORWARD, Task
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import resolve_space

POLICIES = ("csp", "csp-bw")


def measure_stage_costs(space: Any, part: Any, seed: int, shared: str, samples: int = 12) -> list[dict[str, float]]:
    """CPU seconds per stage of F and one full backward, and of F with the layer capture and the split B and
    W as the executor runs them (``naspipe.runtime.split_backward.splitgrad``; stage 0: B computes nothing, W one plain
    backward); medians over ``samples`` subnets after two warm-ups, one thread."""
    torch.set_num_threads(1)
    return [_stage_costs(space, part, s, seed, parse_shared(shared), samples) for s in range(part.stages)]


def _stage_costs(space: Any, part: Any, s: int, seed: int, sh: Any, samples: int) -> dict[str, float]:
    lo, hi = part.bounds[s]
    head = build_stage(space, range(0, lo), seed, sh) if lo > 0 else None
    model = build_stage(space, range(lo, hi), seed, sh)
    last = hi == space.num_blocks
    targets = BlockTargets(model)
    stream = UniformStream(space, seed, samples + 2)
    rows: dict[str, list[float]] = {"F": [], "full": [], "F_split": [], "B": [], "W": []}

    def fwd(x0: Any, sub: Any, batch: Any, capture: LayerCapture | None = None, blocks: list | None = None,
            layers: list | None = None) -> Any:
        x = x0 if head is None else x0.detach().clone().requires_grad_(True)
        if capture is not None:
            capture.active = layers
        try:
            y = model(x, sub, capture=blocks)
        finally:
            if capture is not None:
                capture.active = None
        return x, (model.loss(y, target_of(space, batch)) if last else y)

    for j in range(samples + 2):
        sub = stream[j]
        batch = make_batch(space, seed, j)
        x0 = input_of(space, batch)
        with torch.no_grad():
            if head is not None:
                x0 = head(x0, sub)
            g = None if last else torch.ones(model(x0, sub).shape)
        c0 = time.process_time()
        x, y = fwd(x0, sub, batch)
        c1 = time.process_time()
        torch.autograd.backward(y, g)
        c2 = time.process_time()
        if head is None:  # stage 0: B has nothing to send, W is one plain backward
            f_t, b_t, w_t = c1 - c0, 0.0, c2 - c1
        else:
            blocks: list = []
            layers: list = []
            capture = LayerCapture(model)  # (csp's F runs without the hooks: they are there only for this)
            with torch.no_grad():  # the same warm caches as csp's F had (its input was computed just before)
                model(x0, sub)
            c2b = time.process_time()
            x, y = fwd(x0, sub, batch, capture, blocks, layers)
            c3 = time.process_time()
            _, seen = input_grad(y, x, g, [*blocks, *(c.out for c in layers)])
            c4 = time.process_time()
            weight_grads(blocks, seen[:len(blocks)], targets.targets(sub, None), layers, seen[len(blocks):])
            f_t, b_t, w_t = c3 - c2b, c4 - c3, time.process_time() - c4
            capture.remove()
        if j >= 2:
            for k, v in (("F", c1 - c0), ("full", c2 - c1), ("F_split", f_t), ("B", b_t), ("W", w_t)):
                rows[k].append(v)
    return {k: statistics.median(v) for k, v in rows.items()}


class MeasuredCosts:
    """Per-stage measured durations for the simulator (the same for every subnet): either F and one full
    backward (``csp``) or F with the layer capture and the split B and W (``csp-bw``)."""

    def __init__(self, stages: list[dict[str, float]], split: bool, batch_size: int):
        self.stages, self.split, self.batch_size = stages, split, batch_size

    def duration(self, task: Task) -> float:
        c = self.stages[task.stage]
        if task.kind == FORWARD:
            return c["F_split"] if self.split else c["F"]
        if task.kind == BACKWARD:
            return c["B"] if self.split else c["full"]
        return c["W"]

    def transfer(self) -> float:
        return 0.0


def perfect_split(measured: list[dict[str, float]]) -> list[dict[str, float]]:
    """The measured costs of a split without overhead: F without the layer capture, B as measured and W what
    the weight gradients cost inside one full backward (full - B; the whole backward on a stage whose input
    needs no gradient). The same work as csp's, only divided: the simulator on these is the most a split
    backward can buy on this model and machine."""
    return [{**c, "F_split": c["F"], "W": max(0.0, c["full"] - c["B"])} for c in measured]


def simulated_ratio(space: Any, part: Any, args: argparse.Namespace, costs: list[dict[str, float]]) -> float:
    """csp-bw speed / csp speed in the simulator on per-stage costs ``costs`` (csp runs F and the full backward)."""
    span = {p: simulate(RunSpec.of(space, part, UniformStream(space, args.seed, args.subnets), p),
                        SimOptions(costs=MeasuredCosts(costs, p == "csp-bw",
                                                       space.batch_size))).makespan for p in POLICIES}
    return span["csp"] / span["csp-bw"]


def measure(cfg: TrainConfig) -> dict[str, Any]:
    m = train(cfg).metrics
    keys = ("subnets_per_s", "makespan_s", "utilization", "overhead_share", "per_task_overhead_us", "tasks",
            "wall_s")
    return {k: m[k] for k in keys if k in m}


def bench_space(name: str, balance: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    space = resolve_space(name)
    base = TrainConfig.create(space, root / f"{name}-warm", stages=args.stages, subnets=args.subnets,
                              seed=args.seed, shared_layers=args.shared_layers, progress=False,
                              threads=args.threads, balance=balance)
    # warm-up: starts the fork server (torch imported once) so no measured run pays for it
    train(base.replace(out=root / f"{name}-warm", sequence=base.sequence[:8], overwrite=True))
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in POLICIES}
    same_bits = True
    for r in range(args.repeats):
        order = POLICIES if r % 2 == 0 else POLICIES[::-1]
        outs = {}
        for policy in order:
            cfg = base.replace(out=root / f"{name}-{balance}-{policy}-{r}", policy=policy)
            runs[policy].append(measure(cfg))
            outs[policy] = cfg.out
        same_bits &= verify(outs["csp-bw"], outs["csp"])[0]
    med = {p: statistics.median(x["subnets_per_s"] for x in v) for p, v in runs.items()}
    paired = [b["subnets_per_s"] / c["subnets_per_s"] for b, c in zip(runs["csp-bw"], runs["csp"], strict=True)]
    part = base.partition
    sim = {p: simulate(RunSpec.of(space, part, UniformStream(space, args.seed, args.subnets),
                                  p)).utilization for p in POLICIES}
    measured = measure_stage_costs(space, part, args.seed, args.shared_layers)
    return {
        "space": name, "stages": args.stages, "subnets": args.subnets, "repeats": args.repeats,
        "balance": balance, "partition": base.partition.to_list(),
        "median_subnets_per_s": med,
        "ratio": med["csp-bw"] / med["csp"],
        "ratio_paired_median": statistics.median(paired),
        "ratio_paired_quartiles": statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3,
        "median_utilization": {p: statistics.median(x["utilization"] for x in v) for p, v in runs.items()},
        "median_per_task_overhead_us": {p: statistics.median(x["per_task_overhead_us"] for x in v)
                                        for p, v in runs.items() if all("per_task_overhead_us" in x for x in v)},
        "simulated_utilization": sim,
        "simulated_ratio": sim["csp-bw"] / sim["csp"],
        "measured_stage_costs_s": measured,
        "simulated_ratio_measured_costs": simulated_ratio(space, part, args, measured),
        "simulated_ratio_perfect_split": simulated_ratio(space, part, args, perfect_split(measured)),
        "same_bits_as_csp": same_bits,
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spaces", default="sparse-mlp,tiny-transformer")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--subnets", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shared-layers", default="frozen")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--balance", default="cost,measured",
                    help="partitions to run on, comma-separated: the cost model's, and/or one balanced on block "
                         "costs measured on this machine (default: both)")
    args = ap.parse_args()
    balances = [b.strip() for b in args.balance.split(",") if b.strip()]
    if not balances or any(b not in ("cost", "measured") for b in balances):
        ap.error(f"--balance: expected cost and/or measured, got {args.balance!r}")
    if args.repeats < 1:
        ap.error(f"--repeats: at least 1 (a median of each policy), got {args.repeats}")
    root = Path(tempfile.mkdtemp(prefix="naspipe-splitbw-"))
    t0 = time.perf_counter()
    rows = [bench_space(s.strip(), b, args, root) for s in args.spaces.split(",") if s.strip() for b in balances]
    write_result("split_backward", {
        "rows": rows, "shared_layers": args.shared_layers, "threads": args.threads,
        "ratios": {f"{r['space']} ({r['balance']} partition)": r["ratio"] for r in rows},
        "bench_seconds": time.perf_counter() - t0,
    })


if __name__ == "__main__":
    main()
