"""Seeded timing jitter: a random delay before every task, to prove results do not depend on timing.

The delay of a task is a pure function of ``(seed, kind, subnet, stage)``, uniform in ``[0, max_ms]``
milliseconds, so a jittered run is itself repeatable while its interleaving differs from an unjittered
one. A correct CSP runtime gives bit-identical results either way.
"""

from __future__ import annotations

import hashlib


def jitter_seconds(seed: int, kind: str, subnet: int, stage: int, max_ms: float) -> float:
    """The delay in seconds before task ``kind(subnet, stage)`` of a run with ``seed``."""
    if max_ms <= 0:
        return 0.0
    digest = hashlib.blake2b(f"naspipe-jitter:{seed}:{kind}:{subnet}:{stage}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64 * max_ms / 1000.0
