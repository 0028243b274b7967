"""Strict-fair and conflict-spreading samplers (``naspipe.sequences.fair``) and a sequence's conflict structure
(``naspipe.sequences.conflicts``), without processes: the bounds ``naspipe.sequences.fair``'s docstring states, as
properties.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from naspipe.cli import main
from naspipe.runspec.spec import RunSpec, RunSpecError
from naspipe.sequences.conflicts import conflict_stats
from naspipe.sequences.fair import FairStream, SpreadStream, spread_distance
from naspipe.sequences.samplers import SamplerError, SamplerSpec, make_stream, parse_sampler
from naspipe.sequences.sequence import ReplayStream, UniformStream, save_sequence
from naspipe.spaces.space import Block, Candidate, SearchSpace, preset
from tests.helpers.plans import few_plans


def _space(ks: list[int]) -> SearchSpace:
    blocks = [Block("stem", (Candidate("only"),), fixed=True)]
    blocks += [Block(f"b{i}", tuple(Candidate(f"c{c}") for c in range(k))) for i, k in enumerate(ks)]
    return SearchSpace("fair-test", tuple(blocks))


KS = st.lists(st.integers(1, 9), min_size=1, max_size=5)


def _counts(subnets, b, lo, hi):
    return Counter(s[b] for s in subnets[lo:hi])


def _reuse_min(subnets, b):
    last, best = {}, math.inf
    for j, s in enumerate(subnets):
        if s[b] in last:
            best = min(best, j - last[s[b]])
        last[s[b]] = j
    return best


@settings(max_examples=60, deadline=None)
@given(ks=KS, seed=st.integers(0, 2**32), n=st.integers(0, 60))
def test_fair_trains_every_candidate_once_per_group_and_keeps_the_stated_bounds(ks, seed, n):
    sp = _space(ks)
    subs = list(FairStream(sp, seed, n))
    assert all(s[0] == 0 for s in subs)  # the fixed block untouched
    for b, k in enumerate(ks, start=1):
        for g in range(n // k):  # every full group of this block's own period: each candidate exactly once
            assert sorted(s[b] for s in subs[g * k:(g + 1) * k]) == list(range(k))
        for m in range(n + 1):  # any prefix: floor(m/k) or floor(m/k) + 1
            c = _counts(subs, b, 0, m)
            assert all(m // k <= c[x] <= m // k + 1 for x in range(k))
        for lo in range(n):  # any window of L subnets: floor(L/k) - 1 .. ceil(L/k) + 1
            for hi in range(lo + 1, n + 1):
                # (every window: the sequences are short)
                c, L = _counts(subs, b, lo, hi), hi - lo
                assert all(L // k - 1 <= c[x] <= -(-L // k) + 1 for x in range(k))


@settings(max_examples=60, deadline=None)
@given(ks=KS, seed=st.integers(0, 2**32), n=st.integers(0, 80), base=st.sampled_from(["fair", "uniform"]))
def test_spread_keeps_its_bases_frequencies_within_the_bound_and_reuses_at_least_as_far_apart_as_fair(
        ks, seed, n, base):
    sp = _space(ks)
    subs = list(SpreadStream(sp, seed, n, base))
    ref = list(FairStream(sp, seed, n) if base == "fair" else UniformStream(sp, seed, n))
    fair = list(FairStream(sp, seed, n))
    for b, k in enumerate(ks, start=1):
        for m in range(n + 1):
            got, want = _counts(subs, b, 0, m), _counts(ref, b, 0, m)
            dev = max((abs(got[x] - want[x]) for x in range(k)), default=0)
            assert dev <= k // 2 and (m % k or dev == 0)  # equal at every chunk end, within k // 2 between
        if base == "fair":  # spread over fair is strict-fair itself and keeps every reuse d apart
            for g in range(n // k):
                assert sorted(s[b] for s in subs[g * k:(g + 1) * k]) == list(range(k))
            assert _reuse_min(subs, b) >= spread_distance(k)
            assert _reuse_min(subs, b) >= _reuse_min(fair, b)  # per block, hence also over the sequence
    if base == "fair":
        a, f = conflict_stats(sp, subs, 1), conflict_stats(sp, fair, 1)
        assert (a["min_reuse_distance"] or math.inf) >= (f["min_reuse_distance"] or math.inf)


def test_spread_equals_fair_where_fair_already_keeps_reuses_apart():
    sp = _space([2])  # d = 1: every fair sequence keeps it
    assert list(SpreadStream(sp, 3, 40)) == list(FairStream(sp, 3, 40))


@pytest.mark.parametrize("sampler", ["fair", "spread", "spread:uniform"])
def test_seeded_streams_have_random_access_and_depend_on_the_seed(sampler):
    sp = preset("tiny-transformer")
    whole = list(make_stream(sp, 7, 50, sampler))
    fresh = make_stream(sp, 7, 50, sampler)  # a resume reads from the middle of a group first
    assert [fresh[j] for j in (31, 5, 49, 0)] == [whole[j] for j in (31, 5, 49, 0)]
    assert list(make_stream(sp, 8, 50, sampler)) != whole
    assert make_stream(sp, 7, 50, sampler).digest() == make_stream(sp, 7, 50, sampler).digest()
    assert len(set(whole)) > 12  # diverse subnets, not one permutation repeated


def test_the_fair_sequence_is_pinned_across_versions():
    """SHAKE-256, not Python's random: the same subnets on every machine (a change here changes every run)."""
    sp = preset("tiny-transformer")
    assert FairStream(sp, 0, 64).digest()[:16] == "8837a6b73fe8a322"
    assert SpreadStream(sp, 0, 64).digest()[:16] == "d53e2c05c6a6e34a"


