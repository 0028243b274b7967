"""``PathTable``: what admitting a subnet reads (its per-stage sums and links), computed once for every scheduler
over one stream, for the critical paths (csp-cp, csp-plan) and the conflict chains (csp-chain, csp-bw).

* readers sharing a table (admitting at their own pace, forgetting, copied mid-way) keep exactly the tails and
  chain depths each would keep with a table of its own (random instances and link weights, hypothesis);
* a simulation's schedulers compute each subnet's entry once, not once per stage;
* a long run keeps a bounded table, and a reader far behind still reads what it needs;
* readers in several threads read one table as they would alone;
* a subnet asked out of order, or another subnet under a computed number, is refused.
"""

from __future__ import annotations

import sys
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from naspipe.runspec.spec import RunSpec
from naspipe.sched.chains import ConflictChains
from naspipe.sched.critical import CriticalPaths, PathTable, PathTableError
from naspipe.sequences.sequence import ReplayStream, UniformStream
from naspipe.sim import SimOptions, simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset
from tests.sched.test_choices import SETTINGS, instances


def _tails(paths: CriticalPaths, subnets: range, P: int) -> dict[int, list[float]]:
    return {j: [paths.forward(j, s) for s in range(P)] + [paths.backward(j, s) for s in range(P)] for j in subnets}


def _state(reader: CriticalPaths | ConflictChains, subnets: range, P: int) -> dict[int, object]:
    if isinstance(reader, ConflictChains):
        return {j: reader.depth[j] for j in subnets}
    return _tails(reader, subnets, P)


@SETTINGS
@given(inst=instances(), data=st.data(), chains=st.booleans(), weights=st.lists(st.integers(1, 9), min_size=4,
                                                                                max_size=4))
def test_readers_of_one_table_keep_the_tails_of_readers_with_their_own(inst, data, chains, weights) -> None:
    space, part, subnets = inst
    P = part.stages
    blocks = [list(part.blocks(t)) for t in range(P)]
    table = PathTable(space, blocks, 0)
    if chains:  # conflict chains: the links, each weighing its heaviest stage
        def reader(tab):  # noqa: ANN001, ANN202
            return ConflictChains(space, blocks, [float(w) for w in weights[:P]], tab)
    else:
        def reader(tab):  # noqa: ANN001, ANN202
            return CriticalPaths(space, blocks, tab)
    shared = [reader(table) for _ in range(3)]
    own = [reader(None) for _ in range(3)]
    admitted, forgotten = [0, 0, 0], [0, 0, 0]
    for _ in range(data.draw(st.integers(0, 40))):  # the readers move at their own pace, as stages do
        r = data.draw(st.integers(0, 2))
        move = data.draw(st.sampled_from(["admit", "forget", "copy"]))
        if move == "admit" and admitted[r] < len(subnets):
            for paths in (shared[r], own[r]):
                paths.admit(admitted[r], subnets[admitted[r]])
            admitted[r] += 1
        elif move == "forget" and forgotten[r] < admitted[r]:
            for paths in (shared[r], own[r]):
                paths.forget(forgotten[r])
            forgotten[r] += 1
        elif move == "copy":  # a speculative copy goes on in its place; the original is dropped
            shared[r], own[r] = shared[r].clone(), own[r].clone()
    for r in range(3):
        kept = range(forgotten[r], admitted[r])
        assert _state(shared[r], kept, P) == _state(own[r], kept, P)


@pytest.mark.parametrize("policy", ["csp-cp", "csp-chain"])
def test_a_simulation_computes_each_subnets_entry_once_not_once_per_stage(monkeypatch, policy) -> None:
    computed: list[int] = []
    original = PathTable._compute

    def counting(self, k, subnet):  # noqa: ANN001, ANN202
        computed.append(k)
        return original(self, k, subnet)

    monkeypatch.setattr(PathTable, "_compute", counting)
    space = preset("naspipe-k48")
    run = RunSpec.of(space, partition(space, 8), UniformStream(space, 0, 60), policy)
    simulate(run, SimOptions())
    assert sorted(computed) == list(range(60))  # 8 stages, one table


