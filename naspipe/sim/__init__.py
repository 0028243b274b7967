"""The discrete-event simulator: drives the scheduling core with costs from the cost model.

``simulate(RunSpec.of(space, part, stream, policy), SimOptions(...))``: the run (``naspipe.runspec.spec``) and how it
is simulated; ``SimOptions(memory=MemoryConfig(...))`` also models device memory, swapping and prefetching
(``naspipe.sim.memory``); without it the run is the memory-free one.
"""

from naspipe.sim.costs import CostModel, batch_time_scale
from naspipe.sim.engine import DeadlockError, SimOptions, SimResult, choose_plan, remembered_plan, simulate
from naspipe.sim.memory import MemoryBudgetError, MemoryConfig, MemoryReport, plan_memory

__all__ = ["CostModel", "DeadlockError", "MemoryBudgetError", "MemoryConfig", "MemoryReport", "SimOptions",
           "SimResult", "batch_time_scale", "choose_plan", "plan_memory", "remembered_plan", "simulate"]
