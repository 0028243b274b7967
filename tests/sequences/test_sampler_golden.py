"""Every built-in sampler's stream, pinned: the digests of streams made before the samplers moved into a registry
(issue 45, item 4). A refactoring of the samplers or of ``shake_words`` must leave every one unchanged."""

from __future__ import annotations

import hashlib

import pytest

from naspipe.sequences.samplers import make_stream
from naspipe.spaces.space import resolve_space

GOLDEN = [  # (space, seed, subnets, sampler, the first 16 hex digits of the stream's digest)
    ("naspipe-k12", 0, 120, "uniform", "7e0591b360d373c3"),
    ("naspipe-k12", 0, 120, "fair", "810cb340d56c7482"),
    ("naspipe-k12", 0, 120, "spread:fair", "564a1eb5b1fb34c8"),
    ("naspipe-k12", 0, 120, "spread:uniform", "9a339f35234a9601"),
    ("naspipe-k12", 0, 120, "evolution:4", "2bc8c0485bfbcede"),
    ("tiny-transformer", 3, 90, "uniform", "ce3098432c64c74c"),
    ("tiny-transformer", 3, 90, "fair", "e83023f85f364c2b"),
    ("tiny-transformer", 3, 90, "spread:fair", "bd5b35d21783f4ba"),
    ("tiny-transformer", 3, 90, "spread:uniform", "518cb3be0d87b0b6"),
    ("tiny-transformer", 3, 90, "evolution:4", "4c9b271af1ea0e2a"),
]


def _loss(subnet: tuple[int, ...], j: int) -> float:
    """A loss that is a pure function of the subnet and its index (what the online sampler is fed)."""
    return int.from_bytes(hashlib.sha256(f"{subnet}:{j}".encode()).digest()[:4], "little") / 2**32


@pytest.mark.parametrize(("space", "seed", "n", "sampler", "digest"), GOLDEN)
def test_every_sampler_makes_its_pinned_stream(space: str, seed: int, n: int, sampler: str, digest: str) -> None:
    stream = make_stream(resolve_space(space), seed, n, sampler)
    for j in range(n):
        subnet = stream[j]
        if hasattr(stream, "report"):  # an online stream learns each loss right after its subnet
            stream.report(j, _loss(subnet, j))
    assert stream.digest()[:16] == digest
