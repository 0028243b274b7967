"""Planning device memory: per-stage budgets, their validation and the batch each policy can afford.

Why it exists: before a run, a budget must hold what the policy keeps in flight (``policy_in_flight``, read
from the ``Policy`` declaration) or the run is refused with one line (``MemoryBudgetError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from naspipe.inputs.memsize import SizeError, format_bytes
from naspipe.sched.registry import parse_policy
from naspipe.sim.memory.footprint import Footprint
from naspipe.sim.memory.settings import PIN_MODES, SWAP_MODES, MemoryBudgetError, MemoryConfig
from naspipe.spaces.partition import Partition
from naspipe.spaces.space import SearchSpace


# ---- planning: budgets, validation and the batch each policy can afford -------------------------
@dataclass(frozen=True)
class MemoryPlan:
    budgets: tuple[int | None, ...]
    batch_size: int
    stage_param_bytes: tuple[int, ...]
    note: str


def policy_in_flight(policy: str, stages: int, stage: int, options: dict[str, Any] | None = None) -> int:
    """Subnets a static policy must hold in flight on ``stage`` to make progress at full speed.

    ``bsp``: the whole group of ``M`` micro-batches (all forwards before any backward); 1F1B (``asp``,
    ``pipedream``, ``2bw``, ``pipemare``, ``pipeoptim``): ``P - s``; the CSP family adapts to memory through
    the admission gate and needs only one.
    """
    pol, text = parse_policy(policy)  # declared by the Policy; an unknown policy fails here
    kind = pol.in_flight
    if kind == "group":
        return int(text.get("micro_batches") or (options or {}).get("micro_batches") or 4)
    if kind == "pipeline":  # 1F1B, the asynchronous baselines included
        return stages - stage
    return 1


# Capping CSP's in-flight subnets per stage (the admission gate with an activation-only budget) costs
# little once four fit: with 1 / 2 / 3 / 4 / 5 / 6 subnets in flight, naspipe-k96 on 4 stages keeps
# 0.38 / 0.67 / 0.87 / 0.96 / 0.98 / 0.99 of its uncapped throughput and naspipe-k48 on 8 stages
# 0.47 / 0.79 / 0.94 / 0.98 / 0.99 / 0.99 (1,000 subnets; benchmarks/memory.py measures this curve).
# When a waiting subnet holds only its activations (``pin="task"``) a fifth slot is cheap, so the batch
# is chosen for five.
CSP_SLOTS = 4
CSP_SLOTS_PIN_TASK = 5


def csp_target_in_flight(stages: int, stage: int, slots: int = CSP_SLOTS) -> int:
    """How many subnets a CSP stage should be able to hold for a batch to count as affordable.

    ``P - s`` is what a 1F1B pipeline keeps in flight on stage ``s``, one more lets CSP run ahead past a
    causally blocked subnet, and beyond ``slots`` the measured gain is small.
    """
    return max(1, min(slots, stages - stage + 1))


def plan_memory(space: SearchSpace, part: Partition, policy: str, cfg: MemoryConfig,
                options: dict[str, Any] | None = None) -> MemoryPlan:
    """Resolve budgets, validate them and choose the batch; raises ``MemoryBudgetError`` with one clear line."""
    if cfg.swap not in SWAP_MODES:
        raise MemoryBudgetError(f"unknown swap mode {cfg.swap!r}; choose one of {', '.join(SWAP_MODES)}")
    if cfg.pin not in PIN_MODES:
        raise MemoryBudgetError(f"unknown pin mode {cfg.pin!r}; choose one of {', '.join(PIN_MODES)}")
    if cfg.prefetch_depth < 1:
        raise MemoryBudgetError(f"prefetch depth must be >= 1, got {cfg.prefetch_depth}")
    for name, bw in (("host-to-device", cfg.bandwidth_h2d), ("device-to-host", cfg.bandwidth_d2h)):
        if bw is not None and not bw > 0:
            raise MemoryBudgetError(f"{name} bandwidth must be > 0 bytes/s, got {bw}")
    if cfg.headroom < 0:
        raise MemoryBudgetError(f"headroom must be >= 0, got {cfg.headroom}")
    if not 0 <= cfg.batch_alpha < 1:
        raise MemoryBudgetError(f"batch alpha must lie in [0, 1), got {cfg.batch_alpha}")
    b0 = space.batch_size
    bmax = cfg.batch_size if cfg.batch_size is not None else b0
    if bmax < 1:
        raise MemoryBudgetError(f"batch size must be >= 1, got {bmax}")
    P = part.stages
    fp = Footprint(space, part, 1)
    shares = tuple(fp.share(s) for s in range(P))
    try:
        budgets = cfg.stage_budgets(shares)
    except SizeError as e:
        raise MemoryBudgetError(str(e)) from None
    fixed_batch = cfg.batch_size is not None
    fits: list[int] = []
    for s in range(P):
        B = budgets[s]
        if B is None:
            fits.append(bmax)
            continue
        act1 = fp.act_per_sample(s)
        inflight = policy_in_flight(policy, P, s, options)
        where = f"stage {s}: budget {format_bytes(B)}"
        csp_family = inflight == 1 and not fixed_batch and act1 > 0
        if cfg.swap == "resident":
            room = B - shares[s]
            if room < inflight * act1:
                raise MemoryBudgetError(
                    f"{where} cannot hold the stage's supernet share {format_bytes(shares[s])} plus "
                    f"{inflight} activation(s) of one sample ({format_bytes(inflight * act1)}) in resident mode; "
                    "use a larger --device-memory or a swapping mode")
            fit = room // (inflight * act1) if act1 else bmax
            per_subnet, fixed_room = 0.0, float(shares[s])
        else:
            base = fp.fixed_params(s) + inflight * fp.max_choice_params(s)
            if B < base + inflight * act1:
                what = "one subnet's layers" if inflight == 1 else f"{inflight} subnets' layers (in flight together)"
                raise MemoryBudgetError(
                    f"{where} is smaller than {what} ({format_bytes(base)}) plus "
                    f"{'one activation' if inflight == 1 else 'their activations'} of one sample "
                    f"({format_bytes(inflight * act1)})")
            fit = (B - base) // (inflight * act1) if act1 else bmax
            # room to prefetch the next subnets' layers into (predictive), shared fixed blocks counted once
            prefetch_room = cfg.headroom * fp.mean_choice_params(s) if cfg.swap == "predictive" else 0.0
            if cfg.pin == "task":  # a waiting subnet holds only activations; one task's layers are in use
                per_subnet, fixed_room = 0.0, fp.fixed_params(s) + fp.mean_choice_params(s) + prefetch_room
            else:
                per_subnet, fixed_room = fp.mean_choice_params(s), fp.fixed_params(s) + prefetch_room
        if csp_family:
            # CSP adapts its in-flight count to memory (the gate); a batch counts as affordable if the target
            # number of subnets fits (choice blocks at their mean), or else as many as a batch of one allows
            slots = CSP_SLOTS_PIN_TASK if cfg.pin == "task" else CSP_SLOTS
            for n in range(csp_target_in_flight(P, s, slots), 0, -1):
                b_n = int((B - fixed_room - n * per_subnet) // (n * act1))
                if b_n >= 1:
                    fit = min(fit, b_n)
                    break
        if fixed_batch and fit < bmax:
            raise MemoryBudgetError(f"{where} cannot afford batch {bmax} (at most {max(fit, 0)} fits)")
        fits.append(int(min(fit, bmax)))
    batch = min(fits) if fits else bmax
    note = "fixed by the user" if fixed_batch else (
        f"largest that fits (at most the space's {b0})" if batch < bmax else "the space's batch")
    return MemoryPlan(budgets, max(1, batch), shares, note)
