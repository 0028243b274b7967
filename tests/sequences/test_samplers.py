"""Run-time generated sequences: the evolutionary sampler is pure, seeded, reads only results <= j - lag,
and the reference trainer fed with its losses is reproducible bit for bit (library and CLI)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping

import pytest

from naspipe.sequences.samplers import EvolutionSampler, SamplerError, SamplerSpec, make_stream, parse_sampler
from naspipe.sequences.sequence import OnlineStream, UniformStream, WindowError
from naspipe.spaces.space import preset

SPACE = preset("digits-cnn")
UNIT = preset("unit-k6")


def synthetic_loss(subnet) -> float:
    """Lower candidate indices are better; a small subnet-dependent jitter breaks ties."""
    return sum(subnet) + (hash(tuple(subnet)) % 97) / 1000.0


class Recording(Mapping):
    """A mapping that records every key read and refuses iteration (a sampler must not scan results)."""

    def __init__(self, data: dict[int, float]):
        self.data, self.read = data, []

    def __getitem__(self, k: int) -> float:
        self.read.append(k)
        return self.data[k]

    def __iter__(self) -> Iterator[int]:
        raise AssertionError("the sampler iterated over results")

    def __len__(self) -> int:
        raise AssertionError("the sampler asked how many results exist")


def run_sampler(sampler: EvolutionSampler, n: int, future: bool = False) -> tuple[list, list]:
    """Drive ``sampler`` like OnlineStream; with ``future`` the results also hold losses not yet allowed."""
    subnets, reads = [], []
    losses: dict[int, float] = {}
    for j in range(n):
        visible = {i: v for i, v in losses.items() if i <= j - sampler.lag}
        if future:  # garbage for every index the sampler may not read
            visible.update({i: -1e9 for i in range(max(0, j - sampler.lag + 1), j + 50)})
        rec = Recording(visible)
        s = sampler.propose(j, rec)
        reads.append((j, rec.read))
        subnets.append(s)
        losses[j] = synthetic_loss(s)
    return subnets, reads


def test_parse_sampler():
    assert parse_sampler("uniform") == SamplerSpec("uniform")
    assert parse_sampler("evolution") == SamplerSpec("evolution", 16)
    assert parse_sampler(" Evolution:5 ") == SamplerSpec("evolution", 5)
    assert str(parse_sampler("evolution:7")) == "evolution:7"
    for bad in ("evo", "evolution:", "evolution:0", "evolution:-1", "evolution:x", "uniform:3", ""):
        with pytest.raises(SamplerError):
            parse_sampler(bad)


def test_bad_sampler_settings():
    for kw in ({"lag": 0}, {"population": 4, "tournament": 5}, {"explore": 1.5}, {"warmup": -1}):
        with pytest.raises(SamplerError):
            EvolutionSampler(SPACE, **kw)


def test_same_results_same_subnets_and_seed_matters():
    a, _ = run_sampler(EvolutionSampler(SPACE, seed=3, lag=4, population=8, tournament=3), 200)
    b, _ = run_sampler(EvolutionSampler(SPACE, seed=3, lag=4, population=8, tournament=3), 200)
    c, _ = run_sampler(EvolutionSampler(SPACE, seed=4, lag=4, population=8, tournament=3), 200)
    assert a == b and a != c
    assert all(SPACE.validate_subnet(s) == s for s in a)


def test_warmup_is_the_uniform_stream_then_evolution_departs():
    sampler = EvolutionSampler(SPACE, seed=1, lag=4, population=8, tournament=3, explore=0.0)
    subs, _ = run_sampler(sampler, 120)
    uni = UniformStream(SPACE, 1, 120)
    assert sampler.warmup == 12
    assert subs[:12] == [uni[j] for j in range(12)]
    assert sum(subs[j] != uni[j] for j in range(12, 120)) > 100
    # every evolved subnet is a mutation of an earlier one (differs in >= 1 choice block)
    assert all(any(sum(a != b for a, b in zip(subs[j], subs[i], strict=True)) >= 1 for i in range(j)) for j in
               range(12, 120))


def test_reads_only_results_up_to_j_minus_lag_and_ignores_newer_ones():
    for lag in (1, 3, 10):
        clean, reads = run_sampler(EvolutionSampler(SPACE, seed=0, lag=lag, population=6, tournament=2), 150)
        for j, keys in reads:
            assert all(0 <= k <= j - lag for k in keys), (lag, j, keys)
        assert any(keys for _, keys in reads)  # it really read losses
        polluted, _ = run_sampler(EvolutionSampler(SPACE, seed=0, lag=lag, population=6, tournament=2), 150,
                                  future=True)
        assert polluted == clean


def test_a_fresh_sampler_can_start_at_any_j():
    full, _ = run_sampler(EvolutionSampler(SPACE, seed=2, lag=3, population=6, tournament=2), 100)
    losses = {i: synthetic_loss(s) for i, s in enumerate(full)}
    late = EvolutionSampler(SPACE, seed=2, lag=3, population=6, tournament=2)
    assert late.propose(99, {i: v for i, v in losses.items() if i <= 96}) == full[99]


def test_selection_pressure_lowers_the_loss():
    sampler = EvolutionSampler(UNIT, seed=0, lag=4, population=16, tournament=4)
    subs, _ = run_sampler(sampler, 600)
    uni = UniformStream(UNIT, 0, 600)
    evolved = sum(synthetic_loss(s) for s in subs[300:]) / 300
    uniform = sum(synthetic_loss(uni[j]) for j in range(300, 600)) / 300
    assert evolved < 0.6 * uniform


def test_missing_and_nan_losses():
    sampler = EvolutionSampler(UNIT, seed=0, lag=2, population=4, tournament=4, warmup=0, explore=0.0)
    with pytest.raises(KeyError, match="loss of subnet"):
        sampler.propose(10, {})
    # all four candidates in the window: the NaN one never wins, the lowest finite loss does
    s = EvolutionSampler(UNIT, seed=0, lag=1, population=4, tournament=4, warmup=4, explore=0.0)
    parents = [s.propose(j, {}) for j in range(4)]
    child = s.propose(4, {0: math.nan, 1: 5.0, 2: 1.0, 3: 7.0})
    assert sum(a != b for a, b in zip(child, parents[2], strict=True)) >= 1
    diffs = [sum(a != b for a, b in zip(child, p, strict=True)) for p in parents]
    assert diffs[2] == min(diffs)


def test_online_stream_refuses_to_run_ahead_of_the_losses():
    stream = make_stream(SPACE, 0, 50, "evolution:3")
    assert isinstance(stream, OnlineStream)
    for j in range(3):
        stream[j]
    with pytest.raises(WindowError):
        stream[3]
    stream.report(0, 1.0)
    assert stream[3] is not None


def test_samplers_module_imports_no_torch():
    code = "import sys, naspipe.sequences.samplers; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_reference_with_online_stream_is_bit_identical():
    from naspipe.oracle.sequential_trainer import train_reference
    from naspipe.runfolder.results import param_hashes
    from naspipe.spaces.shared import SharedLayers

    def once():
        sampler = EvolutionSampler(SPACE, seed=5, lag=2, population=6, tournament=3)
        stream = OnlineStream(SPACE, sampler, 40)
        res = train_reference(SPACE, stream, 5, SharedLayers(), optimizer="adam")
        return res, stream

    (a, sa), (b, sb) = once(), once()
    assert [x.hex() for x in a.losses.values()] == [x.hex() for x in b.losses.values()]
    assert param_hashes(a.model.global_named_parameters()) == param_hashes(b.model.global_named_parameters())
    assert sa.results == a.losses  # every loss was reported right after its subnet trained
    assert list(sa) == list(sb)
    uni = UniformStream(SPACE, 5, 40)
    assert [sa[j] for j in range(40)] != [uni[j] for j in range(40)]


def test_cli_reference_with_evolution_sampler(tmp_path, capsys):
    from naspipe.cli import main

    args = ["reference", "--space", "digits-cnn", "--subnets", "30", "--optimizer", "adam", "--no-progress",
            "--sampler", "evolution:2"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    m = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert m["config"]["sampler"] == "evolution:2"
    seq = json.loads((tmp_path / "a" / "sequence.json").read_text())
    assert seq["sha256"] == m["config"]["sequence_sha256"] and len(seq["subnets"]) == 30
    # replaying the generated sequence with the plain stream gives the same run
    assert main([*args[:-2], "--sequence", str(tmp_path / "a" / "sequence.json"), "--out", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "a"), str(tmp_path / "c")]) == 0
    for bad in (["--sampler", "evo"], ["--sampler", "evolution:0"],
                ["--sampler", "evolution", "--sequence", str(tmp_path / "a" / "sequence.json")]):
        capsys.readouterr()
        assert main(["reference", "--space", "digits-cnn", "--out", str(tmp_path / "x"), *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "sampler" in err
    assert not (tmp_path / "x").exists()
