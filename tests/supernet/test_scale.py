"""Blocks of thousands of candidates (issue 28, item 10): plain data linear in the candidates, no per-candidate
work where none is needed. Each test counts work or live objects (no wall-clock bound): ``simulate`` builds no
candidate, the probe keeps one output per block, a scheduler reads costs only of the subnets it admits, and
looking a candidate up does not copy its block."""

from __future__ import annotations

import json
import time

import scale_supernets

import naspipe
from naspipe.cli import main


def test_simulate_of_15625_candidates_builds_none_of_them(capsys):
    """``naspipe simulate`` reads names and costs: it used to build and run all 15,625 (minutes, GBs)."""
    scale_supernets.BUILT[0] = 0
    rc = main(["simulate", "--space", "scale_supernets:cells", "--stages", "2", "--subnets", "20", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads(out)
    assert res["subnets"] == 20 and res["stages"] == 2 and res["makespan"] > 0
    assert scale_supernets.BUILT[0] == 0


def test_the_probe_keeps_one_output_per_block_not_one_per_candidate():
    """The probe (train, reference) runs every candidate; it used to keep every output of a block alive."""
    scale_supernets.LIVE.clear()
    scale_supernets.PEAK[0] = 0
    naspipe.resolve_space(scale_supernets.tracked(40))
    assert len(scale_supernets.LIVE) >= 80  # every candidate ran (twice: the determinism check)
    # alive when a candidate runs: the block's first output, the previous candidate's, the current one's first run
    assert scale_supernets.PEAK[0] <= 3


class _Counted(naspipe.spaces.space.Candidate):
    reads = 0

    def __getattribute__(self, name: str):  # noqa: ANN204
        if name in ("fwd", "bwd"):
            type(self).reads += 1
        return super().__getattribute__(name)


def test_a_scheduler_reads_the_costs_of_the_subnets_it_admits_only():
    """csp-plan makes hundreds of schedulers; each used to copy every candidate's costs (O(K) per scheduler)."""
    from naspipe.sched.critical import CriticalPaths
    from naspipe.spaces.space import Block, SearchSpace

    k = 5000
    cands = tuple(_Counted(f"c{i}") for i in range(k))
    sp = SearchSpace("wide", (Block("a", cands), Block("b", cands)))
    _Counted.reads = 0
    cp = CriticalPaths(sp, [[0], [1]])
    assert _Counted.reads == 0
    for j in range(10):
        cp.admit(j, (j, j + 1))
    assert _Counted.reads == 10 * 2 * 2  # fwd and bwd of each admitted subnet's candidate in each block


def test_looking_a_candidate_up_does_not_copy_its_block():
    """Building candidate c looked its name and factory up by copying the block's dict: quadratic in K."""
    def lookups(sn: naspipe.Supernet) -> float:
        t = time.process_time()
        for c in range(0, 2000):
            sn.factory(1, c % 10)
            sn.candidate_names(1)[c % 10]
        return time.process_time() - t

    small, big = scale_supernets.tracked(10), scale_supernets.tracked(100_000)
    lookups(small), lookups(big)  # warm
    # O(1): about equal; the old copy of 100,000 entries per lookup made it thousands of times slower
    assert lookups(big) < 20 * lookups(small) + 0.01