@pytest.mark.parametrize("kind", [CriticalPaths, ConflictChains])
def test_a_long_run_keeps_a_bounded_table_and_a_reader_behind_reads_on(kind) -> None:
    space = preset("naspipe-k48")
    stream = UniformStream(space, 1, 3000)
    part = partition(space, 4)
    blocks = [list(part.blocks(t)) for t in range(4)]
    table = PathTable.shared(stream, blocks, 0)
    assert PathTable.shared(stream, blocks, 0) is table and PathTable.shared(stream, blocks, 5) is not table

    def reader(tab):  # noqa: ANN001, ANN202
        return CriticalPaths(space, blocks, tab) if kind is CriticalPaths else ConflictChains(
            space, blocks, [8.0, 6.0, 4.0, 2.0], tab)

    ahead, behind, mine = reader(table), reader(table), reader(None)
    for k in range(2500):
        ahead.admit(k, stream[k])
        if k >= 16:
            ahead.forget(k - 16)
        if k < 200:  # a reader 200 subnets behind, then as far behind as the run is long
            behind.admit(k, stream[k])
            mine.admit(k, stream[k])
        if k == 100:
            behind = behind.clone()  # a copy goes on in its place (the original is dropped)
    assert len(table) == 2500 - 200  # nothing below the slowest reader's next subnet is kept
    for k in range(200, 260):
        behind.admit(k, stream[k])
        mine.admit(k, stream[k])
    assert _state(behind, range(0, 260), 4) == _state(mine, range(0, 260), 4)
    del behind  # the slowest reader goes: what only it needed is dropped as the run goes on
    for k in range(2500, 3000):
        ahead.admit(k, stream[k])
    assert len(table) <= PathTable.PRUNE_EVERY
    late = PathTable.shared(stream, blocks, 0)  # a scheduler made after the table dropped its start
    assert late is not table
    reader(late).admit(0, stream[0])


def test_readers_in_several_threads_read_one_table_as_alone() -> None:
    """Schedulers over one stream may run in threads (``naspipe.experiments.jobs``); they share its table."""
    space = preset("naspipe-k48")
    stream = UniformStream(space, 21, 400)
    blocks = [list(partition(space, 4).blocks(t)) for t in range(4)]
    alone = CriticalPaths(space, blocks)
    for k in range(400):
        alone.admit(k, stream[k])
    expected = _tails(alone, range(380, 400), 4)
    table = PathTable.shared(stream, blocks, 0)
    got: dict[int, object] = {}

    def read(r: int) -> None:
        paths = CriticalPaths(space, blocks, table)
        try:
            for k in range(400):
                paths.admit(k, stream[k])
            got[r] = _tails(paths, range(380, 400), 4)
        except PathTableError as e:
            got[r] = e

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between almost any two bytecodes
    try:
        threads = [threading.Thread(target=read, args=(r,)) for r in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(before)
    assert got == {r: expected for r in range(4)}


def test_a_subnet_out_of_order_or_another_subnet_under_a_computed_number_is_refused() -> None:
    space = preset("naspipe-k48")
    stream = ReplayStream.materialize(UniformStream(space, 2, 10))
    part = partition(space, 2)
    blocks = [list(part.blocks(t)) for t in range(2)]
    table = PathTable(space, blocks, 0)
    paths = CriticalPaths(space, blocks, table)
    with pytest.raises(PathTableError, match="subnet 1 asked of a path table at subnet 0"):
        paths.admit(1, stream[1])
    paths.admit(0, stream[0])
    other = CriticalPaths(space, blocks, table)
    with pytest.raises(PathTableError, match="subnet 0 differs"):
        other.admit(0, stream[1])
