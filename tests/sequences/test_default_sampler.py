"""The default sampler (issue 41): new runs sample ``fair``; a replayed sequence, a resumed run and an old record
keep what they were trained with."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from naspipe.cli import main
from naspipe.cli.common import given_sampler
from naspipe.runspec.spec import RunSpec
from naspipe.runtime.checkpoint import recorded_sampler
from naspipe.sequences.samplers import DEFAULT_SAMPLER, RECORDED_BEFORE, make_stream
from naspipe.spaces.space import preset

OLD_RUN = Path(__file__).resolve().parents[1] / "runfolder" / "premove_runs" / "digits-cnn"  # (checkpointed, uniform)


def test_a_new_run_samples_fair_and_a_given_sequence_is_replayed():
    assert DEFAULT_SAMPLER == "fair" and RECORDED_BEFORE == "uniform"
    spec = RunSpec.create("naspipe-k12", subnets=40, seed=3)
    sp = preset("naspipe-k12")
    assert spec.sampler == "fair" and not spec.replayed
    assert [spec.stream[j] for j in range(40)] == list(make_stream(sp, 3, 40, "fair"))
    assert [spec.stream[j] for j in range(40)] != list(make_stream(sp, 3, 40, "uniform"))
    given = list(make_stream(sp, 3, 40, "uniform"))
    replay = RunSpec.create("naspipe-k12", subnets=40, seed=3, sequence=given)
    assert replay.sampler == "uniform" and replay.replayed and [replay.stream[j] for j in range(40)] == given


def test_the_commands_record_the_default(tmp_path, capsys):
    assert main(["simulate", "--space", "naspipe-k12", "--subnets", "20", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sampler"] == "fair"
    seq = tmp_path / "seq.json"
    assert main(["simulate", "--space", "naspipe-k12", "--subnets", "20", "--sampler", "uniform", "--json"]) == 0
    capsys.readouterr()
    from naspipe.sequences.sequence import save_sequence

    save_sequence(make_stream(preset("naspipe-k12"), 0, 20, "uniform"), seq)
    assert main(["simulate", "--space", "naspipe-k12", "--subnets", "20", "--sequence", str(seq), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sampler"] == "uniform"  # a replay: no "--sampler fair" conflict


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"sampler": None, "sequence": None, "resume": None, **kw})


def test_a_resume_keeps_the_sampler_its_checkpoint_records(tmp_path):
    assert recorded_sampler(OLD_RUN) == "uniform"
    assert given_sampler(_args(resume=str(OLD_RUN))) == "uniform"  # not the new default
    assert given_sampler(_args()) == DEFAULT_SAMPLER
    assert given_sampler(_args(sampler="spread", resume=str(OLD_RUN))) == "spread"  # named: as given
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    for side in run.glob("checkpoint/*/stage0.json"):
        meta = json.loads(side.read_text())
        meta["fingerprint"]["sampler"] = "fair"
        side.write_text(json.dumps(meta))
    assert given_sampler(_args(resume=str(run))) == "fair"
    for side in run.glob("checkpoint/*/stage0.json"):
        meta = json.loads(side.read_text())
        del meta["fingerprint"]["sampler"]  # a record from before the sampler was recorded
        side.write_text(json.dumps(meta))
    assert given_sampler(_args(resume=str(run))) == RECORDED_BEFORE
    assert recorded_sampler(tmp_path / "nothing") is None
