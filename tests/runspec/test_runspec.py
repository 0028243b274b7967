"""One run description (``naspipe.runspec.spec``): the command line and the library share its defaults and checks."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np
import pytest

from naspipe.cli.common import add_run_arguments, resolve_run
from naspipe.runspec.spec import DEFAULT_POLICY, DEFAULT_SHARED, DEFAULT_WINDOW, RunSpec, RunSpecError
from naspipe.runtime.config import ConfigError, TrainConfig
from naspipe.sched.policies import make_scheduler, stage_specs
from naspipe.sched.registry import ENV, unregister_policy
from naspipe.sim import choose_plan
from naspipe.spaces.partition import Partition


def test_the_command_line_and_the_library_share_one_set_of_defaults(tmp_path):
    p = argparse.ArgumentParser()
    add_run_arguments(p, default_space="digits-cnn", default_subnets=6)
    args = p.parse_args(["--stages", "2"])
    cli = resolve_run(args)
    lib = RunSpec.create("digits-cnn", stages=2, subnets=6)
    assert (cli.policy, cli.window, str(cli.shared), cli.seed) == (lib.policy, lib.window, str(lib.shared), lib.seed)
    assert (lib.policy, lib.window, str(lib.shared), DEFAULT_SHARED) == (DEFAULT_POLICY, DEFAULT_WINDOW, "frozen",
                                                                          "auto")  # (a preset: auto is frozen)
    cfg = TrainConfig.create("digits-cnn", tmp_path / "run", stages=2, subnets=6)
    assert (cfg.policy_name, cfg.window, str(cfg.shared), cfg.seed) == (lib.policy, lib.window, str(lib.shared), 0)
    # the default, csp-plan, has its plan chosen once, on the run's own sequence, and recorded in the policy
    assert cfg.policy == choose_plan(lib).policy
    assert cfg.sequence == tuple(cli.stream[j] for j in range(6))
    assert cfg.partition == cli.partition
    declared = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert (declared["policy"], declared["window"]) == (DEFAULT_POLICY, DEFAULT_WINDOW)


def test_a_training_config_is_built_from_the_run_description(tmp_path):
    spec = RunSpec.create("digits-cnn", stages=2, subnets=5, seed=3, policy="csp", window=7,
                          shared_layers="serial")
    cfg = TrainConfig.from_spec(spec, tmp_path / "run", optimizer="adam")
    assert (cfg.policy, cfg.window, cfg.seed, str(cfg.shared), cfg.stages, cfg.optimizer) == (
        "csp", 7, 3, "serial", 2, "adam")
    assert cfg.sequence == tuple(spec.stream[j] for j in range(5))
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['policy'\]"):
        TrainConfig.from_spec(spec, tmp_path / "run", policy="gpipe")  # the spec says which policy


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"space": "no-such-space"}, "no-such-space"),
    ({"stages": 0}, "stages must be a whole number >= 1, got 0"),
    ({"subnets": True}, "subnets must be a whole number >= 1, got True"),
    ({"window": 0}, "window must be a whole number >= 1, got 0"),
    ({"seed": 1.5}, "seed must be a whole number, got 1.5"),
    ({"seed": True}, "seed must be a whole number, got True"),
    ({"sequence": 42}, "sequence must be a file, a subnet stream or a list of subnets, got int"),
    ({"sequence": {"a": 1}}, "got dict"),
    ({"sequence": [1, 2, 3, 4]}, "its subnets must be lists of choices or {label: candidate} objects, got 1 first"),
    ({"stages": 1.5}, "stages must be a whole number >= 1, got 1.5"),
    ({"policy": "nope"}, "unknown policy 'nope'"),
    ({"policy": "no_such_module_xyz:csp2"}, "neither a policy nor an importable module"),
    ({"shared_layers": "delayed:x"}, "delayed"),
    ({"stages": 99}, "stages"),
    ({"shared_layers": None}, "shared layers must be frozen, serial or delayed:D .* got None"),
    ({"partition": Partition(((0, 3), (5, 8)))}, r"partition \[\[0, 3\], \[5, 8\]\] does not split the 8 blocks"),
    ({"partition": Partition(((0, 5), (3, 8)))}, "into contiguous non-empty stages"),  # (an AssertionError, deep)
    ({"partition": Partition(((0, 2), (2, 12)))}, "does not split the 8 blocks"),  # another space's (an IndexError)
], ids=lambda v: None if isinstance(v, str) else str(v)[:40])
def test_bad_descriptions_are_one_line(kwargs, message):
    kwargs = {"space": "digits-cnn", "subnets": 4, **kwargs}
    with pytest.raises(RunSpecError, match=message) as e:
        RunSpec.create(kwargs.pop("space"), **kwargs)
    assert "\n" not in str(e.value)


def test_sequences_seeds_and_user_policies(tmp_path, monkeypatch):
    spec = RunSpec.create("digits-cnn", subnets=4, seed=np.int64(2))
    assert spec.seed == 2 and type(spec.seed) is int
    counts = RunSpec.create("digits-cnn", stages=np.int64(2), subnets=np.int64(4), window=np.int64(8))
    assert (counts.stages, counts.subnets, counts.window) == (2, 4, 8) and type(counts.window) is int
    path = tmp_path / "seq.json"
    path.write_text(json.dumps({"space": "digits-cnn", "subnets": [list(spec.stream[j]) for j in range(3)]}))
    with pytest.raises(RunSpecError, match=r"holds 3 subnets, fewer than the 4 to train"):
        RunSpec.create("digits-cnn", subnets=4, sequence=str(path))
    replay = RunSpec.create("digits-cnn", subnets=2, sequence=path)
    assert [replay.stream[j] for j in range(2)] == [spec.stream[j] for j in range(2)]
    monkeypatch.setenv(ENV, os.environ.get(ENV, ""))  # where the registration records its module; restored
    try:
        user = RunSpec.create("digits-cnn", subnets=2, policy="user_policies:csp-newest")
        assert user.policy == "csp-newest"
        assert dataclasses.replace(user, window=3).window == 3
    finally:  # the module's registration is undone: it leaves no policy behind for the worker's next test
        unregister_policy("csp-newest")
        sys.modules.pop("user_policies", None)


def test_from_spec_refuses_what_create_refuses(tmp_path):
    given = RunSpec.create("digits-cnn", subnets=4, sequence=[RunSpec.create("digits-cnn", subnets=4).stream[j]
                                                              for j in range(4)])
    assert given.replayed and not RunSpec.create("digits-cnn", subnets=4).replayed
    with pytest.raises(ConfigError, match="cannot be combined with sequence"):
        TrainConfig.from_spec(given, tmp_path / "a", sampler="evolution:2")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['subnet_count'\]"):
        TrainConfig.from_spec(given, tmp_path / "b", subnet_count=50)
    huge = RunSpec.create("digits-cnn", stages=2, subnets=10**10)  # lazy: nothing is built yet
    with pytest.raises(ConfigError, match="subnets would need about"):
        TrainConfig.from_spec(huge, tmp_path / "c")


def test_the_command_line_names_its_flags_for_a_short_sequence(tmp_path, capsys):
    from naspipe.cli import main

    path = tmp_path / "seq.json"
    spec = RunSpec.create("digits-cnn", subnets=3)
    path.write_text(json.dumps({"space": "digits-cnn", "subnets": [list(spec.stream[j]) for j in range(3)]}))
    assert main(["simulate", "--space", "digits-cnn", "--sequence", str(path), "--subnets", "5"]) == 2
    assert capsys.readouterr().err.strip() == "naspipe: error: --sequence holds 3 subnets, fewer than --subnets 5"


def test_a_training_run_plans_the_default_once_and_keeps_a_named_plan(tmp_path):
    """The default's plan is chosen when the config is built (before any process) and recorded in ``policy``; a
    plan the user names is kept (no planning); a run-time generated sequence is unknown up front: plan 0."""
    cfg = TrainConfig.create("digits-cnn", tmp_path / "a", stages=2, subnets=12, seed=1)
    assert cfg.policy.startswith("csp-plan:plan=") and cfg.describe()["policy"] == cfg.policy
    assert TrainConfig.create("digits-cnn", tmp_path / "a", stages=2, subnets=12, seed=1).policy == cfg.policy
    assert TrainConfig.create("digits-cnn", tmp_path / "b", stages=2, subnets=12,
                              policy="csp-plan:plan=5").policy == "csp-plan:plan=5"
    online = TrainConfig.create("digits-cnn", tmp_path / "c", stages=2, subnets=12, sampler="evolution")
    assert online.policy == "csp-plan:plan=0,eps=0.2" and make_scheduler(online.policy, stage_specs(
        online.space, online.partition)[0], online.stream()).plan == 0
    # past the planning budget (6,000 simulated subnets) only plan 0 is left: recorded without a simulation
    assert TrainConfig.create("digits-cnn", tmp_path / "d", stages=2, subnets=6001,
                              policy="csp-plan:eps=0.05").policy == "csp-plan:plan=0,eps=0.05"
