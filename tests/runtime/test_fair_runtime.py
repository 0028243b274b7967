"""Fair and spread sequences in the multi-process runtime: bit-identical to the reference with the same sampler.

A pipeline run (csp, 2 stages) with ``--sampler fair`` equals ``naspipe reference --sampler fair`` (``naspipe
verify``); the sequence it wrote replays as a plain ``--sequence``; a spread run equals its reference through
the API; a run stopped after a checkpoint in the middle of a fair group resumes bit for bit.
"""

from __future__ import annotations

import json

import pytest

from naspipe.cli import main
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes, verify, write_losses, write_params
from naspipe.runtime import TrainConfig, train
from naspipe.runtime.processes.launcher import TrainError
from naspipe.sequences.fair import FairStream, SpreadStream
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import preset

pytestmark = pytest.mark.usefixtures("no_process_left_behind")

SPACE, SEED, N = "digits-cnn", 4, 20  # 6 candidates per block: 3 full fair groups and a partial one


def _reference(tmp_path, stream, name="ref", **kw):
    sp = stream.space
    ref = train_reference(sp, stream, SEED, parse_shared(kw.pop("shared", "frozen")), **kw)
    out = tmp_path / name
    out.mkdir()
    write_losses(out / "losses.csv", ref.losses)
    write_params(out / "params.json", param_hashes(ref.model.global_named_parameters()))
    return out


def test_a_fair_pipeline_run_equals_the_fair_reference_and_replays_from_its_file(tmp_path):
    common = ["--space", SPACE, "--subnets", str(N), "--seed", str(SEED), "--sampler", "fair", "--no-progress"]
    run, ref, replay = tmp_path / "run", tmp_path / "ref", tmp_path / "replay"
    assert main(["train", *common, "--stages", "2", "--policy", "csp", "--out", str(run)]) == 0
    assert main(["reference", *common, "--out", str(ref)]) == 0
    assert main(["verify", str(run), str(ref)]) == 0
    seq = json.loads((run / "sequence.json").read_text())
    assert seq == json.loads((ref / "sequence.json").read_text())
    assert seq["subnets"] == [list(s) for s in FairStream(preset(SPACE), SEED, N)]
    m = json.loads((run / "metrics.json").read_text())
    assert m["config"]["sampler"] == "fair" and m["config"]["sequence_sha256"] == seq["sha256"]
    assert m["sequence"]["in_flight"] == 2 and m["sequence"]["min_reuse_distance"] >= 1
    # the file replays as a plain sequence: the same run
    assert main(["reference", "--space", SPACE, "--subnets", str(N), "--seed", str(SEED), "--sequence",
                 str(run / "sequence.json"), "--no-progress", "--out", str(replay)]) == 0
    assert main(["verify", str(run), str(replay)]) == 0


def test_a_spread_pipeline_run_equals_its_reference(tmp_path):
    cfg = TrainConfig.create(SPACE, tmp_path / "run", stages=2, subnets=N, seed=SEED, sampler="spread",
                             policy="csp", progress=False, timeout=60)
    assert cfg.sampler == "spread:fair"
    assert list(cfg.sequence) == list(SpreadStream(preset(SPACE), SEED, N))
    result = train(cfg)
    assert result.metrics["sequence"]["conflicts"] == 0  # reuses at least 5 apart, 2 in flight
    ok, msg = verify(result.out, _reference(tmp_path, SpreadStream(preset(SPACE), SEED, N)))
    assert ok, msg


def test_a_fair_run_resumes_mid_group_bit_for_bit(tmp_path):
    sp = preset(SPACE)
    kw = dict(stages=2, subnets=N, seed=SEED, sampler="fair", optimizer="momentum", policy="csp",
              progress=False, timeout=60, checkpoint_every=4)  # 4, 8, 12, 16: fences inside groups of 6
    with pytest.raises(TrainError, match="last complete checkpoint is at subnet 8"):
        train(TrainConfig.create(sp, tmp_path / "run", fault="raise:1:10", **kw))
    cfg = TrainConfig.create(sp, tmp_path / "resumed", resume=tmp_path / "run", **kw)
    assert cfg.start == 8 and cfg.sampler == "fair"
    result = train(cfg)
    ok, msg = verify(result.out, _reference(tmp_path, FairStream(sp, SEED, N), optimizer="momentum"))
    assert ok, msg


def test_from_spec_takes_the_sampler_of_its_options_and_refuses_it_with_a_replayed_sequence(tmp_path):
    from naspipe.runspec.spec import RunSpec
    from naspipe.runtime import ConfigError

    spec = RunSpec.create(SPACE, stages=2, subnets=N, seed=SEED)  # built uniform
    cfg = TrainConfig.from_spec(spec, tmp_path / "o", sampler="fair")
    assert cfg.sampler == "fair" and list(cfg.sequence) == list(FairStream(preset(SPACE), SEED, N))
    assert list(TrainConfig.from_spec(spec, tmp_path / "o").sequence) == list(spec.stream)  # uniform kept
    replayed = RunSpec.create(SPACE, stages=2, subnets=N, sequence=list(spec.stream))
    with pytest.raises(ConfigError, match="cannot be combined with sequence"):
        TrainConfig.from_spec(replayed, tmp_path / "o", sampler="spread")
