"""Checkpoints and resume: a run killed after a checkpoint, resumed, equals an uninterrupted run bit for bit.

The runs are in-process ``train`` calls (the session's fork server makes them start fast); the resume of
the first case goes through the CLI (``naspipe train --resume DIR``), the second through the API.
"""

from __future__ import annotations

import json

import pytest
import torch

from naspipe.cli import main
from naspipe.oracle.sequential_trainer import train_reference
from naspipe.runfolder.results import param_hashes, verify, write_losses, write_params
from naspipe.runtime import TrainConfig, train
from naspipe.runtime.checkpoint import (
    Checkpointer,
    CheckpointError,
    check_resume,
    fingerprint,
    mark_complete,
    newest_complete,
    position_dir,
    read_complete,
    root_of,
)
from naspipe.runtime.processes.launcher import TrainError
from naspipe.runtime.stagerun import StageRun
from naspipe.sequences.samplers import DEFAULT_SAMPLER, make_stream
from naspipe.spaces.shared import parse_shared
from naspipe.spaces.space import preset
from tests.helpers.refusals import refused

pytestmark = pytest.mark.usefixtures("no_process_left_behind")


def test_killed_after_a_checkpoint_then_resumed_equals_an_uninterrupted_run(tmp_path):
    """csp, 2 stages, tiny-transformer, 40 subnets, a checkpoint every 10, shared layers delayed:2 (the fixed
    versions v_18, v_19, v_20 held at the fence are saved and restored); stage 1 is SIGKILLed at subnet 25."""
    run, full = tmp_path / "run", tmp_path / "full"
    common = ["--space", "tiny-transformer", "--stages", "2", "--subnets", "40", "--shared-layers", "delayed:2",
              "--seed", "1", "--no-progress"]
    assert main(["train", *common, "--checkpoint-every", "10", "--out", str(run), "--fault", "kill:1:25"]) == 1
    status = json.loads((run / "status.json").read_text())
    assert status["complete"] is False and status["rank"] == 1 and status["checkpoint"] == 20
    root = root_of(run)
    assert json.loads((root / "complete.json").read_text())["position"] == 20
    assert sorted(p.name for p in root.iterdir()) == ["c000000020", "complete.json"]  # older ones pruned
    saved = torch.load(position_dir(root, 20) / "stage0.pt", weights_only=True)
    assert saved["position"] == 20 and saved["versions"]["next"] == 20
    assert sorted(saved["versions"]["versions"]) == [18, 19, 20]  # what subnets 20, 21, 22 read
    last = torch.load(position_dir(root, 20) / "stage1.pt", weights_only=True)
    assert sorted(last["losses"]) == list(range(20))
    # resume in place: the same arguments, --resume instead of --out
    assert main(["train", *common, "--checkpoint-every", "10", "--resume", str(run)]) == 0
    assert json.loads((run / "status.json").read_text()) == {"complete": True}
    m = json.loads((run / "metrics.json").read_text())
    assert m["config"]["resumed_from"] == 20 and m["config"]["checkpoint_every"] == 10
    assert json.loads((root / "complete.json").read_text())["position"] == 30
    assert main(["train", *common, "--out", str(full)]) == 0
    assert main(["verify", str(run), str(full)]) == 0


@pytest.mark.parametrize("policy,shared,optimizer,n,every,fault,saved", [
    ("csp", "serial", "adam", 24, 8, "raise:0:19", 16),  # per-candidate Adam moments and step counts
    ("csp-bw", "delayed:1", "momentum", 16, 6, "exit:1:14", 12),  # split backward: the write is W
])
def test_resume_through_the_api_restores_optimizer_state(tmp_path, policy, shared, optimizer, n, every, fault, saved):
    sp = preset("digits-cnn")
    kw = dict(stages=2, subnets=n, shared_layers=shared, optimizer=optimizer, seed=2, progress=False,
              checkpoint_every=every, timeout=60, policy=policy)
    with pytest.raises(TrainError, match=f"last complete checkpoint is at subnet {saved}"):
        train(TrainConfig.create(sp, tmp_path / "run", fault=fault, **kw))
    cfg = TrainConfig.create(sp, tmp_path / "resumed", resume=tmp_path / "run", **kw)
    assert cfg.start == saved and cfg.resume.endswith(f"c{saved:09d}")
    result = train(cfg)
    ref = train_reference(sp, make_stream(sp, 2, n, DEFAULT_SAMPLER), 2, parse_shared(shared), optimizer=optimizer)
    (tmp_path / "ref").mkdir()
    write_losses(tmp_path / "ref" / "losses.csv", ref.losses)
    write_params(tmp_path / "ref" / "params.json", param_hashes(ref.model.global_named_parameters()))
    ok, msg = verify(result.out, tmp_path / "ref")
    assert ok, msg
    # the source run's checkpoint is untouched; the resumed run (no fence left before the end) wrote none
    assert newest_complete(root_of(tmp_path / "run")) == saved
    assert not root_of(tmp_path / "resumed").exists()


