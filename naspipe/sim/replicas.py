"""Data-parallel replicas in the simulator: task time at batch B/R, the gradient exchange on a stated link,
memory per replica, and a planner that ranks stages x replicas for a device count.

Why it exists: a deeper pipeline does not scale CSP (the causal bound caps it), so a researcher with N devices
should know which ``stages x replicas`` split of them trains fastest before renting them. With ``R`` replicas
(``naspipe train --replicas R``) every stage's replicas run the same schedule on equal shards, so the
simulator models one pipeline whose

* tasks take ``batch_time_scale(B / R, B, alpha)`` of their cost-model time (``naspipe.sim.costs``: a fixed
  share ``alpha`` of a task does not shrink with the batch);
* write task (``B``, or ``W`` with a split backward) also pays the exact gradient exchange: an all-gather
  of the bytes of the subnet's parameters on the stage (its candidates; the fixed blocks too when shared
  layers are trained) over ``R - 1`` ring steps, ``(R - 1) * (latency + bytes / bandwidth)`` on a
  ``LinkModel``; the native ring all-reduce (not bit-comparable with the reference) would take
  ``2 (R - 1) * (latency + bytes / R / bandwidth)``, reported beside it;
* messages between stages carry ``B / R`` samples.

The followers of a stage write in their leader's order (``naspipe.sched.ordered``); with equal shards every
replica has the leader's durations, so the followers run the leader's schedule and one pipeline models all
of them (what the model leaves out: replicas slowed unequally, e.g. by the runtime's ``--jitter-ms``).

The default link is an intra-node NVLink-class link, 300 GB/s per direction and 10 us per message (A100
NVLink 3: 600 GB/s both directions together); pass another ``LinkModel`` for PCIe or a network. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import DEFAULT_POLICY, DEFAULT_WINDOW
from naspipe.sched.registry import PolicyError, get_policy, policy_names
from naspipe.sched.tasks import BACKWARD, WEIGHT, Task
from naspipe.sim import SimOptions, SimResult
from naspipe.sim.costs import DEFAULT_BATCH_ALPHA, CostModel, batch_time_scale
from naspipe.sim.engine import check_link_numbers
from naspipe.spaces.partition import Partition, partition
from naspipe.spaces.shared import SharedLayers
from naspipe.spaces.space import SearchSpace, Subnet, replicas_error


def check_replica_policy(policy: str) -> None:
    """PolicyError (one line) unless ``policy`` trains with replicas > 1 (``Policy.replicas``: the exact
    policies, whose writes a stage's replicas can order by subnet); the runtime refuses the same ones."""
    if not get_policy(policy).replicas:
        exact = ", ".join(n for n in policy_names() if get_policy(n).replicas)
        raise PolicyError(f"replicas > 1 work with the exact policies {exact}, not {str(policy).partition(':')[0]}")


@dataclass(frozen=True)
class LinkModel:
    """The link between the replicas of a stage: bytes/s per direction and seconds per message."""

    bandwidth: float = 300e9
    latency: float = 10e-6

    def __post_init__(self) -> None:  # (0 divided by zero; a negative or NaN one gave a wrong or NaN makespan)
        check_link_numbers(latency=self.latency, bandwidth=self.bandwidth)

    def gather_seconds(self, nbytes: float, replicas: int) -> float:
        """Ring all-gather of ``nbytes`` from each of ``replicas`` (what the exact mode does)."""
        if replicas <= 1:
            return 0.0
        return (replicas - 1) * (self.latency + nbytes / self.bandwidth)

    def allreduce_seconds(self, nbytes: float, replicas: int) -> float:
        """Ring all-reduce of ``nbytes`` (the native mode: reduce-scatter then all-gather of ``1/R`` chunks)."""
        if replicas <= 1:
            return 0.0
        return 2 * (replicas - 1) * (self.latency + nbytes / replicas / self.bandwidth)


DEFAULT_LINK = LinkModel()


class ReplicaCostModel(CostModel):
    """``CostModel`` of one replica of every stage: tasks at batch ``B / R``, the gradient exchange on writes."""

    def __init__(self, space: SearchSpace, part: Partition, subnets: Sequence[Subnet], *, replicas: int,
                 link: LinkModel = DEFAULT_LINK, alpha: float = DEFAULT_BATCH_ALPHA,
                 shared: SharedLayers | None = None, native: bool = False, **kw: Any):
        if (why := replicas_error(space.batch_size, replicas)) is not None:
            raise ValueError(why)
        b = space.batch_size
        super().__init__(space, part, subnets, batch_size=b // replicas,
                         time_scale=kw.pop("time_scale", 1.0) * batch_time_scale(b // replicas, b, alpha), **kw)
        self.replicas, self.link, self.native = replicas, link, native
        self.trains_fixed = shared is not None and shared.mode != "frozen"
        self.write_kind = WEIGHT if self.split_backward else BACKWARD
        self.exchange_total = 0.0  # seconds of gradient exchange over every (stage, subnet), once each

    def exchange_bytes(self, stage: int, j: int) -> int:
        """Bytes of subnet ``j``'s parameters on ``stage`` that its replicas combine."""
        sub = self.subnets[j]
        return sum(self.space.candidate(b, sub[b]).param_bytes for b in self._stage_blocks[stage]
                   if self.trains_fixed or not self.space.blocks[b].fixed)

    def exchange(self, stage: int, j: int) -> float:
        n = self.exchange_bytes(stage, j)
        f = self.link.allreduce_seconds if self.native else self.link.gather_seconds
        return f(n, self.replicas)

    def duration(self, task: Task) -> float:
        cached = task in self._cache
        d = super().duration(task)
        if task.kind == self.write_kind and self.replicas > 1 and not cached:
            x = self.exchange(task.stage, task.subnet)
            self.exchange_total += x
            d += x
            self._cache[task] = d
        return d


def replica_memory(space: SearchSpace, part: Partition, replicas: int, in_flight: Sequence[int],
                   optimizer_copies: int = 1, gathered: bool = True) -> list[int]:
    """Bytes per replica of each stage: its supernet share of weights and ``optimizer_copies`` copies of
    optimizer state (1: SGD momentum, 2: Adam); one subnet's gradients and the ``R`` gathered copies the
    exact exchange holds (its largest candidates; none with ``gathered=False``, the native all-reduce); and
    the activations of its peak subnets in flight at ``B / R`` samples each (the worst candidates)."""
    from naspipe.sim.memory import Footprint

    fp = Footprint(space, part, space.batch_size // replicas)
    gather = replicas if replicas > 1 and gathered else 0
    return [fp.share(s) * (1 + optimizer_copies) + fp.max_params(s) * (1 + gather)
            + fp.act_per_sample(s) * fp.batch * int(in_flight[s]) for s in range(part.stages)]


def peak_in_flight(trace: Any, stages: int, write_kind: str) -> list[int]:
    """Per stage, the most subnets between their forward's start and their write's end in ``trace``."""
    out = []
    for s in range(stages):
        marks = []
        for e in trace.events:
            if e.stage != s:
                continue
            if e.kind == "F":
                marks.append((e.start, 1))
            elif e.kind == write_kind:
                marks.append((e.end, -1))
        cur = best = 0
        for _, d in sorted(marks, key=lambda m: (m[0], m[1])):
            cur += d
            best = max(best, cur)
        out.append(best)
    return out


def simulate_replicas(run: RunSpec, options: SimOptions | None = None, *, link: LinkModel = DEFAULT_LINK,
                      alpha: float = DEFAULT_BATCH_ALPHA) -> SimResult:
    """Simulate ``run.stages x run.replicas`` devices, exchanging gradients as ``run.replica_exchange`` says, on
    ``link`` (``alpha``: the share of a task that does not shrink with the batch); ``options`` as ``simulate``'s,
    less ``costs`` and ``memory`` (the replicas' own cost model is used; no device-memory model). The result's
    ``extra`` holds the replica metrics. PolicyError for a policy that cannot train with replicas > 1
    (``check_replica_policy``)."""
    opts = options or SimOptions()
    if opts.costs is not None or opts.memory is not None:
        raise ValueError("simulate_replicas uses the replicas' own cost model and no device-memory model: "
                         "options.costs and options.memory must be None")
    if run.replicas > 1:
        check_replica_policy(run.policy)
    from naspipe.sched.policies import make_scheduler, stage_specs
    from naspipe.sequences.sequence import ReplayStream
    from naspipe.sim.engine import simulate

    part, native = run.partition, run.replica_exchange == "native"
    private = ReplayStream.materialize(run.stream)
    subnets = [private[j] for j in range(len(private))]
    probe = make_scheduler(run.policy, stage_specs(run.space, part, run.shared)[0], private, run.window,
                           **(opts.policy_options or {}))
    costs = ReplicaCostModel(run.space, part, subnets, replicas=run.replicas, link=link, alpha=alpha,
                             shared=run.shared, native=native, split_backward=probe.write_kind == WEIGHT,
                             jitter=opts.jitter, seed=run.seed, latency=opts.latency, bandwidth=opts.bandwidth)
    result = simulate(replace(run, stream=private), replace(opts, costs=costs))
    flight = peak_in_flight(result.trace, part.stages, costs.write_kind)
    busy = sum(e.end - e.start for e in result.trace.events)
    result.extra.update({
        "replicas": run.replicas, "devices": part.stages * run.replicas, "replica_batch": costs.batch_size,
        "link": {"bandwidth": link.bandwidth, "latency": link.latency},
        "exchange": "native ring all-reduce (not comparable with the reference)" if native else
        "exact all-gather, summed in replica order",
        "exchange_share": costs.exchange_total / busy if busy else 0.0,
        "peak_in_flight": flight,
        "memory_per_replica": replica_memory(run.space, part, run.replicas, flight, gathered=not native),
    })
    return result


def plan(space: SearchSpace | str, devices: int, *, subnets: int = 500, policy: str = DEFAULT_POLICY, seed: int = 0,
         window: int = DEFAULT_WINDOW, shared: SharedLayers | None = None, link: LinkModel = DEFAULT_LINK,
         alpha: float = DEFAULT_BATCH_ALPHA, refuses: Callable[[int], str | None] | None = None,
         refused: list[dict[str, Any]] | None = None, sampler: str | None = None) -> list[dict[str, Any]]:
    """Every ``stages x replicas = devices`` split that can run (stages <= blocks, replicas divide the batch),
    simulated on the same sequence (``sampler``'s: uniform, fair or spread[:BASE], keyed by ``seed``; default the
    runs' default, ``naspipe.sequences.samplers.DEFAULT_SAMPLER``); rows
    ranked by throughput (subnets/s), best first. PolicyError, before
    anything is simulated, for ``devices > 1`` and a policy that cannot train with replicas (its only split,
    ``devices x 1``, is ``naspipe simulate``'s); ValueError (``RunSpecError``) for arguments no run takes.

    ``refuses(replicas)``: why training would refuse that many replicas (a model that cannot run on a shard of
    ``batch / replicas`` samples, e.g. BatchNorm on one), or None; such splits are not ranked but appended to
    ``refused`` as ``{stages, replicas, reason}``, so a plan never ranks first a split ``train`` refuses."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be a whole number >= 1, got {devices!r}")
    from naspipe.sequences.samplers import default_sampler, fixed_sampler, sampler_forms

    sampler = default_sampler() if sampler is None else sampler

    # (RunSpec.create would stand a uniform placeholder in for a run-time sampler's sequence)
    fixed_sampler(sampler, "generates the sequence from training losses; a plan needs one fixed up front "
                           f"({sampler_forms(online=False, last=', ')})", f"sampler {sampler}")
    # (a preset name for the space, counts and a seed checked in one line, as every run's; naspipe.runspec.spec)
    base = RunSpec.create(space, subnets=subnets, seed=seed, policy=policy, window=window,
                          shared_layers=shared or SharedLayers(), sampler=sampler)
    space, shared, stream = base.space, base.shared, base.stream
    if devices > 1:
        try:
            check_replica_policy(policy)
        except PolicyError as e:
            raise PolicyError(f"{e}: a plan ranks stages x replicas splits; simulate its one split with "
                              f"naspipe simulate --stages {devices} --policy {policy}") from None
    from naspipe.sim.plan_choice import needs_plan, planned_policy

    if needs_plan(policy):  # the default ranks every split in plan 0's order (csp-cp's): planning each split
        policy = planned_policy(0)  # would cost a planning budget per split, for a gain too small to reorder them
    rows = []
    for r in range(1, devices + 1):
        p = devices // r
        if devices % r or replicas_error(space.batch_size, r) or p > space.num_blocks:
            continue
        reason = refuses(r) if refuses is not None and r > 1 else None
        if reason is not None:
            if refused is not None:
                refused.append({"stages": p, "replicas": r, "reason": reason})
            continue
        res = simulate_replicas(RunSpec.of(space, partition(space, p), stream, policy, window=window, shared=shared,
                                           seed=seed, replicas=r), link=link, alpha=alpha)
        ms = res.makespan
        rows.append({"stages": p, "replicas": r, "devices": devices, "throughput": subnets / ms if ms else 0.0,
                     "makespan": ms, "utilization": res.utilization, "replica_batch": res.extra["replica_batch"],
                     "exchange_share": res.extra["exchange_share"],
                     "memory_per_replica_max": max(res.extra["memory_per_replica"])})
    rows.sort(key=lambda row: -row["throughput"])
    return rows
