"""The memory metrics of one simulated run (``MemoryReport``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from naspipe.sim.memory.device import StageStats


@dataclass
class MemoryReport:
    """Memory metrics of one simulated run (see ``summary`` for the JSON keys)."""

    swap: str
    budgets: tuple[int | None, ...]
    batch_size: int
    stages: list[StageStats]
    makespan: float
    predictor_accuracy: float | None = None
    predictor_coverage: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.stages)

    @property
    def hit_rate(self) -> float:
        t = self.tasks
        return sum(s.hits for s in self.stages) / t if t else 1.0

    @property
    def forward_hit_rate(self) -> float:
        f = sum(s.forwards for s in self.stages)
        return sum(s.forward_hits for s in self.stages) / f if f else 1.0

    @property
    def stall_time(self) -> float:
        return sum(s.stall_time for s in self.stages)

    @property
    def stall_share(self) -> float:
        """Stall time over all stages / (stages x makespan), like utilisation."""
        m = self.makespan * len(self.stages)
        return self.stall_time / m if m > 0 else 0.0

    @property
    def bytes_moved(self) -> int:
        return sum(s.bytes_moved for s in self.stages)

    def summary(self) -> dict[str, Any]:
        m = self.makespan
        return {
            "swap": self.swap,
            "device_memory": list(self.budgets),
            "batch_size": self.batch_size,
            "hit_rate": self.hit_rate,
            "forward_hit_rate": self.forward_hit_rate,
            "stall_time": self.stall_time,
            "stall_share": self.stall_share,
            "stage_stall_share": [s.stall_time / m if m > 0 else 0.0 for s in self.stages],
            "memory_wait_share": sum(s.gate_time for s in self.stages) / (m * len(self.stages)) if m > 0 else 0.0,
            "bytes_moved": self.bytes_moved,
            "bytes_prefetched": sum(s.prefetch_bytes for s in self.stages),
            "bytes_loaded_on_demand": sum(s.demand_bytes for s in self.stages),
            "bytes_written_back": sum(s.evict_bytes for s in self.stages),
            "bytes_prefetched_unused": sum(s.wasted_prefetch_bytes for s in self.stages),
            "peak_device_bytes": [s.peak for s in self.stages],
            "predictor_accuracy": self.predictor_accuracy,
            "predictor_coverage": self.predictor_coverage,
            **self.extra,
        }
