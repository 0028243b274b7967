"""The discrete-event simulator: drives the scheduling core with costs from the cost model."""

from naspipe.sim.costs import CostModel
from naspipe.sim.engine import DeadlockError, SimResult, simulate

__all__ = ["CostModel", "DeadlockError", "SimResult", "simulate"]
