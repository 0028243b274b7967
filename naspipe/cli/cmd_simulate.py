"""``naspipe simulate``: run a policy through the discrete-event simulator and report its efficiency.

With ``--replicas R`` every stage has R data-parallel replicas (``naspipe.sim.replicas``: tasks at batch B/R,
the gradient exchange on a stated link model, memory per replica).

With ``--device-memory`` (or ``--swap``) the run also models each stage's device memory: candidates swapped
between host and device (``--swap predictive|on-demand|resident``), prefetch depth, copy bandwidth, and the
batch the policy can afford; the summary then reports hit rate, stall share, bytes moved and peak bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from naspipe.cli.common import add_run_arguments, non_negative_float, os_refusal, resolve_run
from naspipe.errors import UserError
from naspipe.runspec.few_shot_run import add_few_shot_arguments

COMMAND = "simulate"
HELP = "simulate a pipeline schedule on the cost model (no torch, no processes)"
ORDER = 10


def add_arguments(p: argparse.ArgumentParser) -> None:
    from naspipe.cli.common import add_sampler_argument
    from naspipe.runspec.spec import REPLICA_EXCHANGES

    add_run_arguments(p)
    add_sampler_argument(p, online=False)
    add_few_shot_arguments(p)  # the expanded run (its warm-up's one fence is not simulated: docs/few-shot.md)
    p.add_argument("--jitter", type=non_negative_float("--jitter"), default=0.0,
                   help="relative random jitter of every task duration, in [0, 1) (seeded)")
    p.add_argument("--latency", type=non_negative_float("--latency"), default=0.0,
                   help="seconds per stage-to-stage message")
    p.add_argument("--bandwidth", type=non_negative_float("--bandwidth"), default=0.0,
                   help="bytes/s between stages (0 = unlimited)")
    p.add_argument("--micro-batches", type=int, default=None, help="bsp group size M")
    p.add_argument("--max-pending-w", type=int, default=None, help="csp-bw: most W tasks pending per stage")
    g = p.add_argument_group("device memory (off unless --device-memory or --swap is given)")
    g.add_argument("--device-memory", default=None,
                   help="budget per stage: bytes such as 2GiB or 512MB, or a share of the stage's supernet "
                        "parameters such as 25%%, or 'unlimited'")
    from naspipe.sim.memory import PIN_MODES, SWAP_MODES

    g.add_argument("--swap", default=None, choices=SWAP_MODES,
                   help="predictive (NASPipe: forecast and prefetch), on-demand (vPipe-style: load before, evict "
                        "after each task) or resident (no swapping; the stage share must fit); default predictive")
    g.add_argument("--prefetch-depth", type=int, default=4, help="tasks the predictor forecasts (default 4)")
    g.add_argument("--bandwidth-h2d", default="25GB",
                   help="host-to-device copy bandwidth per stage, bytes/s (default 25GB: PCIe 4.0 x16)")
    g.add_argument("--bandwidth-d2h", default=None, help="device-to-host bandwidth (default: as host-to-device)")
    g.add_argument("--headroom", type=int, default=1,
                   help="predictive: room kept for the layers of this many next subnets, so they can be prefetched "
                        "(0 admits more subnets in flight but prefetches less; default 1)")
    g.add_argument("--pin", default="task", choices=PIN_MODES,
                   help="how long a candidate stays pinned on the device: while a task uses it (task, default: a "
                        "subnet waiting for its backward holds only activations; its layers are fetched again) "
                        "or from a subnet's forward to its update (subnet)")
    g.add_argument("--batch-size", type=int, default=None,
                   help="batch per subnet (default: the largest the policy can afford, at most the space's)")
    g.add_argument("--batch-alpha", type=float, default=None,
                   help="fixed share of a task's time at the space's batch (default 0.1; see sim/costs.py)")
    r = p.add_argument_group("data-parallel replicas (naspipe.sim.replicas)")
    add_link_arguments(r)
    r.add_argument("--replicas", type=int, default=1, metavar="R",
                   help="R replicas of every stage: tasks at batch B/R, gradients exchanged on the link (default 1)")
    r.add_argument("--replica-exchange", choices=REPLICA_EXCHANGES, default="exact",
                   help="exact: all-gather summed in replica order (default); native: the ring all-reduce")
    p.add_argument("--trace", default=None, help="write the trace JSON here")
    p.add_argument("--chrome-trace", default=None, help="write a Chrome/Perfetto trace here")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_link_arguments(g: Any) -> None:
    g.add_argument("--link-bandwidth", default="300GB",
                   help="bytes/s per direction between a stage's replicas (default 300GB: NVLink-class)")
    g.add_argument("--link-latency", type=non_negative_float("--link-latency"), default=10e-6,
                   help="seconds per message between a stage's replicas (default 1e-05)")


def link_from_args(args: argparse.Namespace) -> Any:
    """The ``LinkModel`` of ``--link-bandwidth`` and ``--link-latency``; UserError when bad."""
    from naspipe.inputs.memsize import SizeError, parse_bytes
    from naspipe.sim.replicas import LinkModel

    try:
        bw = parse_bytes(args.link_bandwidth)
    except SizeError as e:  # named as the user typed it
        raise UserError(f"--link-bandwidth: {e}") from None
    if bw <= 0:
        raise UserError("--link-bandwidth must be > 0 bytes/s")
    return LinkModel(float(bw), float(args.link_latency))


def summarize(cfg: Any, result: Any) -> dict[str, Any]:
    """The metrics of one simulation: makespan, utilisation, bound and efficiency, throughput."""
    from naspipe.sequences.conflicts import conflict_stats
    from naspipe.sim.bound import result_bound

    subnets = [cfg.stream[j] for j in range(len(cfg.stream))]
    b = result_bound(result, cfg.space, cfg.partition, subnets, cfg.shared)
    ms = result.makespan
    n = len(subnets)
    return {
        "policy": result.extra.get("plan", {}).get("policy", cfg.policy), "plan": result.extra.get("plan"),
        "space": cfg.space.name, "stages": cfg.partition.stages, "subnets": n,
        "sampler": getattr(cfg, "sampler", None), "sequence": conflict_stats(cfg.space, subnets, cfg.partition.stages),
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
        "batch_size": result.costs.batch_size,
        **_memory_summary(result),
    }


_MEMORY_KEYS = ("swap", "device_memory", "hit_rate", "forward_hit_rate", "stall_share", "memory_wait_share",
                "bytes_moved", "peak_device_bytes", "predictor_accuracy")


def _memory_summary(result: Any) -> dict[str, Any]:
    """The memory metrics (all None when the run did not model memory)."""
    mem = getattr(result, "memory", None)
    if mem is None:
        return {k: None for k in _MEMORY_KEYS}
    full = mem.summary()
    return {k: full[k] for k in _MEMORY_KEYS} | {"memory": full}


def batch_alpha_from_args(args: argparse.Namespace) -> float:
    """``--batch-alpha``, or the cost model's default (``naspipe.sim.costs.DEFAULT_BATCH_ALPHA``); refused outside
    [0, 1). Shared with ``naspipe plan``."""
    from naspipe.sim.costs import DEFAULT_BATCH_ALPHA

    alpha = DEFAULT_BATCH_ALPHA if args.batch_alpha is None else args.batch_alpha
    if not 0 <= alpha < 1:
        raise UserError(f"--batch-alpha must lie in [0, 1), got {alpha}")
    return alpha


def memory_config(args: argparse.Namespace) -> Any:
    """The MemoryConfig the memory flags ask for, or None when memory is not modelled."""
    if args.device_memory is None and args.swap is None:
        return None
    from naspipe.inputs.memsize import parse_budget, parse_bytes
    from naspipe.sim.memory import MemoryConfig

    budget = parse_budget(args.device_memory)
    h2d = parse_bytes(args.bandwidth_h2d)
    d2h = parse_bytes(args.bandwidth_d2h) if args.bandwidth_d2h is not None else None
    if h2d <= 0 or (d2h is not None and d2h <= 0):
        raise UserError("copy bandwidths must be > 0 bytes/s")
    if args.prefetch_depth < 1:
        raise UserError(f"--prefetch-depth must be >= 1, got {args.prefetch_depth}")
    if args.headroom < 0:
        raise UserError(f"--headroom must be >= 0, got {args.headroom}")
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    alpha = batch_alpha_from_args(args)
    return MemoryConfig(device_memory=budget, swap=args.swap or "predictive", prefetch_depth=args.prefetch_depth,
                        bandwidth_h2d=float(h2d), bandwidth_d2h=float(d2h) if d2h else None,
                        batch_size=args.batch_size, batch_alpha=alpha, headroom=args.headroom,
                        pin=args.pin)


def run(args: argparse.Namespace) -> int:
    cfg, mem, link = _inputs(args)
    result = _simulate(args, cfg, mem, link)
    out = summarize(cfg, result)
    replicas = args.replicas
    out["replicas"], out["devices"] = replicas, cfg.partition.stages * replicas
    if replicas > 1:  # a subnet is the whole batch, split over the replicas
        out["samples_per_second"] *= replicas
        out["batch_size"] = cfg.space.batch_size
        out.update({k: result.extra[k] for k in ("replica_batch", "link", "exchange", "exchange_share",
                                                 "memory_per_replica")})
    result.trace.meta["sampler"] = cfg.sampler  # a report rebuilds the sequence from the seed and the sampler
    if args.trace:
        with os_refusal(f"cannot write {args.trace}"):
            result.trace.save(Path(args.trace))
    if args.chrome_trace:
        with os_refusal(f"cannot write {args.chrome_trace}"):
            result.trace.save_chrome(Path(args.chrome_trace))
    unit_costs = getattr(cfg.space.model, "profiled", None) is False  # a user supernet not profiled yet
    out["time_unit"] = "unit" if unit_costs else "s"  # unit costs are no seconds: never print them as such
    if args.json:
        print(json.dumps(out))
    else:
        _print_summary(out, link, unit_costs)
    if unit_costs:
        print(f"naspipe: note: unit costs; measure them with naspipe profile --space {args.space}", file=sys.stderr)
    return 0


def _inputs(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``(run description, memory config or None, link)`` from the arguments; a UserError (one line) if bad."""
    from naspipe.cli.common import fixed_sampler_arg
    from naspipe.sequences.samplers import sampler_forms
    from naspipe.spaces.space import replicas_error

    fixed_sampler_arg(args, "generates the sequence from training losses; the simulator needs a sequence fixed up "
                            f"front ({sampler_forms(online=False, last=', ')}, or --sequence)", args.sequence)
    cfg = resolve_run(args, probe=False)  # names and costs only: nothing is built, no process started
    if args.jitter >= 1:
        raise UserError(f"--jitter must lie in [0, 1), got {args.jitter}")
    mem = memory_config(args)
    for flag, path in (("--trace", args.trace), ("--chrome-trace", args.chrome_trace)):
        if path and not Path(path).parent.is_dir():
            raise UserError(f"{flag}: cannot write {path}: directory {str(Path(path).parent)!r} does not exist")
    replicas = args.replicas
    if (why := replicas_error(cfg.space.batch_size, replicas)) is not None:
        raise UserError(f"--{why} of {cfg.space.name!r}")
    if replicas == 1 and args.replica_exchange != "exact":
        raise UserError("--replica-exchange native only applies with --replicas > 1")  # as train refuses it
    if replicas > 1 and mem is not None:
        raise UserError("--replicas > 1 cannot be combined with the device-memory model (--device-memory, --swap)")
    return cfg, mem, link_from_args(args)


