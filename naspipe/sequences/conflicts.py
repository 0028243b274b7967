"""The conflict structure of a subnet sequence: how often, and how close, subnets reuse a candidate.

Why it exists: CSP runs two subnets that share a candidate in sequence order, so a reuse closer than the
subnets a pipeline keeps in flight is a stall the scheduler cannot remove. These numbers say how much a
sequence (a sampler: ``naspipe.sequences.samplers``, ``naspipe.sequences.fair``) leaves for the scheduler to hide:

* ``reuse distance``: for each choice block, the gap ``j - i`` between two consecutive subnets ``i < j`` that
  pick the same candidate there (a choice block of one candidate too: every subnet uses it, and CSP orders
  them on it as on any other; fixed blocks are the shared layers' business and never counted);
  ``min_reuse_distance`` and ``mean_reuse_distance`` over all such gaps (None without a reuse);
* ``conflicts``: subnets ``j`` that share a candidate with one of the ``in_flight - 1`` subnets before
  them (a reuse distance below ``in_flight``); ``conflict_share`` = conflicts / subnets. ``in_flight``
  defaults to the stage count (a pipeline of P stages keeps about P subnets in flight).

Pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from naspipe.spaces.space import SearchSpace


def conflict_stats(space: SearchSpace, subnets: Sequence[Sequence[int]], in_flight: int) -> dict[str, Any]:
    """``{"in_flight", "conflicts", "conflict_share", "min_reuse_distance", "mean_reuse_distance", "reuses"}``."""
    if in_flight < 1:
        raise ValueError(f"in_flight must be >= 1, got {in_flight}")
    blocks = list(space.choice_blocks)  # as the scheduler: every non-fixed block is a conflict, K=1 included
    last: dict[tuple[int, int], int] = {}
    gaps_sum, gaps, gap_min, conflicts = 0, 0, None, 0
    for j, s in enumerate(subnets):
        nearest = None
        for b in blocks:
            key = (b, s[b])
            i = last.get(key)
            if i is not None:
                g = j - i
                gaps_sum, gaps = gaps_sum + g, gaps + 1
                gap_min = g if gap_min is None or g < gap_min else gap_min
                nearest = g if nearest is None or g < nearest else nearest
            last[key] = j
        if nearest is not None and nearest < in_flight:
            conflicts += 1
    n = len(subnets)
    return {"in_flight": int(in_flight), "conflicts": conflicts, "conflict_share": conflicts / n if n else 0.0,
            "min_reuse_distance": gap_min, "mean_reuse_distance": gaps_sum / gaps if gaps else None,
            "reuses": gaps}