def test_completion_needs_every_stage_and_keeps_the_previous_checkpoint(tmp_path):
    root = tmp_path / "checkpoint"
    for c, stages in ((10, (0, 1)), (20, (1,))):
        d = position_dir(root, c)
        d.mkdir(parents=True)
        for s in stages:
            (d / f"stage{s}.pt").write_bytes(b"x")
            (d / f"stage{s}.json").write_text(json.dumps({"fingerprint": {"stages": 2}}))
    assert newest_complete(root) == 10
    assert not mark_complete(root, 20, 2)
    assert mark_complete(root, 10, 2) and position_dir(root, 20).exists()
    (position_dir(root, 20) / "stage0.json").write_text(json.dumps({"fingerprint": {"stages": 2}}))
    assert newest_complete(root) == 20 and mark_complete(root, 20, 2)
    assert not position_dir(root, 10).exists()  # the previous one goes once the new one is complete
    assert json.loads((root / "complete.json").read_text())["position"] == 20


def test_checkpoint_files_nested_too_deeply_are_corrupted_not_a_traceback(tmp_path):
    """Python's JSON parser raises RecursionError for deep nesting: a hand-edited ``complete.json`` once broke a
    resumed run's failure handling (two tracebacks, no status.json)."""
    root = tmp_path / "checkpoint"
    d = position_dir(root, 10)
    d.mkdir(parents=True)
    for s in (0, 1):
        (d / f"stage{s}.pt").write_bytes(b"x")
        (d / f"stage{s}.json").write_text(json.dumps({"fingerprint": {"stages": 2}}))
    deep = "[" * 100_000 + "]" * 100_000
    (root / "complete.json").write_text(deep)
    assert read_complete(root) is None and newest_complete(root) == 10  # marked or not, the stages' files decide
    (d / "stage0.json").write_text(deep)
    with pytest.raises(CheckpointError, match=r"stage0.json' is corrupted \(NestedTooDeeply\)"):
        newest_complete(root)


def test_fences_and_refusals_without_processes(tmp_path):
    cfg = TrainConfig.create("digits-cnn", tmp_path / "o", stages=2, subnets=25, checkpoint_every=10,
                             progress=False)
    assert Checkpointer(cfg, StageRun.of(cfg, 0, torch.device("cpu"))).fence == 10
    later = cfg.replace(checkpoint_every=30)
    assert Checkpointer(later, StageRun.local(0, 2, cfg.policy)).fence is None  # past the end: none
    fp = fingerprint(cfg)
    assert fp["stages"] == 2 and fp["subnets"] == 25 and len(fp["sequence_sha256"]) == 64
    assert fingerprint(cfg.replace(seed=1)) != fp
    with pytest.raises(CheckpointError, match="does not exist"):
        check_resume(cfg, tmp_path / "nothing")
    with pytest.raises(Exception, match="multiple of its 4 micro-batches"):
        TrainConfig.create("digits-cnn", tmp_path / "o", stages=2, subnets=25, policy="bsp:4", checkpoint_every=10)
    with pytest.raises(Exception, match="checkpoint_every must be"):
        TrainConfig.create("digits-cnn", tmp_path / "o", stages=2, subnets=25, checkpoint_every=0)
    for policy in ("pipedream", "2bw", "pipemare", "pipeoptim"):  # their rules save state through state_dict
        TrainConfig.create("digits-cnn", tmp_path / "o", stages=2, subnets=25, policy=policy, checkpoint_every=8)


@pytest.mark.parametrize("policy,every,fault,saved", [
    ("2bw:2", 4, "exit:1:13", 12),  # 2bw's weight versions (state_dict of its rule)
    ("pipemare:t2=0.1", 5, "raise:0:12", 10),  # T2 velocities
    ("pipeoptim", 5, "exit:1:12", 10),  # the last gradients of the prediction
])
def test_asynchronous_baselines_checkpoint_and_their_resumed_run_continues(tmp_path, policy, every, fault, saved):
    """The update rules save their state through ``state_dict`` (no private fields): a killed asynchronous run
    resumes from its checkpoint and trains to the end. Deterministic rules (2bw) even end bit for bit where an
    uninterrupted run ends; bit-exactness is promised only for the exact policies."""
    sp = preset("digits-cnn")
    kw = dict(stages=2, subnets=16, optimizer="momentum", seed=4, progress=False, checkpoint_every=every,
              timeout=60, policy=policy)
    with pytest.raises(TrainError, match=f"last complete checkpoint is at subnet {saved}"):
        train(TrainConfig.create(sp, tmp_path / "run", fault=fault, **kw))
    saved_state = torch.load(position_dir(root_of(tmp_path / "run"), saved) / "stage0.pt", weights_only=True)
    assert "rule" in saved_state and saved_state["position"] == saved
    result = train(TrainConfig.create(sp, tmp_path / "resumed", resume=tmp_path / "run", **kw))
    assert sorted(result.losses) == list(range(saved, 16)) or sorted(result.losses) == list(range(16))
    if policy.startswith("2bw"):
        full = train(TrainConfig.create(sp, tmp_path / "full", **{**kw, "checkpoint_every": None}))
        ok, msg = verify(result.out, full.out)
        assert ok, msg


# issue 13, hole 1: threads are part of a run's identity
def test_resume_with_another_thread_count_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--space", "digits-cnn", "--stages", "2", "--subnets", "12", "--no-progress",
            "--checkpoint-every", "4"]
    assert main([*args, "--out", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    refused(capsys, [*args, "--threads", "2", "--resume", str(out)],
             "was taken with threads 1, but the arguments give threads 2; resume with the arguments of the "
             "interrupted run")
    assert sorted(p.name for p in out.iterdir()) == before
