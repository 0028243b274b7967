"""Search results as plain data: one record per evaluated subnet, the ranking, the table and the JSON.

Ranking: higher held-out accuracy first, then lower loss, then fewer parameters, then the subnet tuple,
so ties never depend on evaluation order or timing. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from naspipe.search.constraints import Constraint, format_cost
from naspipe.spaces.space import SearchSpace, Subnet


@dataclass(frozen=True)
class Evaluated:
    """One evaluated subnet: held-out accuracy and loss with inherited weights, and its costs."""

    order: int  # 0-based evaluation index
    subnet: Subnet
    accuracy: float
    loss: float
    params: float
    latency: float  # seconds per batch

    def rank_key(self) -> tuple[float, float, float, Subnet]:
        acc = self.accuracy if math.isfinite(self.accuracy) else -math.inf
        loss = self.loss if math.isfinite(self.loss) else math.inf
        return (-acc, loss, self.params, self.subnet)


def subnet_names(space: SearchSpace, subnet: Sequence[int]) -> list[str]:
    """The chosen candidate's name for every choice block, in block order."""
    return [space.blocks[b].candidates[subnet[b]].name for b in space.choice_blocks]


def best_of(records: Sequence[Evaluated]) -> Evaluated | None:
    return min(records, key=Evaluated.rank_key) if records else None


def ensemble_text(names: Sequence[str], after: Sequence[int]) -> str:
    """The supernets an ensemble averaged, in one line (``naspipe rank``'s ``run:`` line, ``naspipe search``'s
    ``supernets:`` line): ``names``, the run first; ``after``, the subnets each had trained where they are one
    run's last supernets (``--ensemble-last``: its final weights, then its checkpoints' folders), else empty."""
    if after:
        return (f"mean of {len(names)} last supernets of {names[0]}: its final weights (after {after[0]} "
                f"subnets) and its checkpoints after {', '.join(map(str, after[1:]))} subnets")
    return f"mean of {len(names)} runs equal but the seed: {', '.join(names)}"


def ensemble_json(names: Sequence[str], after: Sequence[int]) -> dict[str, Any]:
    """The supernets an ensemble averaged, as ``naspipe rank`` and ``naspipe search`` write them: ``"ensemble"``
    (their names, none for one supernet) and ``"ensemble_last"`` (each with ``after_subnets``, for one run's last
    supernets; empty otherwise)."""
    return {"ensemble": list(names),
            "ensemble_last": [{"supernet": n, "after_subnets": a} for n, a in zip(names, after, strict=True)]
            if after else []}


@dataclass
class SearchResult:
    space: SearchSpace
    strategy: str
    seed: int
    budget: int
    constraints: tuple[Constraint, ...]
    evaluated: list[Evaluated]
    settings: dict[str, Any] = field(default_factory=dict)  # strategy parameters, cost sources, data
    exhausted: bool = False  # fewer than ``budget`` feasible subnets could be found
    wall_s: float = 0.0
    ensemble: tuple[str, ...] = ()  # the supernets whose mean scored each subnet (none: one supernet)
    after_subnets: tuple[int, ...] = ()  # an ensemble of one run's last supernets: the subnets each had trained

    @property
    def best(self) -> Evaluated | None:
        return best_of(self.evaluated)

    def top(self, n: int = 10) -> list[Evaluated]:
        return sorted(self.evaluated, key=Evaluated.rank_key)[:max(0, n)]

    def record(self, e: Evaluated, rank: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {} if rank is None else {"rank": rank}
        out.update({"order": e.order, "subnet": self.space.subnet_dict(e.subnet), "indices": list(e.subnet),
                    "names": subnet_names(self.space, e.subnet),
                    "accuracy": e.accuracy, "loss": e.loss, "params": e.params, "latency_s": e.latency})
        return out

    def to_dict(self, top: int = 10, evaluated: bool = True) -> dict[str, Any]:
        """JSON-ready; equal for two searches with the same inputs except ``wall_s``."""
        best = self.best
        out: dict[str, Any] = {
            "space": self.space.name, "strategy": self.strategy, "seed": self.seed, "budget": self.budget,
            "evaluations": len(self.evaluated), "exhausted": self.exhausted,
            "constraints": [str(c) for c in self.constraints], "settings": dict(self.settings),
            **ensemble_json(self.ensemble, self.after_subnets),
            "best": None if best is None else self.record(best, 1),
            "top": [self.record(e, i + 1) for i, e in enumerate(self.top(top))],
        }
        if evaluated:
            out["evaluated"] = [self.record(e) for e in self.evaluated]
        out["wall_s"] = self.wall_s
        return out

    def table(self, top: int = 10) -> str:
        """A plain-text table of the ``top`` subnets (rank, accuracy, loss, params, latency, candidates)."""
        rows = [("rank", "accuracy", "loss", "params", "latency", "subnet")]
        for i, e in enumerate(self.top(top)):
            rows.append((str(i + 1), f"{e.accuracy:.4f}", f"{e.loss:.4f}", format_cost("params", e.params),
                         format_cost("latency", e.latency), " ".join(subnet_names(self.space, e.subnet))))
        widths = [max(len(r[k]) for r in rows) for k in range(5)]
        return "\n".join("  ".join(r[k].rjust(widths[k]) for k in range(5)) + "  " + r[5] for r in rows)

    def summary(self) -> str:
        best = self.best
        cons = ", ".join(map(str, self.constraints)) or "none"
        head = (f"{self.strategy} search on {self.space.name}: {len(self.evaluated)} subnets evaluated "
                f"(budget {self.budget}, seed {self.seed}, constraint {cons})")
        if self.exhausted:
            head += "; no further feasible subnet found"
        if self.ensemble:
            head += f"\nsupernets: {ensemble_text(self.ensemble, self.after_subnets)}"
        if best is None:
            return head + "\nno subnet satisfies the constraints"
        return (f"{head}\nbest: {self.space.subnet_dict(best.subnet)}\n"
                f"      accuracy {best.accuracy:.4f}, loss {best.loss:.4f}, params "
                f"{format_cost('params', best.params)}, latency {format_cost('latency', best.latency)}")
