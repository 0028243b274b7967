"""The ``Policy`` object and ``naspipe.register_policy``: one place per policy, user policies end to end.

A policy registered from a module outside ``naspipe/`` (``tests/helpers/user_policies.py``, CSP with the newest ready
forward first) runs in ``naspipe simulate`` and ``naspipe train`` (stage processes import the module
themselves) and, being causal, verifies bit for bit against the reference. Unknown names fail loudly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import naspipe
from naspipe.cli import main
from naspipe.runspec.spec import RunSpec
from naspipe.sched.policies import CSPScheduler, follows_causal_rule, make_scheduler, stage_specs
from naspipe.sched.registry import (
    ENV,
    Policy,
    PolicyError,
    get_policy,
    load_policy_spec,
    parse_policy,
    register_policy,
    unregister_policy,
)
from naspipe.sched.trace import check_causal
from naspipe.sequences.sequence import UniformStream
from naspipe.sim import simulate
from naspipe.spaces.partition import partition
from naspipe.spaces.space import preset

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
HELPERS = TESTS / "helpers"  # the user modules, found by name


def test_builtin_policies_declare_their_features():
    csp, bsp, asp, pm = (get_policy(n) for n in ("csp", "bsp:8", "asp", "pipemare:t1=4"))
    assert csp.causal and csp.updates == "exact" and csp.in_flight == "one" and csp.context_switch
    assert not bsp.causal and bsp.updates == "group" and bsp.in_flight == "group"
    assert asp.updates == "stashed" and asp.in_flight == "pipeline" and not asp.delayed_shared
    assert pm.updates == "async" and pm.checkpoints and not pm.delayed_shared
    assert {"sequential", "csp", "csp-chain", "csp-bw"} <= {n for n in naspipe.policy_names() if get_policy(n).causal}
    assert all(get_policy(n).causal == issubclass(get_policy(n).scheduler, CSPScheduler)
               for n in ("sequential", "csp", "csp-chain", "csp-bw", "bsp", "asp", "pipedream", "2bw"))


def test_unknown_policies_and_bad_declarations_fail_loudly():
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        get_policy("nope")
    with pytest.raises(PolicyError, match="unknown update rule"):
        Policy("x", CSPScheduler, causal=False, updates="magic")
    with pytest.raises(PolicyError, match="a causal policy writes exactly"):
        Policy("x", CSPScheduler, causal=True, updates="stashed")
    with pytest.raises(PolicyError, match="bad policy name"):
        Policy("a:b", CSPScheduler, causal=True)
    with pytest.raises(PolicyError, match="StageScheduler subclass"):
        register_policy(Policy("x-bad", int, causal=False))
    with pytest.raises(PolicyError, match="already registered"):
        register_policy(Policy("csp", CSPScheduler, causal=True))
    with pytest.raises(PolicyError, match="neither a policy nor an importable module"):
        load_policy_spec("no_such_module_xyz:csp")


@pytest.fixture
def user_policy(monkeypatch):
    """``tests/helpers/user_policies.py`` imported (it registers csp-newest), and everything undone afterwards."""
    # register_policy records the module in ENV (restored afterwards). Another test of this worker may have
    # imported it already (RunSpec.create of "user_policies:..."): imported again, it registers again and records
    # its module last, which the tests below read
    others = [m for m in os.environ.get(ENV, "").split(",") if m and m != "user_policies"]
    monkeypatch.setenv(ENV, ",".join(others))
    sys.modules.pop("user_policies", None)
    if "csp-newest" in naspipe.policy_names():
        unregister_policy("csp-newest")
    import user_policies

    yield user_policies
    unregister_policy("csp-newest")
    sys.modules.pop("user_policies", None)


def test_a_registered_policy_runs_in_the_simulator_and_keeps_the_causal_rule(user_policy):
    assert os.environ[ENV].split(",")[-1] == "user_policies"  # what stage processes import on a miss
    assert load_policy_spec("user_policies:csp-newest") == "csp-newest" and follows_causal_rule("csp-newest")
    sp = preset("naspipe-k12")
    part = partition(sp, 4)
    stream = UniformStream(sp, 0, 40)
    mine = simulate(RunSpec.of(sp, part, stream, "csp-newest")).trace
    base = simulate(RunSpec.of(sp, part, stream, "csp")).trace
    blocks = [[b for b in part.blocks(s) if not sp.blocks[b].fixed] for s in range(part.stages)]
    assert check_causal(mine, [tuple(stream[j]) for j in range(40)], blocks) == []
    order = lambda t: [(e.stage, e.subnet) for e in sorted(t.compute_events(), key=lambda e: (e.start, e.stage))
                       if e.kind == "F"]
    assert order(mine) != order(base)  # the tie-break is really the user's
    assert type(make_scheduler("csp-newest", stage_specs(sp, part)[0], stream)).__name__ == "NewestFirstCSP"


@pytest.mark.slow
def test_a_user_policy_trains_in_stage_processes_and_verifies_against_the_reference(tmp_path, capsys, warm):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), str(ROOT)])}
    env.pop("PYTEST_CURRENT_TEST", None)
    env.pop("NASPIPE_POLICY_MODULES", None)

    def naspipe_cli(*args: str) -> str:  # a process of its own (forked warm), fresh stage processes
        return warm.stdout_of(list(args), tmp_path, env)

    common = ["--space", "tiny-transformer", "--subnets", "16", "--seed", "3", "--shared-layers", "serial"]
    out = naspipe_cli("simulate", *common, "--stages", "3", "--policy", "user_policies:csp-newest")
    assert "csp-newest" in out
    naspipe_cli("train", *common, "--stages", "3", "--policy", "user_policies:csp-newest", "--jitter-ms", "1",
                "--no-progress", "--out", "mine")
    # the reference and verify hold no user policy: in this process
    assert main(["reference", *common, "--no-progress", "--out", str(tmp_path / "ref")]) == 0
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "mine"), str(tmp_path / "ref")]) == 0
    assert capsys.readouterr().out.startswith("identical: 16 subnets")
    bad = warm.run(["train", *common, "--policy", "nope", "--out", "x"], tmp_path, env, timeout=60)
    assert bad.returncode == 2 and "unknown policy 'nope'" in bad.stderr and not (tmp_path / "x").exists()


def test_a_policy_defined_in_main_is_refused_before_any_process_starts(tmp_path):
    from naspipe.runtime import ConfigError, TrainConfig

    class MainCSP(CSPScheduler):
        name = "csp-main"

    MainCSP.__module__ = "__main__"  # as if defined in a notebook cell
    register_policy(Policy("csp-main", MainCSP, causal=True), replace=True)
    try:
        with pytest.raises(ConfigError, match="defined in __main__"):
            TrainConfig.create("digits-cnn", tmp_path / "o", stages=2, subnets=4, policy="csp-main")
        assert not (tmp_path / "o").exists()
    finally:
        unregister_policy("csp-main")
    with pytest.raises(PolicyError, match="unknown policy 'csp-main'"):
        get_policy("csp-main")


def test_options_a_scheduler_would_drop_are_refused_at_registration():
    with pytest.raises(PolicyError, match=r"options \['depth'\] are declared but its scheduler CSPScheduler"):
        register_policy(Policy("csp-depth", CSPScheduler, causal=True, options={"depth": int}))
    with pytest.raises(PolicyError):
        get_policy("csp-depth")


def test_a_policy_module_that_raises_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken_policy_module.py").write_text("1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from naspipe.cli import main

    rc = main(["simulate", "--space", "naspipe-k12", "--subnets", "4", "--policy", "broken_policy_module:x"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "raised ZeroDivisionError" in err, err


def test_a_negative_option_meets_the_policys_own_rule_first():
    """bsp:-3 was refused as "must be >= 0" and bsp:0 as ">= 1": one rule, said once."""
    for text in ("bsp:-3", "bsp:0"):
        with pytest.raises(PolicyError, match="micro_batches must be a whole number >= 1"):
            parse_policy(text)
    with pytest.raises(PolicyError, match="pipemare option 't2' must be >= 0, got -0.1"):  # no rule of its own
        parse_policy("pipemare:t2=-0.1")


def test_policy_settings_read_the_declaration_without_a_scheduler(monkeypatch):
    """What a stage's scheduler is built with, from the declaration alone: the string wins over the given options,
    the scheduler's own defaults fill the rest; ``make_scheduler`` builds with exactly these (one source)."""
    from naspipe.sched.base import StageScheduler
    from naspipe.sched.registry import micro_batches_of, policy_settings

    built = []
    init = StageScheduler.__init__
    monkeypatch.setattr(StageScheduler, "__init__", lambda self, *a, **k: built.append(1) or init(self, *a, **k))
    assert policy_settings("bsp") == {"micro_batches": 4} and micro_batches_of("bsp") == 4
    assert policy_settings("bsp:8", micro_batches=2) == {"micro_batches": 8}
    assert policy_settings("bsp", micro_batches=2) == {"micro_batches": 2} == {"micro_batches": micro_batches_of(
        "bsp", micro_batches=2)}
    assert micro_batches_of("csp") is None and policy_settings("pipemare:t1=4") == {"warmup": 0}  # (t1: the rule's)
    for bad, message in ((dict(policy="bsp", micro_batches=2.5), "micro_batches must be a whole number >= 1"),
                         (dict(policy="csp", micro_batches=2), r"policy 'csp' takes no option \['micro_batches'\]"),
                         (dict(policy="csp-bw", max_pending_w=0), "max_pending_w must be a whole number >= 1")):
        policy = bad.pop("policy")
        with pytest.raises(PolicyError, match=message):
            policy_settings(policy, **bad)
    assert built == []
    sp = preset("naspipe-k12")
    spec = stage_specs(sp, partition(sp, 2))[0]
    assert make_scheduler("bsp", spec, UniformStream(sp, 0, 8)).micro_batches == 4 and built
