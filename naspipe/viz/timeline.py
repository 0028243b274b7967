"""Utilisation over time: the busy share of each stage in equal time buckets, from compute events."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from naspipe.sched.trace import COMPUTE_KINDS, TraceEvent


def utilization_series(events: Iterable[TraceEvent], stages: int, buckets: int = 40,
                       end: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, util)``: bucket edges in seconds (``buckets + 1``) and busy share per stage, shape (P, buckets)."""
    evs = [e for e in events if e.kind in COMPUTE_KINDS and e.end > e.start]
    if end is None:
        end = max((e.end for e in evs), default=0.0)
    edges = np.linspace(0.0, end if end > 0 else 1.0, buckets + 1)
    busy = np.zeros((stages, buckets))
    if evs:
        lo, hi = edges[:-1], edges[1:]
        for e in evs:
            a = int(np.searchsorted(hi, e.start, side="right"))
            b = int(np.searchsorted(lo, e.end, side="left"))
            if a < b:
                busy[e.stage, a:b] += np.clip(np.minimum(hi[a:b], e.end) - np.maximum(lo[a:b], e.start), 0.0, None)
    width = edges[1] - edges[0]
    return edges, busy / width