def test_sampler_names_parse_and_refuse_with_one_line():
    assert str(parse_sampler("fair")) == "fair" and not parse_sampler("fair").online
    assert parse_sampler("spread") == SamplerSpec("spread", "fair")
    assert str(parse_sampler("Spread:Uniform")) == "spread:uniform"
    assert parse_sampler("evolution:4").online
    for bad in ("fair:2", "spread:evolution", "spread:", "annealing"):
        with pytest.raises(SamplerError):
            parse_sampler(bad)


def test_runspec_builds_the_sampler_sequence_and_refuses_it_with_a_given_one(tmp_path):
    spec = RunSpec.create("digits-cnn", stages=2, subnets=12, seed=3, sampler="fair")
    assert spec.sampler == "fair" and not spec.replayed
    assert list(spec.stream) == list(FairStream(spec.space, 3, 12))
    with pytest.raises(RunSpecError, match="cannot be combined"):
        RunSpec.create("digits-cnn", subnets=12, sampler="fair", sequence=list(spec.stream))
    # replayable: the saved file gives the same sequence and digest
    save_sequence(spec.stream, tmp_path / "s.json")
    again = ReplayStream.from_file(spec.space, tmp_path / "s.json")
    assert again.digest() == spec.stream.digest()


def test_conflict_stats_count_reuses_within_the_in_flight_window():
    sp = _space([3, 2])
    subs = [(0, 0, 0), (0, 1, 1), (0, 0, 1), (0, 2, 0)]
    got = conflict_stats(sp, subs, in_flight=2)
    # reuses: block1 c0 at 0 and 2 (gap 2); block2 c1 at 1 and 2 (gap 1), c0 at 0 and 3 (gap 3)
    assert got["reuses"] == 3 and got["min_reuse_distance"] == 1 and got["mean_reuse_distance"] == 2.0
    assert got["conflicts"] == 1  # subnet 2 reuses a candidate of subnet 1
    assert conflict_stats(sp, subs, in_flight=3)["conflicts"] == 1  # subnet 3's reuse is 3 back
    assert conflict_stats(sp, subs, in_flight=4)["conflicts"] == 2
    assert conflict_stats(sp, subs[:1], 4)["min_reuse_distance"] is None


def test_conflict_stats_count_one_candidate_choice_blocks():
    """A choice block of one candidate is used by every subnet: CSP serialises them all on it, and the statistics
    say so (issue 43, item 9: "0 of 20 subnets share a candidate" for a fully serialised run)."""
    sp = _space([1, 1])
    got = conflict_stats(sp, [(0, 0, 0)] * 20, in_flight=4)
    assert got["conflicts"] == 19 and got["min_reuse_distance"] == 1
    assert conflict_stats(_space([1]), [(0, 0), (0, 0)], 2)["conflicts"] == 1


@few_plans()  # which plan wins is not the point here
def test_simulate_reports_the_sampler_and_the_sequence_structure(capsys):
    args = ["simulate", "--space", "naspipe-k12", "--stages", "4", "--subnets", "120", "--json"]
    out = {}
    for sampler in ("uniform", "fair", "spread"):
        assert main([*args, "--sampler", sampler]) == 0
        out[sampler] = json.loads(capsys.readouterr().out)
    assert out["fair"]["sampler"] == "fair" and out["spread"]["sampler"] == "spread:fair"
    q = {k: v["sequence"] for k, v in out.items()}
    assert q["uniform"]["conflicts"] > q["fair"]["conflicts"] > q["spread"]["conflicts"] == 0
    assert q["spread"]["min_reuse_distance"] == spread_distance(12) and q["fair"]["in_flight"] == 4
    assert out["fair"]["throughput"] > 2 * out["uniform"]["throughput"]
    assert main([*args, "--sampler", "fair", "--sequence", "x.json"]) == 2
    assert "cannot be combined with --sequence" in capsys.readouterr().err
    assert main([*args, "--sampler", "fair:3"]) == 2
    assert "takes no argument" in capsys.readouterr().err


def test_compare_samplers_puts_the_sequences_side_by_side():
    from naspipe.experiments import compare_samplers
    from naspipe.spaces.partition import partition

    sp = preset("naspipe-k12")
    results, rows = compare_samplers(sp, partition(sp, 4), 0, 48, ("uniform", "fair", "spread"), "csp")
    assert list(results) == [r["sampler"] for r in rows] == ["uniform", "fair", "spread"]
    by = {r["sampler"]: r for r in rows}
    assert by["fair"]["makespan"] < by["uniform"]["makespan"]
    assert by["uniform"]["conflicts"] > by["fair"]["conflicts"] >= by["spread"]["conflicts"] == 0
    assert by["spread"]["min_reuse_distance"] == spread_distance(12)
