"""torch's intra-op thread count for one piece of work, given back after it.

Why it exists: what must not depend on the machine's core count (a behaviour digest, a proxy score, a cost
profile, an evaluation, an in-process truth build) runs on a fixed count inside a caller that may use another (a
notebook's kernel, a test worker). Setting the count alone would leave the caller on it: a truth built in a
notebook left its kernel on one thread. One context manager instead of a save, a set and a restore at every site.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Inside: torch computes on ``n`` intra-op threads; after: on the caller's count again, however the block
    ends."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
