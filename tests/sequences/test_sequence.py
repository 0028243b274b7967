"""Subnet streams: seeded uniform sampling (golden digest), replay files, online generation, the Window."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from naspipe.sequences.sequence import (
    OnlineStream,
    ReplayStream,
    UniformStream,
    Window,
    WindowError,
    save_sequence,
    sequence_digest,
)
from naspipe.spaces.space import SpaceError, preset

# sha256 of the first 100 subnets of naspipe-k48 with seed 0. If this changes, every recorded run,
# replay file and reproducibility claim changes with it: do not update it casually.
GOLDEN_K48_SEED0_100 = "a3bc26899c42cc9eea194a182a910e316c1b0e0bf8e1c2b1f1c853f8bc5a28f0"
GOLDEN_K48_SEED0_FIRST = (0, 17, 33, 34, 37, 35, 36, 8, 39, 42, 2, 5)


@pytest.fixture(scope="module")
def k48():
    return preset("naspipe-k48")


def test_uniform_stream_golden_digest(k48) -> None:
    u = UniformStream(k48, 0, 100)
    assert u[0][: len(GOLDEN_K48_SEED0_FIRST)] == GOLDEN_K48_SEED0_FIRST
    assert u.digest() == GOLDEN_K48_SEED0_100
    # the digest is the documented formula: space name, then one comma-separated line per subnet
    h = hashlib.sha256(b"naspipe-k48")
    for s in u:
        h.update(("\n" + ",".join(map(str, s))).encode())
    assert h.hexdigest() == GOLDEN_K48_SEED0_100
    assert sequence_digest("naspipe-k48", list(u)) == GOLDEN_K48_SEED0_100


def test_same_seed_same_sequence_different_seed_differs(k48) -> None:
    a, b, c = UniformStream(k48, 3, 50), UniformStream(k48, 3, 50), UniformStream(k48, 4, 50)
    assert list(a) == list(b) and a.digest() == b.digest()
    assert list(a) != list(c) and a.digest() != c.digest()
    # random access does not depend on the order of reads
    d = UniformStream(k48, 3, 50)
    assert [d[j] for j in reversed(range(50))] == list(reversed(list(a)))
    # a prefix is a prefix: n does not change the subnets
    assert list(UniformStream(k48, 3, 20)) == list(a)[:20]


def test_uniform_stream_is_valid_and_roughly_uniform() -> None:
    sp = preset("naspipe-k12")
    u = UniformStream(sp, 1, 1200)
    counts = Counter()
    for s in u:
        assert sp.validate_subnet(s) == s
        assert s[0] == 0 and s[-1] == 0  # fixed blocks
        counts.update(s[1:49])
    total = 1200 * 48
    for k in range(12):
        assert abs(counts[k] / total - 1 / 12) < 0.01


def test_uniform_stream_bounds(k48) -> None:
    u = UniformStream(k48, 0, 5)
    assert len(u) == 5
    with pytest.raises(IndexError):
        u[5]
    with pytest.raises(IndexError):
        u[-1]
    with pytest.raises(ValueError):
        UniformStream(k48, 0, -1)
    assert list(UniformStream(k48, 0, 0)) == []


def test_replay_file_round_trip(tmp_path, k48) -> None:
    u = UniformStream(k48, 11, 30)
    p = tmp_path / "seq.json"
    digest = save_sequence(u, p)
    assert digest == u.digest()
    data = json.loads(p.read_text())
    assert data["space"] == "naspipe-k48" and data["sha256"] == digest and len(data["subnets"]) == 30
    r = ReplayStream.from_file(k48, p)
    assert list(r) == list(u) and r.digest() == digest and len(r) == 30


def test_replay_rejects_bad_files(tmp_path, k48) -> None:
    p = tmp_path / "seq.json"
    save_sequence(UniformStream(k48, 0, 3), p)
    with pytest.raises(SpaceError, match="recorded for space 'naspipe-k48'"):
        ReplayStream.from_file(preset("naspipe-k12"), p)
    p.write_text("{not json")
    with pytest.raises(SpaceError, match="cannot read sequence file"):
        ReplayStream.from_file(k48, p)
    with pytest.raises(SpaceError, match="cannot read sequence file"):
        ReplayStream.from_file(k48, tmp_path / "missing.json")
    p.write_text(json.dumps([[0] * 50]))
    with pytest.raises(SpaceError, match="'subnets' list"):
        ReplayStream.from_file(k48, p)
    p.write_text(json.dumps({"subnets": [[0] * 49]}))
    with pytest.raises(SpaceError, match="subnet has 49 choices"):
        ReplayStream.from_file(k48, p)
    with pytest.raises(SpaceError, match="must be an integer"):
        ReplayStream(k48, [[0] + [48] * 48 + [0]])


def test_materialize_copies_the_sequence(k48) -> None:
    u = UniformStream(k48, 2, 10)
    m = ReplayStream.materialize(u)
    assert list(m) == list(u) and m.space is k48


# ---- the window ------------------------------------------------------------------------------------
def test_window_reads_inside_and_records_max_read(k48) -> None:
    u = UniformStream(k48, 0, 10)
    w = Window(u, 3)
    assert w.horizon == 3 and len(w) == 10
    assert w[1] == u[1] and w.max_read == 1
    assert w[0] == u[0] and w.max_read == 1
    assert w[2] == u[2] and w.max_read == 2
    assert w.violations == 0


def test_window_raises_beyond_lo_plus_size(k48) -> None:
    w = Window(UniformStream(k48, 0, 10), 3)
    with pytest.raises(WindowError, match=r"read subnet 3 beyond the window \[0, 3\)"):
        w[3]
    assert w.violations == 1 and w.max_read == -1
    w.advance(2)
    assert w.horizon == 5
    assert w[4] is not None and w.max_read == 4
    with pytest.raises(WindowError):
        w[5]
    assert w.violations == 2
    w.advance(9)
    assert w.horizon == 10  # clipped at the end of the stream
    with pytest.raises(ValueError, match="never moves back"):
        w.advance(1)
    with pytest.raises(ValueError):
        Window(UniformStream(k48, 0, 10), 0)


# ---- online generation -----------------------------------------------------------------------------
class _Sampler:
    """Picks candidate (sum of visible losses) mod K everywhere; records what it saw."""

    def __init__(self, space, lag: int):
        self.space, self.lag = space, lag
        self.seen: dict[int, list[int]] = {}

    def propose(self, j: int, results):
        self.seen[j] = sorted(results)
        v = int(sum(results.values()))
        return tuple(0 if b.fixed else v % b.k for b in self.space.blocks)


def test_online_stream_waits_for_results_up_to_j_minus_lag() -> None:
    sp = preset("unit-k12")
    smp = _Sampler(sp, lag=2)
    on = OnlineStream(sp, smp, 10)
    assert on[0] == on[1] == tuple([0] * 32)  # subnets 0 and 1 need no results
    with pytest.raises(WindowError, match="subnet 2 needs results of subnets <= 0"):
        on[2]
    on.report(0, 5.0)
    assert on[2] == tuple([5] * 32)
    with pytest.raises(WindowError, match="subnet 3 needs results of subnets <= 1"):
        on[3]
    on.report(2, 100.0)  # reported out of order: 1 is still missing
    with pytest.raises(WindowError):
        on[3]
    on.report(1, 1.0)
    assert on[3] == tuple([6] * 32)  # sees 0 and 1, not 2
    assert smp.seen[3] == [0, 1]
    assert on[4] == tuple([(5 + 1 + 100) % 12] * 32)
    assert on[2] == tuple([5] * 32)  # once made, a subnet never changes
    with pytest.raises(IndexError):
        on[10]


def test_online_stream_validates_proposals() -> None:
    sp = preset("unit-k12")

    class Bad:
        lag = 1

        def propose(self, j, results):
            return (12,) * 32

    with pytest.raises(SpaceError):
        OnlineStream(sp, Bad(), 3)[0]


def test_replay_rejects_boolean_choices(tmp_path, k48) -> None:
    """JSON ``true`` is not a candidate index: accepting it would store ``True`` in the subnet and change the
    sequence digest ("True" instead of "1") for what is the same subnet."""
    p = tmp_path / "seq.json"
    p.write_text(json.dumps({"space": "naspipe-k48", "subnets": [[0] + [True] * 48 + [0]]}))
    with pytest.raises(SpaceError, match="must be an integer"):
        ReplayStream.from_file(k48, p)