def _simulate(args: argparse.Namespace, cfg: Any, mem: Any, link: Any) -> Any:
    """The simulation the arguments ask for: with replicas, or one pipeline (with the memory model or not)."""
    from naspipe.sim import SimOptions, simulate

    opts = {"micro_batches": args.micro_batches, "max_pending_w": args.max_pending_w}
    sim = SimOptions(jitter=args.jitter, latency=args.latency, bandwidth=args.bandwidth or float("inf"),
                     policy_options=opts)
    if args.replicas == 1:
        return simulate(cfg, dataclasses.replace(sim, memory=mem))
    from naspipe.sim.replicas import simulate_replicas

    alpha = batch_alpha_from_args(args)
    return simulate_replicas(dataclasses.replace(cfg, replicas=args.replicas, replica_exchange=args.replica_exchange),
                             sim, link=link, alpha=alpha)


def _print_summary(out: dict[str, Any], link: Any, unit_costs: bool) -> None:
    """The human-readable summary of ``out`` (``summarize``'s metrics) on stdout."""
    s, per_s = (" units", " per unit") if unit_costs else (" s", "/s")
    w = sys.stdout.write
    w(f"{out['policy']} on {out['space']}, {out['stages']} stages, {out['subnets']} subnets, "
      f"window {out['window']}, shared layers {out['shared_layers']}"
      + (", unit costs (not measured)" if unit_costs else "") + "\n")
    w(f"  makespan     {out['makespan']:.4f}{s}   throughput {out['throughput']:.1f} subnets{per_s}\n")
    q = out["sequence"]
    w(f"  sequence     sampler {out['sampler']}: {q['conflicts']} of {out['subnets']} subnets share a candidate "
      f"with a subnet fewer than {q['in_flight']} places before; {_reuse_text(q)}\n")
    from naspipe.inputs.memsize import format_bytes

    if out["replicas"] > 1:
        w(f"  replicas     {out['replicas']} per stage ({out['devices']} devices), batch {out['replica_batch']} each; "
          f"{out['exchange']} on {link.bandwidth / 1e9:g} GB/s + {link.latency * 1e6:g} us: "
          f"{100 * out['exchange_share']:.1f}% of busy time; memory per replica "
          + " ".join(format_bytes(b) for b in out["memory_per_replica"]) + "\n")
    w(f"  utilization  {out['utilization']:.3f}   per stage "
      + " ".join(f"{u:.2f}" for u in out["stage_utilization"]) + "\n")
    w(f"  lower bound  {out['lower_bound']:.4f}{s} (critical path {out['critical_path']:.4f}, "
      f"stage work {out['max_stage_work']:.4f})   efficiency {out['efficiency']:.3f}\n")
    if out["hit_rate"] is not None:
        w(f"  memory       {out['swap']}, batch {out['batch_size']}, "
          f"{out['samples_per_second']:.1f} samples{per_s}, hit rate {out['hit_rate']:.4f} "
          f"(forwards {out['memory']['forward_hit_rate']:.4f}), stall {100 * out['stall_share']:.2f}%, "
          f"moved {format_bytes(out['bytes_moved'])}, peak "
          + " ".join(format_bytes(b) for b in out["peak_device_bytes"]) + "\n")


def _reuse_text(q: dict[str, Any]) -> str:
    """The sequence's reuse distances; "no candidate reused" where no two subnets share one (1 subnet)."""
    if q["min_reuse_distance"] is None:
        return "no candidate reused"
    return f"reuse distance min {q['min_reuse_distance']}, mean {q['mean_reuse_distance']:.1f}"
