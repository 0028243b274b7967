"""The discrete-event simulator: drives the scheduling core with costs from the cost model.

``simulate(..., memory=MemoryConfig(...))`` also models device memory, swapping and prefetching
(``naspipe.sim.memory``); without it the run is the memory-free one.
"""

from naspipe.sim.costs import CostModel, batch_time_scale
from naspipe.sim.engine import DeadlockError, SimResult, choose_plan, simulate
from naspipe.sim.memory import MemoryBudgetError, MemoryConfig, MemoryReport, plan_memory

__all__ = ["CostModel", "DeadlockError", "MemoryBudgetError", "MemoryConfig", "MemoryReport", "SimResult",
           "batch_time_scale", "choose_plan", "plan_memory", "simulate"]
