"""``StageRun``: one stage's place in the run, resolved once (issue 26: the worker used to pass the same values
to four objects and parse the policy string three ways)."""

from __future__ import annotations

import pytest
import torch

from naspipe.runtime import TrainConfig
from naspipe.runtime.stagerun import StageRun
from naspipe.sched.registry import PolicyError


def test_global_ranks_map_replica_major_onto_stages_and_replicas(tmp_path):
    cfg = TrainConfig.create("digits-cnn", tmp_path / "o", stages=2, subnets=4, replicas=2, policy="csp",
                             progress=False)
    runs = [StageRun.of(cfg, r, torch.device("cpu")) for r in range(cfg.world)]
    assert [(r.stage, r.replica) for r in runs] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [r.leader for r in runs] == [True, True, False, False]
    assert [(r.first, r.last) for r in runs[:2]] == [(True, False), (False, True)]
    assert runs[3].where() == "stage 1 (replica 1)" and StageRun.local(1, 2, "csp").where() == "stage 1"


def test_the_policy_is_parsed_once_into_its_name_and_options():
    run = StageRun.local(0, 4, "pipemare:t1=200,warmup=3")
    assert run.name == "pipemare" and run.async_options == {"t1": 200, "warmup": 3}
    bsp = StageRun.local(0, 4, "bsp:8")
    assert bsp.name == "bsp" and bsp.async_options == {}  # the scheduler's option, not an update rule's
    assert StageRun.local(0, 1, "csp").device == torch.device("cpu")
    with pytest.raises(PolicyError):
        StageRun.local(0, 1, "no-such-policy")


def test_runspec_owns_the_replicas_and_their_exchange():
    from naspipe.runspec.spec import RunSpec, RunSpecError

    spec = RunSpec.create("digits-cnn", stages=2, subnets=4, replicas=2, replica_exchange="native")
    assert (spec.replicas, spec.replica_exchange) == (2, "native")
    for kw, message in (({"replicas": 3}, "must divide the batch size 32"), ({"replicas": 0}, "whole number >= 1"),
                        ({"replica_exchange": "native"}, "only applies with replicas > 1"),
                        ({"replicas": 2, "replica_exchange": "fast"}, "unknown replica exchange")):
        with pytest.raises(RunSpecError, match=message):
            RunSpec.create("digits-cnn", stages=2, subnets=4, **kw)
