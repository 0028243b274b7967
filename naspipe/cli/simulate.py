"""``naspipe simulate``: run a policy through the discrete-event simulator and report its efficiency."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from naspipe.cli.common import UsageError, add_run_arguments, non_negative_float, resolve_run

COMMAND = "simulate"
HELP = "simulate a pipeline schedule on the cost model (no torch, no processes)"
ORDER = 10


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("--jitter", type=non_negative_float("--jitter"), default=0.0,
                   help="relative random jitter of every task duration, in [0, 1) (seeded)")
    p.add_argument("--latency", type=non_negative_float("--latency"), default=0.0,
                   help="seconds per stage-to-stage message")
    p.add_argument("--bandwidth", type=non_negative_float("--bandwidth"), default=0.0,
                   help="bytes/s between stages (0 = unlimited)")
    p.add_argument("--micro-batches", type=int, default=None, help="bsp group size M")
    p.add_argument("--max-pending-w", type=int, default=None, help="csp-bw: most W tasks pending per stage")
    p.add_argument("--trace", default=None, help="write the trace JSON here")
    p.add_argument("--chrome-trace", default=None, help="write a Chrome/Perfetto trace here")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def summarize(cfg: Any, result: Any) -> dict[str, Any]:
    """The metrics of one simulation: makespan, utilisation, bound and efficiency, throughput."""
    from naspipe.bound import lower_bound
    from naspipe.sched.tasks import WEIGHT

    subnets = [cfg.stream[j] for j in range(len(cfg.stream))]
    split = result.schedulers[0].write_kind == WEIGHT
    b = lower_bound(cfg.space, cfg.partition, subnets, result.costs.duration, shared=cfg.shared,
                    split_backward=split, hop=result.costs.transfer())
    ms = result.makespan
    n = len(subnets)
    return {
        "policy": cfg.policy, "space": cfg.space.name, "stages": cfg.partition.stages, "subnets": n,
        "window": cfg.window, "seed": cfg.seed, "shared_layers": str(cfg.shared),
        "makespan": ms, "utilization": result.utilization,
        "stage_utilization": result.trace.stage_utilization(),
        "lower_bound": b.lower_bound, "efficiency": b.lower_bound / ms if ms else 0.0,
        "tight_bound": b.tight_bound, "tight_efficiency": b.tight_bound / ms if ms else 0.0,
        "critical_path": b.critical_path, "max_stage_work": max(b.stage_work),
        "throughput": n / ms if ms else 0.0,
        "samples_per_second": n * result.costs.batch_size / ms if ms else 0.0,
        "decision_us_mean": 1e6 * result.decision_seconds / max(result.decisions, 1),
        "sim_seconds": result.wall_seconds,
    }


def run(args: argparse.Namespace) -> int:
    cfg = resolve_run(args)
    if args.jitter >= 1:
        raise UsageError(f"--jitter must lie in [0, 1), got {args.jitter}")
    from naspipe.sched.policies import PolicyError
    from naspipe.sim import simulate

    opts = {"micro_batches": args.micro_batches, "max_pending_w": args.max_pending_w}
    try:
        result = simulate(cfg.space, cfg.partition, cfg.stream, cfg.policy, window=cfg.window, shared=cfg.shared,
                          jitter=args.jitter, seed=cfg.seed, latency=args.latency,
                          bandwidth=args.bandwidth or float("inf"), policy_options=opts)
    except PolicyError as e:
        raise UsageError(str(e)) from None
    out = summarize(cfg, result)
    if args.trace:
        result.trace.save(Path(args.trace))
    if args.chrome_trace:
        result.trace.save_chrome(Path(args.chrome_trace))
    if args.json:
        print(json.dumps(out))
    else:
        w = sys.stdout.write
        w(f"{out['policy']} on {out['space']}, {out['stages']} stages, {out['subnets']} subnets, "
          f"window {out['window']}, shared layers {out['shared_layers']}\n")
        w(f"  makespan     {out['makespan']:.4f} s   throughput {out['throughput']:.1f} subnets/s\n")
        w(f"  utilization  {out['utilization']:.3f}   per stage "
          + " ".join(f"{u:.2f}" for u in out["stage_utilization"]) + "\n")
        w(f"  lower bound  {out['lower_bound']:.4f} s (critical path {out['critical_path']:.4f}, "
          f"stage work {out['max_stage_work']:.4f})   efficiency {out['efficiency']:.3f}\n")
    return 0
