"""Whole numbers from what a user passes (a count, a seed, a budget): an int or a numpy integer, not 2.5, "3" or True.

Why it exists: comparisons let through what a count cannot be. 2.5 passes ``>= 1`` (bsp's groups of 2.5 subnets
deadlocked, in training until the timeout), NaN passes ``not < 1`` (a search with a NaN budget ran nothing and said
nothing), and "3" fails deep inside with a TypeError. The run description, the schedulers and the search take
their counts and seeds through ``whole``, each raising its own one-line error.
"""

from __future__ import annotations

import operator
from typing import Any


def whole(name: str, value: Any, low: int | None = 1, error: type[Exception] = ValueError, why: str = "") -> int:
    """``value`` as an int when it is a whole number (``>= low`` unless ``low`` is None); ``error`` (one line,
    ending in ``why``) otherwise."""
    try:
        if isinstance(value, bool):
            raise TypeError
        n: int | None = operator.index(value)
    except TypeError:
        n = None
    if n is None or (low is not None and n < low):
        bound = "" if low is None else f" >= {low}"
        raise error(f"{name} must be a whole number{bound}, got {value!r}{why}")
    return n
