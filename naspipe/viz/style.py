"""Shared look of every naspipe figure: one colour per event kind, lane geometry and time units."""

from __future__ import annotations

from collections.abc import Iterable

from naspipe.sched.trace import COMPUTE_KINDS, MEMORY_KINDS

KINDS: tuple[str, ...] = (*COMPUTE_KINDS, *MEMORY_KINDS)

COLORS: dict[str, str] = {
    "F": "#4C78A8",  # blue
    "B": "#F58518",  # orange
    "W": "#54A24B",  # green
    "prefetch": "#B279A2",  # mauve
    "evict": "#9D9D9D",  # grey
    "stall": "#E45756",  # red
}

NAMES: dict[str, str] = {
    "F": "F forward",
    "B": "B backward",
    "W": "W weight grad + update",
    "prefetch": "prefetch",
    "evict": "evict",
    "stall": "stall (miss)",
}

# Within a stage row: compute tasks and stalls share the main lane, prefetch / evict a thin lane below it.
LANE: dict[str, tuple[float, float]] = {  # kind -> (offset from the row centre, thickness), y grows downwards
    "F": (-0.1, 0.6), "B": (-0.1, 0.6), "W": (-0.1, 0.6), "stall": (-0.1, 0.6),
    "prefetch": (0.33, 0.2), "evict": (0.33, 0.2),
}


def time_unit(span: float) -> tuple[str, float]:
    """(label, factor) to show times of total length ``span`` seconds: milliseconds below 1 s."""
    return ("ms", 1e3) if 0 < span < 1.0 else ("s", 1.0)


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Known kinds in the canonical order, then any unknown ones sorted."""
    present = set(kinds)
    return [k for k in KINDS if k in present] + sorted(present - set(KINDS))


def color(kind: str) -> str:
    return COLORS.get(kind, "#333333")
