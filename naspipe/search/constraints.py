"""Cost constraints for architecture search, parsed from text such as ``params<=50k`` or ``latency<=1.5ms``.

Torch-free, so the command line can reject a bad constraint before anything heavy is imported. Metrics:
``params`` (a parameter count; plain number or with a suffix k/K = 1e3, M = 1e6, G = 1e9) and ``latency``
(forward seconds of one batch; the unit is required: s, ms, us or µs, so ``latency<=2`` cannot silently
mean two seconds). Several constraints are joined by commas: ``params<=40k,latency<=0.5ms``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from naspipe.errors import UserError

METRICS: tuple[str, ...] = ("params", "latency")
PARAM_UNITS: dict[str, float] = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
LATENCY_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_RX = re.compile(r"^\s*([A-Za-z_]+)\s*(<=|=<|<|>=|>|==|=)?\s*(.*?)\s*$")
_NUM = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ]*)$")


class ConstraintError(UserError):
    """A constraint text is malformed; the message says what is allowed."""


@dataclass(frozen=True)
class Constraint:
    """``metric <= limit`` (params: a count; latency: seconds)."""

    metric: str
    limit: float

    def ok(self, costs: Mapping[str, float]) -> bool:
        return costs[self.metric] <= self.limit

    def __str__(self) -> str:
        return f"{self.metric}<={format_cost(self.metric, self.limit)}"


def format_cost(metric: str, value: float) -> str:
    """``12.3k`` for parameter counts, ``0.41ms`` for latencies: always milliseconds below a second, the unit of
    the plots' latency axis (one unit per quantity: 0.041ms, not 41us)."""
    if metric == "params":
        for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if abs(value) >= scale:
                return f"{value / scale:.4g}{suffix}"
        return f"{value:.4g}"
    if abs(value) >= 1.0:
        return f"{value:.4g}s"
    return f"{value / 1e-3:.4g}ms"


def _parse_one(text: str) -> Constraint:
    m = _RX.match(text)
    if not m or not m.group(1):
        raise ConstraintError(f"bad constraint {text!r}: use METRIC<=VALUE with METRIC one of {', '.join(METRICS)}")
    key, op, value = m.group(1), m.group(2), m.group(3)
    if key not in METRICS:
        raise ConstraintError(f"unknown constraint key {key!r} in {text!r}; known: {', '.join(METRICS)}")
    if op != "<=":
        raise ConstraintError(f"bad constraint {text!r}: only upper bounds are supported, e.g. {key}<=VALUE")
    n = _NUM.match(value)
    if not n:
        raise ConstraintError(f"bad number {value!r} in {text!r}"
                              + (": use e.g. 50k, 1.5M or 20000" if key == "params" else ": use e.g. 0.8ms"))
    number, unit = float(n.group(1)), n.group(2)
    units = PARAM_UNITS if key == "params" else LATENCY_UNITS
    if unit not in units:
        if key == "latency" and unit == "":
            raise ConstraintError(f"latency needs a unit in {text!r}: s, ms or us (e.g. latency<=0.8ms)")
        allowed = "k, K, M, G or none" if key == "params" else "s, ms, us"
        raise ConstraintError(f"unknown unit {unit!r} in {text!r}; {key} units: {allowed}")
    limit = number * units[unit]
    if not math.isfinite(limit):
        raise ConstraintError(f"bad number {value!r} in {text!r}: must be finite")
    return Constraint(key, limit)


def parse_constraints(texts: str | Iterable[str] | None) -> tuple[Constraint, ...]:
    """Parse one text or several (each may hold comma-separated constraints); a metric may appear once."""
    if texts is None:
        return ()
    if isinstance(texts, str):
        texts = [texts]
    out: list[Constraint] = []
    for text in texts:
        parts = [p for p in text.split(",")]
        if any(not p.strip() for p in parts):
            raise ConstraintError(f"empty constraint in {text!r}")
        out.extend(_parse_one(p) for p in parts)
    seen: set[str] = set()
    for c in out:
        if c.metric in seen:
            raise ConstraintError(f"constraint on {c.metric!r} given twice")
        seen.add(c.metric)
    return tuple(out)


def satisfied(constraints: Iterable[Constraint], costs: Mapping[str, float]) -> bool:
    return all(c.ok(costs) for c in constraints)
