"""What a subnet costs, per metric, for constraint checks and the accuracy-versus-cost plot.

A ``SearchCosts`` holds one number per (block, candidate) and metric: ``params`` (parameter count) and
``latency`` (forward seconds of one batch of ``space.batch_size``). A subnet's cost is the sum over its
blocks (fixed blocks included). Defaults come from the search space (``param_bytes / 4``, float32, and
``fwd``); ``with_param_counts`` replaces the counts by the model's real ones, ``with_profile`` replaces
latencies by measured ones from a JSON profile::

    {"unit": "ms", "blocks": {"cell0": {"conv3": 0.21, "skip": 0.002, ...}, ...}}

Blocks or candidates a profile leaves out keep the cost model's value; unknown names are an error.
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from naspipe.errors import UserError
from naspipe.fileio import jsonfile
from naspipe.search.constraints import LATENCY_UNITS, Constraint
from naspipe.spaces.space import SearchSpace, Subnet

Table = tuple[tuple[float, ...], ...]


class ProfileError(UserError):
    """A latency profile file is unreadable or names blocks/candidates the space lacks."""


@dataclass(frozen=True)
class SearchCosts:
    space: SearchSpace
    params: Table  # [block][candidate] parameter count
    latency: Table  # [block][candidate] forward seconds per batch
    params_source: str = "space param_bytes / 4"
    latency_source: str = "space fwd costs"

    @classmethod
    def from_space(cls, space: SearchSpace) -> SearchCosts:
        return cls(space,
                   tuple(tuple(c.param_bytes / 4 for c in b.candidates) for b in space.blocks),
                   tuple(tuple(float(c.fwd) for c in b.candidates) for b in space.blocks))

    def table(self, metric: str) -> Table:
        if metric == "params":
            return self.params
        if metric == "latency":
            return self.latency
        raise KeyError(f"unknown cost metric {metric!r}")

    def cost(self, subnet: Sequence[int], metric: str) -> float:
        t = self.table(metric)
        return sum(t[b][c] for b, c in enumerate(subnet))

    def costs(self, subnet: Sequence[int]) -> dict[str, float]:
        return {"params": self.cost(subnet, "params"), "latency": self.cost(subnet, "latency")}

    def extreme(self, metric: str, largest: bool = False) -> tuple[float, Subnet]:
        """The smallest (or largest) cost any subnet has on ``metric``, and one subnet that has it."""
        pick = max if largest else min
        subnet = tuple(pick(range(len(row)), key=lambda c, row=row: (row[c], c)) for row in self.table(metric))
        return self.cost(subnet, metric), subnet

    def feasible(self, subnet: Sequence[int], constraints: Sequence[Constraint]) -> bool:
        return all(self.cost(subnet, c.metric) <= c.limit for c in constraints)

    def with_param_counts(self, counts: Mapping[tuple[int, int], int], source: str = "model") -> SearchCosts:
        """Replace parameter counts by ``{(block, candidate): count}`` (every pair must be given)."""
        rows = []
        for b, blk in enumerate(self.space.blocks):
            try:
                rows.append(tuple(float(counts[(b, c)]) for c in range(blk.k)))
            except KeyError as e:
                raise ValueError(f"parameter count for (block, candidate) {e.args[0]} missing") from None
        return replace(self, params=tuple(rows), params_source=source)

    def with_profile(self, profile: Mapping[str, Any], source: str = "profile") -> SearchCosts:
        """Replace latencies by a profile object (see the module docstring); returns a new model."""
        lat = parse_profile(self.space, profile, source)
        rows = tuple(tuple(lat.get((b, c), self.latency[b][c]) for c in range(blk.k))
                     for b, blk in enumerate(self.space.blocks))
        return replace(self, latency=rows, latency_source=f"{source} ({len(lat)} measured entries)")

    def with_profile_file(self, path: str | Path) -> SearchCosts:
        p = Path(path)
        try:
            data = jsonfile.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise ProfileError(f"cannot read profile {str(p)!r}: {e.strerror}") from None
        except ValueError as e:  # (malformed, not UTF-8, nested too deeply)
            raise ProfileError(f"{p.name}: not a JSON profile ({e})") from None
        return self.with_profile(data, source=p.name)


def parse_profile(space: SearchSpace, data: Any, source: str = "profile") -> dict[tuple[int, int], float]:
    """``{(block, candidate): seconds}`` from a profile object; raises ProfileError naming the bad entry."""
    if not isinstance(data, dict) or not isinstance(data.get("blocks"), dict):
        raise ProfileError(f"{source}: a profile is an object with 'blocks' (block -> candidate -> time) "
                           "and an optional 'unit' (s, ms, us)")
    unknown = set(data) - {"blocks", "unit", "space", "batch_size", "note"}
    if unknown:
        raise ProfileError(f"{source}: unknown field(s) {sorted(unknown)}")
    unit = data.get("unit", "s")
    if unit not in LATENCY_UNITS:
        raise ProfileError(f"{source}: unit must be one of {', '.join(LATENCY_UNITS)}, got {unit!r}")
    if data.get("space") not in (None, space.name):
        raise ProfileError(f"{source}: profile is for space {data['space']!r}, not {space.name!r}")
    scale = LATENCY_UNITS[unit]
    index = {b.name: (i, {c.name: k for k, c in enumerate(b.candidates)}) for i, b in enumerate(space.blocks)}
    out: dict[tuple[int, int], float] = {}
    for bname, cands in data["blocks"].items():
        if bname not in index:
            raise ProfileError(f"{source}: unknown block {bname!r} (space {space.name!r})")
        if not isinstance(cands, dict):
            raise ProfileError(f"{source}: block {bname!r} must map candidate names to times")
        b, cidx = index[bname]
        for cname, v in cands.items():
            if cname not in cidx:
                raise ProfileError(f"{source}: block {bname!r} has no candidate {cname!r}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ProfileError(f"{source}: {bname}.{cname} must be a finite time >= 0, got {v!r}")
            out[(b, cidx[cname])] = float(v) * scale
    return out
