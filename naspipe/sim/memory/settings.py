"""Device memory in the simulator: the configuration, its modes and the budget error.

Why it exists: the one list of swap and pin modes (the runtime and the CLI import it) and ``MemoryConfig``,
what ``simulate(run, SimOptions(memory=...))`` and ``naspipe simulate --device-memory`` set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from naspipe.errors import UserError
from naspipe.inputs.memsize import Budget, parse_budget
from naspipe.sim.costs import DEFAULT_BATCH_ALPHA

SWAP_MODES = ("predictive", "on-demand", "resident")  # the one list (runtime and CLI import it)
PIN_MODES = ("subnet", "task")
Key = tuple[int, int]  # (block, choice)

# copy-engine default: PCIe 4.0 x16 moves about 25 GB/s host-to-device in practice (32 GB/s raw); PCIe 3.0
# x16 about 12 GB/s
DEFAULT_BANDWIDTH = 25e9




class MemoryBudgetError(UserError):
    """A memory configuration that cannot work (a budget too small, resident mode that does not fit...)."""


@dataclass(frozen=True)
class MemoryConfig:
    """How the simulator models device memory. ``device_memory``: per-stage budget (bytes, ``"2GiB"``,
    ``"25%"`` of the stage's supernet parameters, None = unlimited, or one such entry per stage).
    ``batch_size``: None picks the largest batch the policy can afford, at most the space's ``batch_size``.
    ``batch_alpha``: the fixed share of a task's time at the reference batch (see
    ``naspipe.sim.costs.batch_time_scale``). ``bandwidth_d2h`` defaults to ``bandwidth_h2d``. ``headroom``:
    in predictive mode, the gate keeps room for the layers of this many younger subnets, so they can be
    prefetched while the admitted ones run (0 admits more subnets but prefetches less). ``pin``: how long a
    candidate must stay on the device: ``"subnet"`` from ``F(j,s)`` until ``j``'s write on ``s`` ends;
    ``"task"`` only while a task that uses it runs, so between ``F(j,s)`` and its backward a waiting subnet
    holds just its activations and its (clean) candidates may be dropped and fetched again before the
    backward (CSP lets no other subnet write them in between, so the copy fetched again is the one read)."""

    device_memory: Budget | str | int | Sequence[Budget | str | int | None] | None = None
    swap: str = "predictive"
    prefetch_depth: int = 4
    bandwidth_h2d: float = DEFAULT_BANDWIDTH
    bandwidth_d2h: float | None = None
    batch_size: int | None = None
    batch_alpha: float = DEFAULT_BATCH_ALPHA
    headroom: int = 1
    pin: str = "task"

    def stage_budgets(self, shares: Sequence[int]) -> tuple[int | None, ...]:
        """Bytes per stage (None = unlimited); a sequence ``device_memory`` gives one entry per stage."""
        dm = self.device_memory
        if isinstance(dm, (list, tuple)):
            if len(dm) != len(shares):
                raise MemoryBudgetError(f"device memory lists {len(dm)} budgets for {len(shares)} stages")
            return tuple(parse_budget(d).resolve(n) for d, n in zip(dm, shares, strict=True))
        b = parse_budget(dm)
        return tuple(b.resolve(n) for n in shares)
