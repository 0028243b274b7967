"""Partitioner: contiguous, non-empty stages covering every block, optimally balanced, clear errors."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.spaces.partition import block_costs, partition
from naspipe.spaces.space import Block, Candidate, SearchSpace, SpaceError, preset


def _space(n: int) -> SearchSpace:
    return SearchSpace("p", tuple(Block(f"b{i}", (Candidate("c"),)) for i in range(n)))


def _brute_force(costs: list[float], stages: int) -> float:
    """The smallest achievable max stage cost, over every way to cut ``costs`` into contiguous parts."""
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), stages - 1):
        edges = (0, *cuts, n)
        best = min(best, max(sum(costs[a:b]) for a, b in itertools.pairwise(edges)))
    return best


def _check_shape(bounds, n: int, stages: int) -> None:
    assert len(bounds) == stages
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    for (_, b), (c, _) in itertools.pairwise(bounds):
        assert b == c  # contiguous
    for a, b in bounds:
        assert a < b  # non-empty


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.25, 2.0, 3.0, 7.5]), min_size=1, max_size=9), st.data())
def test_partition_is_contiguous_covering_and_optimal(costs: list[float], data) -> None:
    stages = data.draw(st.integers(1, len(costs)))
    part = partition(_space(len(costs)), stages, profile=costs)
    _check_shape(part.bounds, len(costs), stages)
    worst = max(sum(costs[a:b]) for a, b in part.bounds)
    assert worst == pytest.approx(_brute_force(costs, stages), abs=1e-9)
    # stage_of and blocks agree with the bounds
    for s in range(stages):
        for b in part.blocks(s):
            assert part.stage_of(b) == s


@pytest.mark.parametrize("k", [12, 48])
@pytest.mark.parametrize("stages", [1, 2, 4, 8])
def test_naspipe_presets_balance_by_mean_candidate_cost(k: int, stages: int) -> None:
    sp = preset(f"naspipe-k{k}")
    part = partition(sp, stages)
    _check_shape(part.bounds, sp.num_blocks, stages)
    costs = block_costs(sp)
    worst = max(sum(costs[a:b]) for a, b in part.bounds)
    # every choice block costs the same on average, so the best split is within one block of even
    assert worst <= sum(costs) / stages + max(costs) + 1e-12
    assert part.to_list() == [list(b) for b in part.bounds]


def test_unit_space_splits_into_eight_block_stages() -> None:
    assert partition(preset("unit-k48"), 4).bounds == ((0, 8), (8, 16), (16, 24), (24, 32))


def test_block_costs_are_mean_fwd_plus_bwd() -> None:
    sp = SearchSpace("m", (Block("a", (Candidate("x", fwd=1, bwd=2), Candidate("y", fwd=3, bwd=4))),
                           Block("f", (Candidate("z", fwd=0.5, bwd=0.5),), fixed=True)))
    assert block_costs(sp) == [5.0, 1.0]


def test_one_block_per_stage_when_stages_equal_blocks() -> None:
    assert partition(_space(5), 5).bounds == tuple((i, i + 1) for i in range(5))


@pytest.mark.parametrize("stages", [0, -1])
def test_fewer_than_one_stage_is_rejected(stages: int) -> None:
    with pytest.raises(SpaceError, match=f"stages must be an integer >= 1, got {stages}"):
        partition(_space(4), stages)


def test_non_integer_stages_are_rejected() -> None:
    with pytest.raises(SpaceError, match="stages must be an integer"):
        partition(_space(4), 2.0)  # type: ignore[arg-type]


def test_more_stages_than_blocks_is_rejected() -> None:
    with pytest.raises(SpaceError, match=r"cannot split 50 blocks of space 'naspipe-k12' over 51 stages.*at most 50"):
        partition(preset("naspipe-k12"), 51)


def test_profile_length_must_match() -> None:
    with pytest.raises(SpaceError, match="profile has 3 entries"):
        partition(_space(4), 2, profile=[1.0, 1.0, 1.0])


def test_stage_of_unknown_block() -> None:
    with pytest.raises(IndexError):
        partition(_space(4), 2).stage_of(4)
