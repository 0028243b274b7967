"""A run is prepared once (model probes, plan choice, resume: ``naspipe.runtime.preparation``); ``replace`` builds
nothing (issue 45, item 2).

The launcher's process part (``_run``) is replaced by a stub that records the config it got: what is counted
happens before any process starts, so nothing is spawned here.
"""

from __future__ import annotations

import pytest

import naspipe
from naspipe.cli import main
from naspipe.runtime import ConfigError, TrainConfig, preparation
from naspipe.runtime.processes import launcher
from naspipe.sched.base import StageScheduler

SPACE = "tiny-transformer"


@pytest.fixture
def counted(monkeypatch):
    """``{"probes": model probes, "plans": plan choices, "launched": configs the launcher would start}``."""
    counts = {"probes": 0, "plans": 0}
    launched = []
    probe, planned = preparation.check_model_of, TrainConfig.planned

    def counting_probe(cfg):
        counts["probes"] += 1
        return probe(cfg)

    def counting_plan(self):
        counts["plans"] += 1
        return planned(self)

    def stub_run(config, port):
        launched.append(config)
        raise launcher.TrainError("stopped before any process (test)")

    monkeypatch.setattr(preparation, "check_model_of", counting_probe)
    monkeypatch.setattr(TrainConfig, "planned", counting_plan)
    monkeypatch.setattr(launcher, "_run", stub_run)
    counts["launched"] = launched
    return counts


def test_a_command_line_run_is_prepared_once(tmp_path, counted, capsys):
    rc = main(["train", "--space", SPACE, "--stages", "2", "--subnets", "4", "--out", str(tmp_path / "run"),
               "--no-progress"])
    assert rc == 1 and "stopped before any process (test)" in capsys.readouterr().err
    assert (counted["probes"], counted["plans"]) == (1, 1)
    (cfg,) = counted["launched"]
    assert cfg.prepared and cfg.policy.startswith("csp-plan:plan=")  # the plan chosen in that one preparation


def test_a_library_run_is_prepared_once_and_a_replaced_config_once_more(tmp_path, counted):
    with pytest.raises(launcher.TrainError):
        naspipe.train(space=SPACE, out=tmp_path / "a", stages=2, subnets=4, progress=False)
    assert (counted["probes"], counted["plans"]) == (1, 1)
    cfg = counted["launched"][0]
    with pytest.raises(launcher.TrainError):
        naspipe.train(cfg)  # already prepared: taken as it is
    assert counted["probes"] == 1
    changed = cfg.replace(out=tmp_path / "b", policy="sequential")
    assert not changed.prepared
    with pytest.raises(launcher.TrainError):
        naspipe.train(changed)  # a changed run: prepared again, once
    assert counted["probes"] == 2 and counted["launched"][-1].prepared


def test_replace_checks_fields_but_builds_nothing(tmp_path, monkeypatch):
    cfg = TrainConfig.create(SPACE, tmp_path / "x", stages=2, subnets=8, policy="bsp:2", checkpoint_every=4,
                             progress=False)
    built = {"schedulers": 0, "models": 0, "preparations": 0}
    from naspipe.models.stage import StageModel

    for cls, key in ((StageScheduler, "schedulers"), (StageModel, "models")):
        init = cls.__init__

        def counting(self, *a, _init=init, _key=key, **k):
            built[_key] += 1
            return _init(self, *a, **k)

        monkeypatch.setattr(cls, "__init__", counting)
    prepare = preparation.prepare

    def counting_prepare(*a, **k):
        built["preparations"] += 1
        return prepare(*a, **k)

    monkeypatch.setattr(preparation, "prepare", counting_prepare)
    csp = cfg.replace(policy="csp", device_memory="50%", checkpoint_every=3, micro_batches=None)
    cfg.replace(micro_batches=None, checkpoint_every=2, out=tmp_path / "y")
    assert built == {"schedulers": 0, "models": 0, "preparations": 0}
    assert csp.device_memory == "50%" and not csp.prepared
    # the cheap checks still run, with their messages: the policy's options from its declaration
    with pytest.raises(ConfigError, match="checkpoints only at group boundaries: checkpoint_every must be a "
                                          "multiple of its 2 micro-batches, got 3"):
        cfg.replace(checkpoint_every=3)
    with pytest.raises(ConfigError, match="checkpoints only at group boundaries: checkpoint_every must be a "
                                          "multiple of its 4 micro-batches, got 2"):
        cfg.replace(policy="bsp", checkpoint_every=2)  # bsp's default group, read from its scheduler's signature
    with pytest.raises(ConfigError, match="micro_batches must be a whole number"):
        cfg.replace(policy="bsp", micro_batches=2.5)
    with pytest.raises(ConfigError, match="takes no option"):
        cfg.replace(policy="csp", micro_batches=2)
    assert built == {"schedulers": 0, "models": 0, "preparations": 0}
    # the memory budget (stage models built) is the preparation's
    with pytest.raises(ConfigError, match="gives stage 0"):
        prepare(csp.replace(device_memory="1B", checkpoint_every=None))  # (the function itself, not the counter)
    assert built["models"] > 0 and built["preparations"] == 0


def test_prepare_takes_a_prepared_config_as_it_is(tmp_path):
    cfg = TrainConfig.create(SPACE, tmp_path / "x", stages=2, subnets=4, policy="csp", progress=False)
    assert cfg.prepared and preparation.prepare(cfg) is cfg
    assert cfg == cfg.replace(progress=False)  # prepared is not part of what the run is
